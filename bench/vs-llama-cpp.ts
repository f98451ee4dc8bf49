// Side by side with llama.cpp (issue 5, item 5): the same random K3-shaped weights in the official
// layout (read by this engine) and as GGUF (read by the llama.cpp that node-llama-cpp@3.21.1
// bundles, architecture `kimi-k3`, CPU only).
//
// 1. Agreement. A small K3 (the `demo` dims) with BF16 routed experts, so that the GGUF holds every
//    weight as F32 exactly (llama.cpp rounds activations to 8 bits in MXFP4 matmuls, so MXFP4
//    experts would drift by design). One prompt of ids through both engines; we compare the
//    next-token distribution after the prompt and along a greedy continuation. node-llama-cpp
//    exposes probabilities, not logits: it softmaxes llama.cpp's raw logits in f32, so we compare
//    log-probabilities (= logits up to the constant softmax removes). llama.cpp's numbers depend
//    on its batch size (a prompt in one ubatch runs the chunked KDA path and batched matmuls;
//    one token per ubatch runs the recurrent path): both are shown.
//    llama.cpp keeps its KV cache (for MLA: the normalized latent and the rope part) in F16 by
//    default, which alone moves log-probabilities by ~5e-4 here; the agreement contexts use an F32
//    cache. Our engine runs with the MLA latent-norm epsilon of config.json (rms_norm_eps, as
//    llama.cpp) instead of its 1e-6 default; the one remaining known difference is the KDA q/k L2
//    norm (x/sqrt(Σx²+1e-6) here, x/max(‖x‖, 1e-5) in llama.cpp).
// 2. Speed. The k3-medium shape (vocab 32768, hidden 2048, 9 layers with MLA at 4, 8, 9, 16 KDA
//    heads of 128, 16 MLA heads, q-LoRA 512, kv-LoRA 256, dense 8192, 64 experts top-8 of 768 in
//    a 1024 latent, 2 shared) with MXFP4 experts; GGUF with an F16 trunk (BF16 in our checkpoint)
//    and the MXFP4 experts repacked losslessly. Prompt processing (pp) and decode (tg) tok/s at
//    threads 1 and 2 for llama.cpp, and for our engine at the thread counts it supports, then the
//    ratio ours / llama.cpp. Decode runs right after the prompt (a 64-token context). llama.cpp
//    runs as it does by default (F16 KV cache, 8-bit activations in the MXFP4 expert matmuls).
//
// Checkpoints and GGUFs are written under models/bench/ (git-ignored) and reused when present.
//
// llama.cpp runs in a child process (one per part), so that a native abort (GGML_ASSERT) kills only
// the child: the bench then prints the assert text, and the speed part retries once with a fallback
// GGUF, the trunk in BF16 (what llama.cpp's converter writes for this BF16 checkpoint by default; no
// BF16 matrix enters llama.cpp's AMX buffer type on Intel AMX CPUs), or F32 if BF16 was the one that
// failed. Every llama.cpp row names the GGUF variant it was measured with. node-llama-cpp 3.21.1 has
// no option to turn off llama.cpp's extra (AMX / repacked) buffer types (llama_model_params
// use_extra_bufts is not among its model options), so a different GGUF is the only fallback.
//
// node-llama-cpp (about 700 MB of llama.cpp binaries) is not in the default install: it has its own
// in bench/llama/. Install it once with `npm --prefix bench/llama ci` from the repository root.
//
// Usage: npm run build && node dist/bench/vs-llama-cpp.js [options]
//   --only agree|speed     run one part (default both)
//   --models DIR           where checkpoints / GGUFs live (default <repo>/models/bench)
//   --pp N                 prompt tokens (default 64)          --tg N        llama.cpp decode tokens (default 32)
//   --ours-pp N            our prompt tokens (default = --pp)  --ours-tg N   our decode tokens (default
//                          = --tg with the fast kernels, 8 with the reference kernels)
//   --threads LIST         llama.cpp threads (default 1,2)     --ours-threads LIST  ours (default = --threads
//                          with the fast kernels, 1 with the reference kernels)
//   --ours-kernels auto|ref  auto: Model.load (WebAssembly, threads) when the engine has it, else the
//                          TypeScript reference (Model.open, 1 thread); ref: always the reference
//   --reps N               llama.cpp repetitions (default 5)   --ours-reps N (default = --reps with the
//                          fast kernels, 1 with the reference kernels)
//   --rounds R             the engines take turns R times (default 3), each round running
//                          ceil(reps / R) of each engine's repetitions, so drift hits all alike
//   --trunk f16|bf16|f32   GGUF trunk type for the speed part (default f16)
//   --shape k3-medium|k3-real  the speed part's checkpoint (default k3-medium); k3-real: K3's real
//                          layer and expert widths (hidden 7168, 96 KDA / MLA heads, experts of 3072
//                          in the 3584 latent, 2 shared), 2 layers (KDA then MLA, both MoE), 16
//                          experts all firing (K3's 16 a token), vocab 32768: 3.6 GB, GGUF as large
//   --ours-fast            also measure our opt-in --fast path (7-bit trunk blocks, 8-bit activations)
//   --no-fallback          do not retry a failed llama.cpp speed run with another GGUF variant
//   --simulate-abort       make the first llama.cpp speed child abort as on the AMX machine (to check
//                          the fallback path where that failure cannot happen)
//   --json                 print one JSON object instead of tables

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Model } from '../src/model/model.js';
import { argmax } from '../src/generate/greedy.js';
import { synthCheckpoint, type SynthOptions } from '../src/synth/synth.js';
import { formatBytes } from '../src/util/format.js';
import { thpMode } from '../src/util/hugepages.js';
import { machineInfo, machineLine } from '../src/util/machine.js';
import { convertK3ToGguf, type ExpertsGgufFormat, type TrunkFormat } from './gguf/convert.js';
import { runChild, serveChild } from './child.js';
import { maddRate, maddRateLine, memoryBandwidth, memoryBandwidthLine, rooflineLines, tokenWork } from './ceilings.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

