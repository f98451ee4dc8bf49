// The memory plan: a pure function of (config, layout, budget, context length, chunk size) that
// says where every byte goes. The runtime allocates exactly these arenas, so the plan can be
// tested without running a model.
//
// Order of use for memory above the floor (most bytes saved per byte spent first):
//   1. expert slots up to one layer's top-k (a layer's missing experts are read in parallel),
//   2. pinned trunk, in forward order (every trunk byte is read once per token when streamed;
//      an expert slot saves a read only when the router picks that expert again), after the
//      matrices PlanEnv.pinFirst names (a drafter's second read of K3's lm_head),
//   3. more expert slots, up to every expert.
// When the whole trunk is pinned, the streaming ring is not needed.

import * as fs from 'node:fs';
import * as os from 'node:os';
import type { ModelConfig } from '../checkpoint/config.js';
import { UserError } from '../util/errors.js';
import { GiB, MiB, formatBytes } from '../util/format.js';
import type { Layout } from './layout.js';
import { kernelMembers, threadScratchBytes } from '../kernels/fast.js';
import { BOUNCE_BYTES } from './direct-reader.js';
import { VERIFY_BUFFER_BYTES } from './verified-reader.js';

/** What Node itself, the engine's code, one kernel worker and the V8 heap take before any weight:
 *  a bare node is ~39 MiB; the demo model loaded for `k3 run` or `k3 serve` measures 107-110 MiB
 *  RSS with V8's default young generation (semi-spaces grow to 16 MiB), ~90 MiB with
 *  `k3 serve`'s --semi-space-growth-factor=1 (src/cli/serve.ts); AMD EPYC, Node 20. */
export const BASELINE_BYTES = 112 * MiB;

/** One kernel worker thread (kernels/pool.ts), measured: its V8 isolate with Node's bootstrap
 *  heap (~9 MiB; young and old generations capped by pool.ts WORKER_LIMITS), its glibc malloc
 *  arena and thread stack (~5 MiB). Peak RSS rose 11-19 MiB from 1 to 2 threads and 13-15 MiB a
 *  worker from 1 to 4 on the synthetic K3 and K2 of test/store/memory.test.ts (AMD EPYC, Node 20;
 *  docs/MEMORY.md), within run-to-run noise of a few MiB. */
export const WORKER_BYTES = 16 * MiB;

/** What runs beside the weights that the plan counts too: the compute threads and how weights are read. */
export interface PlanEnv {
  /** Compute threads in all, the calling thread included (Model.load's `threads`); default 1 (no workers). */
  threads?: number;
  /** Reads may go through O_DIRECT bounce buffers (`--io direct` or `auto`). Default false. */
  directIo?: boolean;
  /** Reads are checked against known sha256 (a pack, a `k3 verify` sidecar): the checker's buffers. Default false. */
  verified?: boolean;
  /** Trunk matrices (bases) pinned before the forward order: read more than once a sweep when streamed (a drafter's lm_head). */
  pinFirst?: readonly string[];
  /** Bytes of the budget kept for memory beside the model (a drafter's weights, KV cache and work area): the plan gets the rest. */
  reservedBytes?: number;
  /** Widest matrix (columns) something beside the model runs on the model's kernels (a drafter's context projection). */
  kernelCols?: number;
}

/** JavaScript memory of one sequence in an engine's decode batch, besides its state: its job,
 *  sampler and stop objects, and per token its logits row and the sampler's double-precision
 *  copies (candidates, sort order, softmax: about 40 bytes per vocabulary entry). */
export function engineSequenceBytes(cfg: ModelConfig): number {
  return 40 * cfg.vocabSize + 256 * 1024;
}

export interface Plan {
  /** What the model may use: the budget asked for, less reservedBytes. */
  budgetBytes: number;
  /** Of the budget asked for, kept beside the model (PlanEnv.reservedBytes; a drafter). */
  reservedBytes: number;
  /** The smallest budget that works: what the engine may hold at once at this context and chunk
   *  (baseline + resident small tensors + state + MLA cache for `ctx` positions + scratch + the
   *  minimal ring and one expert slot). Like the budget it is a ceiling on peak RSS, so the two
   *  compare like with like; measured peak RSS is at most the budget and may be below the floor
   *  (pages of an unused context or of the scratch slack are never touched). */
  floorBytes: number;
  /** Bytes the plan uses (<= budget; less when the model is smaller than the budget). */
  totalBytes: number;
  baselineBytes: number;
  /** Sequences an engine decodes together (src/api/engine.ts; `k3 serve --parallel`); 0 for one
   *  sequence (`k3 run`). */
  parallel: number;
  /** What those sequences hold beyond the plan's one state: `parallel` more states (the running
   *  ones but the plan's own, and one prefix state held for the next request) and each one's
   *  engineSequenceBytes. */
  engineBytes: number;
  smallBytes: number;
  /** Made from the weights at first use and kept: K3's Attention Residuals folds (derivedBytes). */
  derivedBytes: number;
  kdaStateBytes: number;
  mlaCacheBytes: number;
  ctx: number;
  scratchBytes: number;
  /** Memory of the bf16 block decoder (a packed directory with coded trunk matrices; else 0). */
  decodeBytes: number;
  /** Compute threads per kernel instance, the calling thread included (PlanEnv.threads). */
  threads: number;
  /** Kernel instances (one memory and one set of workers each; kernels/memory.ts kernelMembers). */
  kernelMembers: number;
  /** The threads' memory: members x (threads - 1) workers of WORKER_BYTES, and every thread's
   *  scratch area in kernel memory (fast.ts threadScratchBytes). */
  threadBytes: number;
  /** Kernel memory that calls use and give back (activations copied in, outputs before they are
   *  copied out): at most one copy of the activations `scratchBytes` counts. */
  kernelTempBytes: number;
  /** Read buffers: O_DIRECT bounce buffers (direct-reader.ts) and the sha256 checker's (verified-reader.ts). */
  readBufferBytes: number;
  ringBytes: number;
  pinnedBytes: number;
  /** How many pieces of pinOrder() are pinned. */
  pinnedPieces: number;
  /** The matrices pinned before the forward order (PlanEnv.pinFirst); pinnedMask() says which pieces. */
  pinFirst: readonly string[];
  streamedBytes: number;
  trunkBytes: number;
  expertBytes: number;
  expertSlots: number;
  expertCacheBytes: number;
  expertsTotal: number;
  embedRowBytes: number;
  /** The embedding table kept in memory (only when everything else already is): no read per token. */
  embedResidentBytes: number;
  maxPieceBytes: number;
}

/** Bytes of one sequence's state: the model says (model/state.ts stateSize, from its allocators). */
export interface StateSize {
  /** KDA recurrent state, conv tails and work vectors, f32, independent of context. */
  perSequenceBytes: number;
  /** MLA latent + rope key per position over all MLA layers, f32. */
  perPositionBytes: number;
}

/** f32 arrays the model makes from small tensors and keeps: one AttnRes fold per site of K3
 *  (before each layer's attention and FFN, and the output; model/k3.ts). */
export function derivedBytes(cfg: ModelConfig): number {
  return cfg.attnResBlock ? (2 * cfg.numLayers + 1) * cfg.hiddenSize * 4 : 0;
}

/** Activation scratch for a chunk: the widest arrays a block keeps alive at once, doubled for GC slack. */
export function scratchBytes(cfg: ModelConfig, chunk: number): number {
  return 2 * activationBytes(cfg, chunk) + 16 * MiB;
}

/** Kernel temporaries for a chunk: the kernels copy a call's inputs and outputs into their memory
 *  and release them after; at most one copy of the arrays a block keeps alive. */
export function kernelTempBytes(cfg: ModelConfig, chunk: number): number {
  return activationBytes(cfg, chunk);
}

/** Widest matrix the kernels must handle (columns): the width of each thread's scratch. */
export function kernelMaxCols(cfg: ModelConfig, layout: Layout, env: PlanEnv = {}): number {
  let m = Math.max(cfg.hiddenSize, env.kernelCols ?? 0);
  for (const t of layout.matrices.values()) m = Math.max(m, t.cols);
  return Math.max(m, cfg.moe.intermediate, cfg.moe.latentDim ?? 0, cfg.mla.kvLoraRank);
}