// ---------------------------------------------------------------------------------------------
// node-llama-cpp, loaded at run time: the parts of its API this bench uses (3.21.1), declared here
// so that the project compiles without it installed.

type ControlledEvaluateInputItem = number | [token: number, options: object];
interface ControlledEvaluateIndexOutput {
  next: { token?: number | null; probabilities?: Map<number, number> };
}
interface LlamaContextSequenceT {
  controlledEvaluate(input: ControlledEvaluateInputItem[]): Promise<(ControlledEvaluateIndexOutput | undefined)[]>;
  clearHistory(): Promise<void>;
}
interface LlamaContextT {
  getSequence(): LlamaContextSequenceT;
  dispose(): Promise<void>;
}
interface LlamaModelT {
  createContext(o: {
    contextSize: number; batchSize: number; threads: number; sequences: number; flashAttention: boolean;
    experimentalKvCacheKeyType?: 'F32'; experimentalKvCacheValueType?: 'F32';
  }): Promise<LlamaContextT>;
  dispose(): Promise<void>;
}
interface LlamaT {
  loadModel(o: { modelPath: string; gpuLayers: number }): Promise<LlamaModelT>;
  dispose(): Promise<void>;
}
export interface NodeLlamaCpp {
  getLlama(o: { gpu: false; build: 'never'; maxThreads: number; logLevel: unknown; progressLogs: boolean }): Promise<LlamaT>;
  LlamaLogLevel: { error: unknown };
}

/** Where node-llama-cpp is installed for this bench, and the command that installs it there. */
export const LLAMA_DIR = path.join(ROOT, 'bench', 'llama');
export const LLAMA_INSTALL = 'npm --prefix bench/llama ci';

/** Resolve `node-llama-cpp` from the project (if someone installed it there) or from bench/llama. */
export function resolveNodeLlamaCpp(): string | null {
  for (const from of [import.meta.url, path.join(LLAMA_DIR, 'package.json')]) {
    try {
      return createRequire(from).resolve('node-llama-cpp');
    } catch {
      // not installed there
    }
  }
  return null;
}

/** node-llama-cpp, or null when it is not installed (see LLAMA_INSTALL). A broken install throws. */
export async function loadNodeLlamaCpp(): Promise<NodeLlamaCpp | null> {
  const file = resolveNodeLlamaCpp();
  return file ? ((await import(pathToFileURL(file).href)) as NodeLlamaCpp) : null;
}

/** A CPU-only llama.cpp instance with exact thread counts (maxThreads 0: no cap, no sharing). */
export async function cpuLlama(nlc: NodeLlamaCpp): Promise<LlamaT> {
  return nlc.getLlama({ gpu: false, build: 'never', maxThreads: 0, logLevel: nlc.LlamaLogLevel.error, progressLogs: false });
}

// ---------------------------------------------------------------------------------------------
// Checkpoints and GGUFs (cached)

/** The speed part's checkpoints (--shape): what the log calls them, the directory name under
 *  --models, and the synth options (both vocab 32768, which the ids of the prompts assume). */
type SpeedShape = 'k3-medium' | 'k3-real';
const SPEED_SHAPES: Record<SpeedShape, { what: string; name: string; synth: Omit<SynthOptions, 'arch' | 'out'> & { vocab: number } }> = {
  'k3-medium': { what: 'k3-medium', name: 'k3-medium-mxfp4', synth: { preset: 'k3-medium', vocab: 32768 } },
  // K3's real widths; two layers so that both attention kinds are in (the real K3 has MLA every
  // 4th layer and one dense layer of 93, left out: it would weigh 1 of 2 here)
  'k3-real': {
    what: 'K3 real layer sizes (2 layers: KDA, MLA; 16 experts, all firing)', name: 'k3-real-2l-mxfp4',
    synth: { preset: 'k3-real-layers', layers: 2, firstDense: 0, mlaLayers: [2], experts: 16, vocab: 32768 },
  },
};

/** Synthesize (or reuse) a checkpoint, then write (or reuse) its GGUF. */
export async function prepareModel(
  synth: SynthOptions,
  gguf: string,
  conv: { trunk: TrunkFormat; experts: ExpertsGgufFormat },
  log: (s: string) => void = () => {},
): Promise<{ dir: string; gguf: string; ggufBytes: number; params: number; checkpointBytes: number }> {
  // These directories belong to the bench: replace one written by another synth version or options.
  const s = await synthCheckpoint({ ...synth, force: true });
  if (!s.skipped) log(`  synthesized ${s.dir} (${formatBytes(s.bytes)}) in ${s.seconds.toFixed(1)} s`);
  const stampFile = `${gguf}.json`;
  // `writer` names the GGUF writer's output version (bench/gguf/, once bench/gguf.ts): bump it when the bytes change.
  const stamp = JSON.stringify({ writer: 'bench/gguf.ts v2', synth: JSON.parse(fs.readFileSync(path.join(s.dir, 'synth.json'), 'utf8')), ...conv });
  let params: number;
  let stampOk: boolean;
  try {
    stampOk = fs.existsSync(gguf) && JSON.parse(fs.readFileSync(stampFile, 'utf8')).stamp === stamp;
  } catch {
    stampOk = false;
  }
  if (stampOk) {
    params = JSON.parse(fs.readFileSync(stampFile, 'utf8')).params;
  } else {
    const t1 = performance.now();
    const r = convertK3ToGguf(s.dir, gguf, conv);
    params = r.params;
    fs.writeFileSync(stampFile, JSON.stringify({ stamp, params }) + '\n');
    log(`  wrote ${gguf} (${formatBytes(r.bytes)}, trunk ${conv.trunk}, experts ${conv.experts}) in ${((performance.now() - t1) / 1000).toFixed(1)} s`);
  }
  return { dir: s.dir, gguf, ggufBytes: fs.statSync(gguf).size, params, checkpointBytes: s.bytes };
}