/** f32 bytes of the widest arrays a block keeps alive at once for a chunk, and a logits row. */
function activationBytes(cfg: ModelConfig, chunk: number): number {
  const D = cfg.hiddenSize;
  const P = cfg.kda ? cfg.kda.heads * cfg.kda.headDim : 0;
  const m = cfg.mla;
  const mlaW = m.heads * (m.nopeDim + m.ropeDim) + m.heads * m.vDim * 2 + (m.qLoraRank ?? 0);
  const moeW = (cfg.moe.latentDim ?? D) * (cfg.moe.topK + 2) + cfg.moe.intermediate * cfg.moe.shared * 3 + cfg.moe.experts;
  const perToken = 3 * cfg.intermediateSize + 10 * P + mlaW + moeW + 14 * D + cfg.vocabSize;
  return 4 * (chunk * perToken + cfg.vocabSize);
}

/** Bytes of the threads of `members` kernel instances of `threads` threads each. */
function threadsBytes(members: number, threads: number, maxCols: number): number {
  return members * ((threads - 1) * WORKER_BYTES + threads * threadScratchBytes(maxCols));
}

/**
 * The plan for `budget`. The kernel instances a budget needs (one per 3.75 GiB of weight memory)
 * each bring their own threads, so the threads of every instance past the first come out of what
 * the weights may use: the plan is remade with less until the instance count agrees.
 */
export function makePlan(cfg: ModelConfig, layout: Layout, s: StateSize, budget: number, ctx: number, chunk: number, parallel = 0, env: PlanEnv = {}): Plan {
  const reserved = env.reservedBytes ?? 0;
  let members = 1;
  for (;;) {
    const p = planFor(cfg, layout, s, Math.max(0, budget - reserved), ctx, chunk, parallel, env, members);
    const need = kernelMembers(p.ringBytes + p.pinnedBytes + p.expertCacheBytes);
    p.reservedBytes = reserved;
    if (need <= members) return p;
    members = need;
  }
}

function planFor(cfg: ModelConfig, layout: Layout, s: StateSize, budget: number, ctx: number, chunk: number, parallel: number, env: PlanEnv, members: number): Plan {
  const threads = Math.max(1, Math.floor(env.threads ?? 1));
  const threadMem = threadsBytes(members, threads, kernelMaxCols(cfg, layout, env));
  const firstThreads = threadsBytes(1, threads, kernelMaxCols(cfg, layout, env));
  const kernelTemp = kernelTempBytes(cfg, chunk);
  const readBuffers = (env.directIo ? BOUNCE_BYTES : 0) + (env.verified ? VERIFY_BUFFER_BYTES : 0);
  const mlaCacheBytes = s.perPositionBytes * ctx;
  const engineBytes = parallel * (s.perSequenceBytes + mlaCacheBytes + engineSequenceBytes(cfg));
  const scratch = scratchBytes(cfg, chunk);
  const expertsTotal = layout.moeLayers * cfg.moe.experts;
  // The decoder holds one block in (stored, at most raw) and one out, in 64 KiB pages.
  const decodeBytes = layout.maxCodedBlockBytes > 0 ? Math.ceil((4 * layout.maxCodedBlockBytes + 256) / 65536 + 1) * 65536 : 0;
  const derived = derivedBytes(cfg);
  // (the threads of instances past the first are counted in `fixed`, so the floor, made with one, stays put)
  const fixed = BASELINE_BYTES + engineBytes + layout.smallBytes + derived + s.perSequenceBytes + mlaCacheBytes + scratch + decodeBytes + threadMem + kernelTemp + readBuffers;
  const minRing = 3 * layout.maxPieceBytes;
  const minSlots = expertsTotal > 0 ? 1 : 0;
  const floor = fixed - (threadMem - firstThreads) + minRing + minSlots * layout.expertBytes;

  const plan: Plan = {
    budgetBytes: budget,
    reservedBytes: 0,
    floorBytes: floor,
    totalBytes: 0,
    baselineBytes: BASELINE_BYTES,
    parallel,
    engineBytes,
    smallBytes: layout.smallBytes,
    derivedBytes: derived,
    kdaStateBytes: s.perSequenceBytes,
    mlaCacheBytes,
    ctx,
    scratchBytes: scratch,
    decodeBytes,
    threads,
    kernelMembers: members,
    threadBytes: threadMem,
    kernelTempBytes: kernelTemp,
    readBufferBytes: readBuffers,
    ringBytes: minRing,
    pinnedBytes: 0,
    pinnedPieces: 0,
    pinFirst: env.pinFirst ?? [],
    streamedBytes: layout.trunkBytes,
    trunkBytes: layout.trunkBytes,
    expertBytes: layout.expertBytes,
    expertSlots: minSlots,
    expertCacheBytes: 0,
    expertsTotal,
    embedRowBytes: layout.embed.data.nbytes / cfg.vocabSize,
    embedResidentBytes: 0,
    maxPieceBytes: layout.maxPieceBytes,
  };
  if (budget >= floor + threadMem - firstThreads) spend(plan, cfg, layout, budget - floor - (threadMem - firstThreads));
  plan.expertCacheBytes = plan.expertSlots * layout.expertBytes;
  // 4. the embedding table, last: one row per token is all it saves.
  const embedBytes = layout.embed.data.nbytes;
  if (budget >= fixed + minRing + minSlots * layout.expertBytes && plan.pinnedPieces === layout.sequence.length && plan.expertSlots === expertsTotal) {
    const used = fixed + plan.ringBytes + plan.pinnedBytes + plan.expertCacheBytes;
    if (budget - used >= embedBytes) plan.embedResidentBytes = embedBytes;
  }
  plan.totalBytes = fixed + plan.ringBytes + plan.pinnedBytes + plan.expertCacheBytes + plan.embedResidentBytes;
  return plan;
}

/** The order the trunk is pinned in: the pieces of the `first` matrices, then the rest in forward order. */
export function pinOrder(layout: Layout, first: readonly string[]): Layout['sequence'] {
  const ahead = first.flatMap((b) => layout.matrices.get(b)?.pieces ?? []);
  const taken = new Set(ahead.map((p) => p.seq));
  return [...ahead, ...layout.sequence.filter((p) => !taken.has(p.seq))];
}

/** Per piece (by seq), 1 where the plan pins it: the first pinnedPieces of pinOrder(). */
export function pinnedMask(plan: Plan, layout: Layout): Uint8Array {
  const mask = new Uint8Array(layout.sequence.length);
  for (const p of pinOrder(layout, plan.pinFirst).slice(0, plan.pinnedPieces)) mask[p.seq] = 1;
  return mask;
}

/** What the budget holds past the floor (`left` bytes) goes, in order, to: 1. a layer's worth of
 *  expert slots, 2. the pinned trunk in pinOrder (the ring goes when everything is pinned),
 *  3. the rest of the experts. */
function spend(plan: Plan, cfg: ModelConfig, layout: Layout, left: number): void {
  const minRing = plan.ringBytes;
  const toTopK = Math.min(Math.max(0, Math.min(cfg.moe.topK, plan.expertsTotal) - plan.expertSlots), Math.floor(left / Math.max(1, layout.expertBytes)));
  if (layout.expertBytes > 0) {
    plan.expertSlots += toTopK;
    left -= toTopK * layout.expertBytes;
  }
  let pinned = 0;
  let count = 0;
  const seq = pinOrder(layout, plan.pinFirst);
  for (let i = 0; i < seq.length; i++) {
    const last = i === seq.length - 1;
    const avail = left + (last ? minRing : 0); // pinning the last piece frees the ring
    if (seq[i]!.bytes > avail) break;
    left = avail - seq[i]!.bytes;
    pinned += seq[i]!.bytes;
    count++;
    if (last) plan.ringBytes = 0;
  }
  plan.pinnedBytes = pinned;
  plan.pinnedPieces = count;
  plan.streamedBytes = layout.trunkBytes - pinned;
  if (layout.expertBytes > 0) {
    const more = Math.min(plan.expertsTotal - plan.expertSlots, Math.floor(left / layout.expertBytes));
    plan.expertSlots += more;
  }
}