/** A deterministic prompt of `n` ids below `vocab - 256` (K3's special tokens sit at the top). */
export function benchPrompt(n: number, vocab: number, seed = 12345): number[] {
  const out: number[] = [];
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(x % Math.max(1, vocab - 256));
  }
  return out;
}

function logSoftmax(logits: Float32Array | Float64Array): Float64Array {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  let z = 0;
  for (const v of logits) z += Math.exp(v - max);
  const lse = max + Math.log(z);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - lse;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Our engine

type OursLoader = (dir: string, opts: Record<string, unknown>) => Promise<Model>;

/** `Model.load` (WebAssembly kernels on a worker pool, takes `threads`) when this build has it. */
export function oursLoader(): OursLoader | null {
  const load = (Model as unknown as { load?: OursLoader }).load;
  return typeof load === 'function' ? load.bind(Model) : null;
}

/**
 * Our engine: the fast kernels on `threads` threads when the engine has them (same numbers as the
 * TypeScript reference), else the reference at 1 thread. MLA latent-norm epsilon = rms_norm_eps.
 */
export async function openOurs(dir: string, threads: number, kernels: 'auto' | 'ref' = 'auto', fastPath = false): Promise<Model> {
  const base = { overrides: { mlaLatentNormEps: 'config' as const }, ctx: 256 };
  const load = kernels === 'auto' ? oursLoader() : null;
  if (load) return load(dir, { ...base, threads, ...(fastPath ? { fast: true, notice: () => {} } : {}) });
  if (fastPath) throw new Error('--ours-fast needs the WebAssembly kernels (Model.load)');
  if (threads !== 1) throw new Error(`our engine has no thread option in this build (no Model.load): cannot run it at ${threads} threads`);
  return Model.open(dir, base);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp side

class LlamaSeq {
  private constructor(
    readonly ctx: LlamaContextT,
    readonly seq: LlamaContextSequenceT,
    readonly vocab: number,
  ) {}

  /** `kvF32`: keep llama.cpp's KV cache (the MLA latent) in F32 instead of its default F16. */
  static async create(model: LlamaModelT, vocab: number, o: { threads: number; batch: number; ctx: number; kvF32?: boolean }): Promise<LlamaSeq> {
    const ctx = await model.createContext({
      contextSize: o.ctx, batchSize: o.batch, threads: o.threads, sequences: 1, flashAttention: false,
      ...(o.kvF32 ? { experimentalKvCacheKeyType: 'F32' as const, experimentalKvCacheValueType: 'F32' as const } : {}),
    });
    return new LlamaSeq(ctx, ctx.getSequence(), vocab);
  }

  /**
   * Feed `ids`; for the last one, return the greedy next token and, when asked, the full
   * log-probability vector of the next-token distribution.
   */
  async feed(ids: number[], withProbs: boolean): Promise<{ token: number; logp: Float64Array | null }> {
    const input = ids.map((t, i) =>
      i === ids.length - 1 ? ([t, { generateNext: { token: true, probabilities: withProbs, options: { temperature: 0 } } }] as [number, object]) : t,
    );
    const res = await this.seq.controlledEvaluate(input);
    const out = res[ids.length - 1];
    const token = out?.next.token;
    if (token === undefined || token === null) throw new Error('llama.cpp returned no token');
    let logp: Float64Array | null = null;
    if (withProbs) {
      const probs = out!.next.probabilities;
      if (!probs) throw new Error('llama.cpp returned no probabilities');
      logp = new Float64Array(this.vocab).fill(-Infinity);
      for (const [id, p] of probs) logp[id] = Math.log(p);
    }
    return { token, logp };
  }

  async reset(): Promise<void> {
    await this.seq.clearHistory();
  }

  async dispose(): Promise<void> {
    await this.ctx.dispose();
  }
}

// ---------------------------------------------------------------------------------------------
// 1. Agreement

export interface AgreementCase {
  llamaBatch: number;
  /** max |Δ log p| over the vocabulary after the prompt. */
  maxAbsLogpDiff: number;
  /** max |Δ logit| after removing the best shared constant shift (mean of the differences). */
  maxAbsLogitDiff: number;
  argmaxOurs: number;
  argmaxLlama: number;
  /** Greedy continuations and the first index where they differ (-1: equal). */
  greedyOurs: number[];
  greedyLlama: number[];
  firstDiff: number;
  /** max |Δ log p| over all greedy steps compared (while the two sequences agree). */
  maxAbsLogpDiffSteps: number;
}

export interface AgreementResult {
  dir: string;
  gguf: string;
  promptLength: number;
  logitRange: number;
  cases: AgreementCase[];
}

function compareLogp(ours: Float32Array, llama: Float64Array): { maxLogp: number; maxLogit: number } {
  const lo = logSoftmax(ours);
  let maxLogp = 0;
  let mean = 0;
  for (let i = 0; i < lo.length; i++) {
    maxLogp = Math.max(maxLogp, Math.abs(lo[i]! - llama[i]!));
    mean += ours[i]! - llama[i]!;
  }
  mean /= lo.length;
  let maxLogit = 0;
  for (let i = 0; i < lo.length; i++) maxLogit = Math.max(maxLogit, Math.abs(ours[i]! - llama[i]! - mean));
  return { maxLogp, maxLogit };
}

/**
 * Run the agreement check on a checkpoint with BF16 (or F32-convertible) experts and its F32 GGUF.
 * `batches`: llama.cpp batch sizes to try (0 = the prompt length).
 */
export async function agreement(
  nlc: NodeLlamaCpp,
  dir: string,
  gguf: string,
  o: { promptLength?: number; greedy?: number; batches?: number[]; threads?: number; kernels?: 'auto' | 'ref' } = {},
): Promise<AgreementResult> {
  const P = o.promptLength ?? 24;
  const G = o.greedy ?? 16;
  const ours = await openOurs(dir, 1, o.kernels ?? 'auto');
  const V = ours.config.vocabSize;
  const prompt = benchPrompt(P, V);
  // Ours: logits after the prompt and along its own greedy continuation.
  const state = ours.newState();
  let logits = await ours.forward(state, prompt, 'last');
  const oursSteps: Float32Array[] = [logits];
  const greedyOurs: number[] = [];
  for (let i = 0; i < G; i++) {
    const id = argmax(logits, 0, V);
    greedyOurs.push(id);
    if (i === G - 1) break;
    logits = await ours.forward(state, [id], 'last');
    oursSteps.push(logits);
  }
  await ours.close();
  let lmin = Infinity;
  let lmax = -Infinity;
  for (const v of oursSteps[0]!) {
    lmin = Math.min(lmin, v);
    lmax = Math.max(lmax, v);
  }

  const llama = await cpuLlama(nlc);
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const cases: AgreementCase[] = [];
  try {
    for (const b of o.batches ?? [0, 1]) {
      const batch = b === 0 ? P : b;
      const s = await LlamaSeq.create(model, V, { threads: o.threads ?? 1, batch, ctx: Math.max(256, P + G + 8), kvF32: true });
      try {
        let r = await s.feed(prompt, true);
        const first = compareLogp(oursSteps[0]!, r.logp!);
        const greedyLlama: number[] = [];
        let maxSteps = first.maxLogp;
        let firstDiff = -1;
        for (let i = 0; i < G; i++) {
          greedyLlama.push(r.token);
          if (firstDiff < 0 && r.token !== greedyOurs[i]) firstDiff = i;
          if (i === G - 1) break;
          r = await s.feed([r.token], firstDiff < 0);
          if (firstDiff < 0) maxSteps = Math.max(maxSteps, compareLogp(oursSteps[i + 1]!, r.logp!).maxLogp);
        }
        cases.push({
          llamaBatch: batch,
          maxAbsLogpDiff: first.maxLogp,
          maxAbsLogitDiff: first.maxLogit,
          argmaxOurs: greedyOurs[0]!,
          argmaxLlama: greedyLlama[0]!,
          greedyOurs,
          greedyLlama,
          firstDiff,
          maxAbsLogpDiffSteps: maxSteps,
        });
      } finally {
        await s.dispose();
      }
    }
  } finally {
    await model.dispose();
    await llama.dispose();
  }
  return { dir, gguf, promptLength: P, logitRange: lmax - lmin, cases };
}

// ---------------------------------------------------------------------------------------------
// 2. Speed

export interface SpeedRow {
  engine: 'llama.cpp' | 'ours' | 'ours --fast';
  /** llama.cpp rows: the GGUF variant they were measured with (its trunk type). */
  gguf?: TrunkFormat;
  threads: number;
  pp: number;
  ppTokS: number[];
  tg: number;
  tgTokS: number[];
}

const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;

/** `reps` timed runs into `row`: after `begin()` (a fresh sequence), `prefill()` the prompt of
 *  row.pp tokens, then row.tg calls of `step()` (one decode token each). */
async function timeRuns(row: SpeedRow, reps: number, run: { begin: () => unknown; prefill: () => Promise<void>; step: () => Promise<void> }): Promise<void> {
  for (let rep = 0; rep < reps; rep++) {
    await run.begin();
    const t0 = performance.now();
    await run.prefill();
    const t1 = performance.now();
    for (let i = 0; i < row.tg; i++) await run.step();
    const t2 = performance.now();
    row.ppTokS.push(row.pp / ((t1 - t0) / 1000));
    row.tgTokS.push(row.tg / ((t2 - t1) / 1000));
  }
}

/** The progress line of one speed row: `  llama.cpp t=4: pp64 … tok/s, tg32 … tok/s`. */
function speedLine(row: SpeedRow): string {
  return `  ${row.engine.padEnd(9)} t=${row.threads}: pp${row.pp} ${mean(row.ppTokS).toFixed(2)} tok/s, tg${row.tg} ${mean(row.tgTokS).toFixed(2)} tok/s`;
}
/** Rows of another round added to those so far (same engine and threads: their samples appended). */
function mergeRows(acc: SpeedRow[], more: SpeedRow[]): SpeedRow[] {
  const out = acc.map((r) => ({ ...r, ppTokS: [...r.ppTokS], tgTokS: [...r.tgTokS] }));
  for (const r of more) {
    const a = out.find((x) => x.engine === r.engine && x.threads === r.threads);
    if (a) {
      a.ppTokS.push(...r.ppTokS);
      a.tgTokS.push(...r.tgTokS);
    } else out.push({ ...r, ppTokS: [...r.ppTokS], tgTokS: [...r.tgTokS] });
  }
  return out;
}

const sd = (a: number[]) => {
  if (a.length < 2) return 0;
  const m = mean(a);
  return Math.sqrt(a.reduce((s, x) => s + (x - m) ** 2, 0) / (a.length - 1));
};

async function speedLlama(nlc: NodeLlamaCpp, gguf: string, vocab: number, o: { threads: number[]; pp: number; tg: number; reps: number }, log: (s: string) => void): Promise<SpeedRow[]> {
  const llama = await cpuLlama(nlc);
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const rows: SpeedRow[] = [];
  const prompt = benchPrompt(o.pp, vocab, 777);
  try {
    for (const t of o.threads) {
      const s = await LlamaSeq.create(model, vocab, { threads: t, batch: o.pp, ctx: Math.max(256, o.pp + o.tg + 8) });
      const row: SpeedRow = { engine: 'llama.cpp', threads: t, pp: o.pp, ppTokS: [], tg: o.tg, tgTokS: [] };
      try {
        // Warm-up (graph allocation, page faults of the mmap): one untimed run, a whole prompt and
        // o.tg decode steps, as each timed run (warmUp, the same for both engines).
        let r = await s.feed(prompt, false);
        for (let i = 0; i < o.tg; i++) r = await s.feed([r.token], false);
        await timeRuns(row, o.reps, {
          begin: () => s.reset(),
          prefill: async () => void (r = await s.feed(prompt, false)),
          step: async () => void (r = await s.feed([r.token], false)),
        });
      } finally {
        await s.dispose();
      }
      log(speedLine(row));
      rows.push(row);
    }
  } finally {
    await model.dispose();
    await llama.dispose();
  }
  return rows;
}

async function speedOurs(dir: string, o: { threads: number[]; pp: number; tg: number; reps: number; kernels: 'auto' | 'ref'; fast?: boolean }, log: (s: string) => void): Promise<SpeedRow[]> {
  const rows: SpeedRow[] = [];
  for (const t of o.threads) {
    const model = await openOurs(dir, t, o.kernels, o.fast);
    const V = model.config.vocabSize;
    const prompt = benchPrompt(o.pp, V, 777);
    const row: SpeedRow = { engine: o.fast ? 'ours --fast' : 'ours', threads: t, pp: o.pp, ppTokS: [], tg: o.tg, tgTokS: [] };
    try {
      // Warm-up as llama.cpp's above (a whole prompt, o.tg decode steps): the first forward reads
      // the weights in, the scratch pages get touched, and the JavaScript of both paths (the main
      // thread's and each new worker's) gets optimized, which takes a few dozen forwards: with one
      // decode step of warm-up, the first timed run decoded ~8% slower than the third.
      let state = model.newState();
      let logits = await model.forward(state, prompt, 'last');
      for (let i = 0; i < o.tg; i++) logits = await model.forward(state, [argmax(logits, 0, V)], 'last');
      await timeRuns(row, o.reps, {
        // each run on a fresh sequence; the last one's memory is reused (as llama.cpp's reset)
        begin: () => {
          model.release(state);
          state = model.newState();
        },
        prefill: async () => void (logits = await model.forward(state, prompt, 'last')),
        step: async () => void (logits = await model.forward(state, [argmax(logits, 0, V)], 'last')),
      });
    } finally {
      await model.close();
    }
    log(speedLine(row));
    rows.push(row);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp in a child process

/** A llama.cpp job for a child process: the agreement check, or the llama.cpp speed rows. */
export type LlamaJob =
  | { part: 'agree'; dir: string; gguf: string; kernels: 'auto' | 'ref' }
  | { part: 'speed'; gguf: string; vocab: number; threads: number[]; pp: number; tg: number; reps: number; simulateAbort?: boolean };

/** The child side of runLlamaChild: load node-llama-cpp there and run the job. */
async function runLlamaJob(job: LlamaJob, log: (s: string) => void): Promise<unknown> {
  const nlc = await loadNodeLlamaCpp();
  if (!nlc) throw new Error(`node-llama-cpp is not installed (${LLAMA_INSTALL})`);
  if (job.part === 'agree') return agreement(nlc, job.dir, job.gguf, { kernels: job.kernels });
  if (job.simulateAbort) {
    // what ggml prints before abort() on the AMX machine (--simulate-abort)
    process.stderr.write('ggml/src/ggml-backend.cpp:1294: GGML_ASSERT(*cur_backend_id != -1) failed (simulated by --simulate-abort)\n');
    process.abort();
  }
  return speedLlama(nlc, job.gguf, job.vocab, job, log);
}

/** Run a llama.cpp job in a child process (this file with `--child`): an abort there is a failed outcome here. */
export function runLlamaChild<T>(job: LlamaJob, log: (s: string) => void) {
  return runChild<T>(fileURLToPath(import.meta.url), ['--child'], job, log);
}

const variantName = (t: TrunkFormat) => `${t.toUpperCase()} trunk`;

function printAgreement(a: AgreementResult, log: (s: string) => void): void {
  log(`prompt: ${a.promptLength} ids; our logits after it span ${a.logitRange.toFixed(3)}; ${a.cases[0]?.greedyOurs.length ?? 0} greedy tokens`);
  log(table(
    ['llama.cpp batch', 'max |Δ log p|', 'max |Δ logit| (shift removed)', 'argmax ours / llama', 'greedy equal', 'max |Δ log p| along greedy'],
    a.cases.map((c) => [
      String(c.llamaBatch),
      c.maxAbsLogpDiff.toExponential(2),
      c.maxAbsLogitDiff.toExponential(2),
      `${c.argmaxOurs} / ${c.argmaxLlama}`,
      c.firstDiff < 0 ? 'yes' : `no (from step ${c.firstDiff})`,
      c.maxAbsLogpDiffSteps.toExponential(2),
    ]),
  ));
  log(`greedy ours : ${a.cases[0]?.greedyOurs.join(' ')}`);
  for (const c of a.cases) log(`greedy llama (batch ${c.llamaBatch}): ${c.greedyLlama.join(' ')}`);
}

// ---------------------------------------------------------------------------------------------
// CLI

function fmt(a: number[]): string {
  if (a.length === 0) return '-';
  const m = mean(a);
  const digits = m >= 100 ? 1 : m >= 10 ? 2 : 3;
  return a.length > 1 ? `${m.toFixed(digits)} ± ${sd(a).toFixed(digits)}` : m.toFixed(digits);
}

function table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => '| ' + r.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join(' | ') + ' |';
  return [line(head), '|' + w.map((x, i) => (i === 0 ? '-'.repeat(x + 2) : '-'.repeat(x + 1) + ':')).join('|') + '|', ...rows.map(line)].join('\n');
}

const intList = (s: string) => s.split(',').map((x) => {
  const n = Number(x.trim());
  if (!Number.isInteger(n) || n < 1) throw new Error(`not a positive integer: ${x}`);
  return n;
});

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      only: { type: 'string' },
      models: { type: 'string' },
      pp: { type: 'string', default: '64' },
      tg: { type: 'string', default: '32' },
      'ours-pp': { type: 'string' },
      'ours-tg': { type: 'string' },
      'ours-fast': { type: 'boolean' },
      threads: { type: 'string', default: '1,2' },
      'ours-threads': { type: 'string' },
      'ours-kernels': { type: 'string', default: 'auto' },
      reps: { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      'ours-reps': { type: 'string' },
      trunk: { type: 'string', default: 'f16' },
      shape: { type: 'string', default: 'k3-medium' },
      'no-fallback': { type: 'boolean', default: false },
      'simulate-abort': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    const src = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8');
    const usage = src.split('\n').filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/ ?/, ''));
    console.log(usage.slice(usage.findIndex((l) => l.startsWith('Usage'))).join('\n'));
    return;
  }
  const json = values.json;
  const log = (s: string) => { if (!json) console.log(s); else console.error(s); };
  const only = values.only;
  if (only && only !== 'agree' && only !== 'speed') throw new Error('--only takes agree or speed');
  const trunk = values.trunk as TrunkFormat;
  if (!['f16', 'bf16', 'f32'].includes(trunk)) throw new Error('--trunk takes f16, bf16 or f32');
  const shape = Object.hasOwn(SPEED_SHAPES, values.shape!) ? SPEED_SHAPES[values.shape as SpeedShape] : null;
  if (!shape) throw new Error(`--shape takes ${Object.keys(SPEED_SHAPES).join(' or ')}`);
  const modelsDir = path.resolve(values.models ?? path.join(ROOT, 'models', 'bench'));
  const pp = intList(values.pp)[0]!;
  const tg = intList(values.tg)[0]!;
  const oursPp = intList(values['ours-pp'] ?? values.pp)[0]!;
  const kernels = values['ours-kernels'] as 'auto' | 'ref';
  if (kernels !== 'auto' && kernels !== 'ref') throw new Error('--ours-kernels takes auto or ref');
  const fast = kernels === 'auto' && oursLoader() !== null;
  const threads = intList(values.threads);
  // The reference kernels are single-threaded and slow: fewer decode tokens by default.
  const oursTg = intList(values['ours-tg'] ?? (fast ? values.tg : '8'))[0]!;
  const oursThreads = intList(values['ours-threads'] ?? (fast ? values.threads : '1'));
  const oursReps = intList(values['ours-reps'] ?? (fast ? values.reps : '1'))[0]!;
  const reps = intList(values.reps)[0]!;
  const rounds = intList(values.rounds)[0]!;

  if (!resolveNodeLlamaCpp()) throw new Error(`node-llama-cpp is not installed: run \`${LLAMA_INSTALL}\` in ${ROOT} (its own install, about 700 MB), then rerun`);
  const report: Record<string, unknown> = { node_llama_cpp: '3.21.1', machine: machineInfo() };

  if (!only || only === 'agree') {
    log('== Agreement: K3 demo dims, BF16 experts; GGUF all F32 ==');
    const m = await prepareModel(
      { arch: 'k3', preset: 'demo', expertsFormat: 'bf16', out: path.join(modelsDir, 'agree-demo-bf16') },
      path.join(modelsDir, 'agree-demo-bf16.f32.gguf'),
      { trunk: 'f32', experts: 'f32' },
      log,
    );
    // Both engines run in the child; no retry: an all-F32 GGUF has nothing to fall back to.
    const r = await runLlamaChild<AgreementResult>({ part: 'agree', dir: m.dir, gguf: m.gguf, kernels }, log);
    if (r.ok) {
      report.agreement = r.value;
      printAgreement(r.value, log);
    } else {
      report.agreement = { failed: r.reason };
      log(`llama.cpp FAILED (agreement, all-F32 GGUF): ${r.reason}`);
    }
    log('');
  }

  if (!only || only === 'speed') {
    log(`== Speed: ${shape.what}, MXFP4 experts; GGUF trunk ${trunk.toUpperCase()}, experts MXFP4 (lossless repack) ==`);
    const synth: SynthOptions = { ...shape.synth, arch: 'k3', out: path.join(modelsDir, shape.name) };
    const m = await prepareModel(
      synth,
      path.join(modelsDir, `${shape.name}.${trunk}.gguf`),
      { trunk, experts: 'mxfp4' },
      log,
    );
    log(`checkpoint ${formatBytes(m.checkpointBytes)}, GGUF ${formatBytes(m.ggufBytes)}, ${(m.params / 1e9).toFixed(3)} B params`);
    const V = shape.synth.vocab;
    // The requested trunk, then once (after a failure) BF16, or F32 when BF16 was the one that failed.
    const variants: TrunkFormat[] = values['no-fallback'] ? [trunk] : [trunk, trunk === 'bf16' ? 'f32' : 'bf16'];
    const failures: { gguf: TrunkFormat; reason: string }[] = [];
    let lrows: SpeedRow[] = [], orows: SpeedRow[] = [], frows: SpeedRow[] = [];
    // Rounds: llama.cpp, ours, ours --fast, again and again, the reps split among them, so that a
    // machine that speeds up or slows down over the run weighs on every engine alike.
    let chosen: TrunkFormat | null = null;
    const perRound = (n: number) => Math.max(1, Math.ceil(n / rounds));
    // ours, exact and (opt-in: 7-bit trunk blocks, 8-bit activations; not the exact numbers) --fast
    const measureOurs = async (n: number): Promise<void> => {
      orows = mergeRows(orows, await speedOurs(m.dir, { threads: oursThreads, pp: oursPp, tg: oursTg, reps: n, kernels }, log));
      if (values['ours-fast']) frows = mergeRows(frows, await speedOurs(m.dir, { threads: oursThreads, pp: oursPp, tg: oursTg, reps: n, kernels, fast: true }, log));
    };
    for (let round = 0; round < rounds; round++) {
      if (rounds > 1) log(`  round ${round + 1} of ${rounds}`);
      for (const [i, v] of (chosen ? [chosen] : variants).entries()) {
        const g = v === trunk ? m : await prepareModel(
          synth,
          path.join(modelsDir, `${shape.name}.${v}.gguf`),
          { trunk: v, experts: 'mxfp4' },
          log,
        );
        const r = await runLlamaChild<SpeedRow[]>({ part: 'speed', gguf: g.gguf, vocab: V, threads, pp, tg, reps: perRound(reps), simulateAbort: values['simulate-abort'] && !chosen && i === 0 }, log);
        if (r.ok) {
          chosen = v;
          lrows = mergeRows(lrows, r.value.map((row) => ({ ...row, gguf: v })));
          break;
        }
        if (chosen) {
          log(`  llama.cpp FAILED in round ${round + 1}: ${r.reason}`);
          break;
        }
        failures.push({ gguf: v, reason: r.reason });
        log(`  llama.cpp FAILED with the ${variantName(v)} GGUF: ${r.reason}`);
        if (i + 1 < variants.length) log(`  retrying once with the ${variantName(variants[i + 1]!)} GGUF`);
      }
      if (!chosen) break; // every variant failed: nothing to compare with, and no point in more rounds
      await measureOurs(perRound(oursReps));
    }
    if (!chosen) await measureOurs(oursReps); // our rows alone, all reps at once
    report.speed = { model: m, rows: [...lrows, ...orows, ...frows], llamaFailures: failures };
    const rows = [...lrows, ...orows, ...frows].map((r) => [r.engine, r.gguf ? variantName(r.gguf) : 'checkpoint', String(r.threads), `pp${r.pp}`, fmt(r.ppTokS), `tg${r.tg}`, fmt(r.tgTokS)]);
    log('');
    log(table(['engine', 'weights', 'threads', 'prompt', 'tok/s', 'decode', 'tok/s'], rows));
    // Each round's ratio (its samples follow the round order), then their median: the engines
    // take turns, so a ratio within a round compares them under the same load, and a round that a
    // noisy neighbour slowed moves the median little.
    const nl = perRound(reps), no = perRound(oursReps);
    const roundMedian = (o: number[], l: number[], nO = no, nL = nl): number => {
      const rs: number[] = [];
      for (let k = 0; (k + 1) * nO <= o.length && (k + 1) * nL <= l.length; k++) rs.push(mean(o.slice(k * nO, (k + 1) * nO)) / mean(l.slice(k * nL, (k + 1) * nL)));
      rs.sort((a, b) => a - b);
      return rs.length === 0 ? NaN : rs.length % 2 ? rs[(rs.length - 1) / 2]! : (rs[rs.length / 2 - 1]! + rs[rs.length / 2]!) / 2;
    };
    const ratios: { threads: number; oursThreads: number; pp: number; tg: number; fastTg?: number; ppRounds: number; tgRounds: number; fastTgRounds?: number }[] = [];
    for (const l of lrows) {
      const o = orows.find((r) => r.threads === l.threads) ?? orows[0];
      if (!o) continue;
      const f = frows.find((r) => r.threads === o.threads);
      ratios.push({
        threads: l.threads, oursThreads: o.threads, pp: mean(o.ppTokS) / mean(l.ppTokS), tg: mean(o.tgTokS) / mean(l.tgTokS), ...(f ? { fastTg: mean(f.tgTokS) / mean(l.tgTokS) } : {}),
        ppRounds: roundMedian(o.ppTokS, l.ppTokS), tgRounds: roundMedian(o.tgTokS, l.tgTokS), ...(f ? { fastTgRounds: roundMedian(f.tgTokS, l.tgTokS) } : {}),
      });
    }
    (report.speed as Record<string, unknown>).ratios = ratios;
    const x = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '-' : `${v.toFixed(3)}x`);
    log('');
    log(table(
      ['llama.cpp threads', 'ours threads', 'prompt ours/llama.cpp', 'decode ours/llama.cpp', ...(frows.length ? ['decode ours --fast/llama.cpp'] : [])],
      ratios.map((r) => [String(r.threads), String(r.oursThreads), `${x(r.pp)} (rounds ${x(r.ppRounds)})`, `${x(r.tg)} (rounds ${x(r.tgRounds)})`, ...(frows.length ? [`${x(r.fastTg)} (rounds ${x(r.fastTgRounds)})`] : [])]),
    ));
    if (rounds > 1) log(`(ratio of the means over all reps; in parentheses the median of the ${rounds} rounds' ratios, each round running the engines back to back)`);
    // (and the median of the rounds' scalings: within a round one engine's 1- and 2-thread runs follow each other)
    const scale = (rs: SpeedRow[], n: number) => {
      const a = rs.find((r) => r.threads === 1), b = rs.find((r) => r.threads === 2);
      return a && b ? `${(mean(b.tgTokS) / mean(a.tgTokS)).toFixed(2)}x${rounds > 1 ? ` (rounds ${roundMedian(b.tgTokS, a.tgTokS, n, n).toFixed(2)}x)` : ''}` : null;
    };
    const sc = [['llama.cpp', scale(lrows, nl)], ['ours', scale(orows, no)], ['ours --fast', scale(frows, no)]].filter(([, v]) => v !== null);
    if (sc.length) log(`decode scaling 1 -> 2 threads: ${sc.map(([k, v]) => `${k} ${v}`).join(', ')}`);
    // The machine's ceilings (after the rounds) and the share of them each engine reaches
    const bw = await memoryBandwidth();
    const madd = await maddRate();
    const om = await Model.open(m.dir, {});
    let work: ReturnType<typeof tokenWork>;
    try {
      work = tokenWork(om.config, om.store.layout);
    } finally {
      await om.close();
    }
    Object.assign(report.speed as Record<string, unknown>, { memoryBandwidth: bw, maddRate: madd, tokenWork: work });
    log(`${memoryBandwidthLine(bw)}, measured after the rounds`);
    log(`${maddRateLine(madd)}, measured after the rounds`);
    // (not --fast: its trunk is 7-bit blocks, fewer bytes, and its products integer dots)
    const engines = [...lrows, ...orows].map((r) => ({ name: r.engine, threads: r.threads, pp: mean(r.ppTokS), tg: mean(r.tgTokS) }));
    for (const line of rooflineLines(work, madd, bw, engines)) log(line);
    log('(of the exact path\'s work; llama.cpp computes with the machine\'s widest vectors, so its prompt can pass the WebAssembly multiply-add ceiling; with an F16 or BF16 trunk its decode reads as many weight bytes as ours)');
    log(`notes: decode follows the ${pp}-token prompt (ours: ${oursPp}); ours decodes ${oursTg} tokens${oursTg !== tg ? ` (fewer than llama.cpp's ${tg}, to keep the run short)` : ''}.`);
    log(`      ours: ${fast ? 'WebAssembly kernels (Model.load)' : 'TypeScript reference kernels (Model.open), 1 thread'}; a llama.cpp row without an ours row at the same thread count is compared with ours at ${orows[0]?.threads ?? 1}.`);
    log(`      llama.cpp: CPU build bundled with node-llama-cpp 3.21.1, batch ${pp}, F16 KV cache, MXFP4 experts with 8-bit activations; ${perRound(reps) * rounds} reps (mean ± sd); ours ${perRound(oursReps) * rounds} rep(s); ${rounds} round(s), the engines taking turns; before each engine's reps, one untimed run as warm-up (the prompt and the decode steps).`);
    const used = lrows[0]?.gguf;
    const failed = failures.map((f) => `${variantName(f.gguf)}: ${f.reason}`).join('; ');
    if (used) log(`      llama.cpp GGUF: ${variantName(used)}${used === 'f16' ? ' (MLA attn_k_b / attn_v_b in F32)' : ''}${failed ? `, the fallback after ${failed}` : ''}.`);
    else log(`      llama.cpp: no rows, every GGUF variant failed (${failed}).`);
    const thp = thpMode();
    (report.speed as Record<string, unknown>).thp = thp;
    log(`      machine: ${machineLine()}.`);
    log(`      transparent huge pages: ${thp ?? 'not available'}${thp && thp !== 'always' ? ' (our kernels\' memory gets 4 KiB pages; with \'always\' our bf16 decode streams faster: see src/util/hugepages.ts)' : ''}.`);
    const noisy = [...lrows, ...orows].filter((r) => [r.ppTokS, r.tgTokS].some((a) => a.length > 1 && sd(a) > 0.1 * mean(a)));
    if (noisy.length > 0) log(`      NOISY: sd above 10% of the mean in ${noisy.map((r) => `${r.engine} t=${r.threads}`).join(', ')}: something else shared the CPU; rerun on a quiet machine.`);
  }
  if (json) console.log(JSON.stringify(report, null, 2));
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  if (process.argv[2] === '--child') serveChild((job, log) => runLlamaJob(job as LlamaJob, log));
  else main().catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