/** The plan with every weight resident: the size `--preset max` asks for. */
export function maxBudget(cfg: ModelConfig, layout: Layout, s: StateSize, ctx: number, chunk: number, parallel = 0, env: PlanEnv = {}): number {
  const p = makePlan(cfg, layout, s, 0, ctx, chunk, parallel, env);
  const weights = layout.trunkBytes + p.expertsTotal * layout.expertBytes;
  const members = kernelMembers(weights);
  const threads = Math.max(1, Math.floor(env.threads ?? 1));
  const cols = kernelMaxCols(cfg, layout, env);
  const moreThreads = threadsBytes(members, threads, cols) - threadsBytes(1, threads, cols);
  return p.floorBytes - p.ringBytes - p.expertSlots * layout.expertBytes + weights + layout.embed.data.nbytes + moreThreads + (env.reservedBytes ?? 0);
}

/** The plan's items, each named, in `k3 plan`'s order: they add up to `totalBytes`. */
export function planItems(p: Plan): { key: string; label: string; bytes: number; note: string }[] {
  const workers = p.kernelMembers * (p.threads - 1);
  return [
    { key: 'baseline_bytes', label: 'node + code baseline', bytes: p.baselineBytes, note: 'Node, the engine and kernel code, the main V8 heap' },
    { key: 'thread_bytes', label: 'kernel threads', bytes: p.threadBytes, note: `${p.threads} thread(s)${p.kernelMembers > 1 ? ` x ${p.kernelMembers} kernel instances` : ''}: ${workers} worker(s) of ${formatBytes(WORKER_BYTES)}, and each thread's scratch` },
    { key: 'kernel_temp_bytes', label: 'kernel temporaries', bytes: p.kernelTempBytes, note: 'activations copied into kernel memory during a call' },
    { key: 'read_buffer_bytes', label: 'read buffers', bytes: p.readBufferBytes, note: 'O_DIRECT bounce buffers, sha256 checks of packed records' },
    { key: 'decode_bytes', label: '--compress decoder', bytes: p.decodeBytes, note: 'one coded block in, one out' },
    { key: 'engine_bytes', label: 'engine sequences', bytes: p.engineBytes, note: `${p.parallel} more states and their arrays (--parallel ${p.parallel})` },
    { key: 'resident_small_bytes', label: 'resident small tensors', bytes: p.smallBytes, note: 'norms, biases, conv taps' },
    { key: 'derived_bytes', label: 'derived tensors', bytes: p.derivedBytes, note: 'Attention Residuals folds, f32' },
    { key: 'kda_state_bytes', label: 'KDA state', bytes: p.kdaStateBytes, note: 'per sequence, f32' },
    { key: 'mla_cache_bytes', label: 'MLA latent cache', bytes: p.mlaCacheBytes, note: `${p.ctx} positions` },
    { key: 'scratch_bytes', label: 'scratch', bytes: p.scratchBytes, note: 'activations for a chunk, doubled for GC slack' },
    { key: 'pinned_trunk_bytes', label: 'pinned trunk', bytes: p.pinnedBytes, note: `${p.pinnedPieces} pieces` },
    { key: 'ring_bytes', label: 'streaming ring', bytes: p.ringBytes, note: p.ringBytes ? `3+ x largest piece (${formatBytes(p.maxPieceBytes)})` : 'not needed: trunk fully pinned' },
    { key: 'expert_cache_bytes', label: 'expert cache', bytes: p.expertCacheBytes, note: `${p.expertSlots} of ${p.expertsTotal} experts of ${formatBytes(p.expertBytes)}` },
    { key: 'embedding_resident_bytes', label: 'embedding (resident)', bytes: p.embedResidentBytes, note: 'else one row per token, read on demand' },
  ];
}

export const PRESETS = ['laptop', 'desktop', 'workstation', 'server', 'max', 'auto'] as const;
export type Preset = (typeof PRESETS)[number];
const PRESET_BYTES: Record<Exclude<Preset, 'max' | 'auto'>, number> = {
  laptop: 8 * GiB,
  desktop: 32 * GiB,
  workstation: 128 * GiB,
  server: 512 * GiB,
};

/** "2G", "512M", "1.5GiB", "8GB", "123456" -> bytes. K/M/G/T are powers of 1024 (GB etc. are powers of 1000). */
export function parseSize(s: string, what = '--memory'): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB]?)\s*$/.exec(s);
  if (!m) throw new UserError(`${what}: ${JSON.stringify(s)} is not a size (e.g. 2G, 512M, 8GB, or a byte count)`);
  const n = Number(m[1]);
  const unit = m[2]!.toUpperCase();
  const decimal = m[3] === 'B' || m[3] === 'b';
  const pow = { '': 0, K: 1, M: 2, G: 3, T: 4 }[unit]!;
  const bytes = Math.floor(n * (decimal && pow > 0 ? 1000 : 1024) ** pow);
  if (bytes <= 0) throw new UserError(`${what}: size must be positive`);
  return bytes;
}

/** The memory limit of this process's cgroup (v2 memory.max, or v1 memory.limit_in_bytes), if any. */
export function cgroupLimit(): number | null {
  let limit: number | null = null;
  const take = (file: string) => {
    try {
      const v = fs.readFileSync(file, 'utf8').trim();
      if (/^\d+$/.test(v) && Number(v) < 2 ** 60) limit = Math.min(limit ?? Infinity, Number(v));
    } catch {
      /* not there */
    }
  };
  let cg: string;
  try {
    cg = fs.readFileSync('/proc/self/cgroup', 'utf8');
  } catch {
    return null;
  }
  for (const line of cg.split('\n')) {
    const [, ctrl, p] = line.split(':');
    if (p === undefined) continue;
    if (ctrl === '') take(`/sys/fs/cgroup${p}/memory.max`);
    if (ctrl!.split(',').includes('memory')) {
      take(`/sys/fs/cgroup/memory${p}/memory.limit_in_bytes`);
      take('/sys/fs/cgroup/memory/memory.limit_in_bytes');
    }
  }
  take('/sys/fs/cgroup/memory.max');
  return limit;
}

/** Memory this process may use: MemAvailable, capped by the cgroup's limit when set; 90% of that. */
export function autoBudget(): number {
  let avail = os.freemem();
  try {
    const mi = fs.readFileSync('/proc/meminfo', 'utf8');
    const m = /MemAvailable:\s+(\d+) kB/.exec(mi);
    if (m) avail = Number(m[1]) * 1024;
  } catch {
    /* not Linux */
  }
  const cg = cgroupLimit();
  if (cg !== null) avail = Math.min(avail, cg);
  return Math.floor(avail * 0.9);
}

/** Budget bytes from --memory and --preset (default: auto). */
export function resolveBudget(memory: string | undefined, preset: string | undefined, maxBytes: () => number): number {
  if (memory !== undefined && preset !== undefined) throw new UserError('give either --memory or --preset, not both');
  if (memory !== undefined) return parseSize(memory);
  const p = (preset ?? 'auto') as Preset;
  if (!PRESETS.includes(p)) throw new UserError(`--preset must be one of ${PRESETS.join(', ')}`);
  if (p === 'max') return maxBytes();
  if (p === 'auto') return autoBudget();
  return PRESET_BYTES[p];
}

/** Refuse a budget below the floor, naming the smallest one that works. */
export function checkFloor(plan: Plan): void {
  if (plan.budgetBytes < plan.floorBytes) {
    const seqs = (plan.parallel > 1 ? ` with ${plan.parallel} sequences decoded together (--parallel ${plan.parallel})` : '') +
      (plan.threads > 1 ? ` on ${plan.threads} threads (each past the first adds ${formatBytes(WORKER_BYTES)}; -t sets them)` : '');
    const r = plan.reservedBytes;
    const kept = r > 0 ? ` (${formatBytes(plan.budgetBytes + r)} less the ${formatBytes(r)} kept for the drafter)` : '';
    const least = plan.floorBytes + r;
    throw new UserError(`memory budget ${formatBytes(plan.budgetBytes)}${kept} is below this model's floor${seqs}: the smallest budget that works${r > 0 ? ' with the drafter' : ''} is ${least} bytes (${formatBytes(least)}; --memory ${Math.ceil(least / MiB)}M)`);
  }
}
