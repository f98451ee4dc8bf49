// Where weights live. The model asks for a matrix by name and gets a Mat it can look at block by
// block; it cannot tell whether the bytes were pinned, streamed through the ring just now, or
// found in an expert slot. That is what makes every budget compute the same numbers.
//
// WeightStore is the facade over the store's parts, one job each:
//   reader.ts   positioned reads (plain files; direct-reader.ts, verified-reader.ts, fault.ts wrap them)
//   trunk.ts    the trunk pieces: pinned after their first read, or streamed through the ring;
//               the kernels' transforms of their bytes come in as a PieceTransform (pieces.ts)
//   lend.ts     a trunk matrix lent as a Mat
//   experts.ts  expert slots, their reads, lending and lookahead (expert-cache.ts picks the slot)
//   smalls.ts   norms, biases, conv taps (resident once read) and embedding rows

import { loadConfig, type ConfigOverrides, type ModelConfig } from '../checkpoint/config.js';
import { indexCheckpointDir } from '../checkpoint/dir.js';
import { checkTensorsMatchConfig } from '../checkpoint/expect.js';
import { type TensorEntry } from '../checkpoint/safetensors.js';
import { knownRanges, withChecksums } from './checksums.js';
import { directSupported, makeReader, type IoMode } from './direct-reader.js';
import { ExpertSlots, type UseExperts } from './experts.js';
import { buildLayout, type Layout } from './layout.js';
import { lendMatrix } from './lend.js';
import type { Mat } from './mat.js';
import { newStats, type StoreEvent, type StoreParts, type StoreStats } from './parts.js';
import type { PieceTransform } from './pieces.js';
import { checkFloor, kernelMaxCols, makePlan, maxBudget, resolveBudget, type Plan, type PlanEnv, type StateSize } from './plan.js';
import { FsReader, TimedReads, type ByteReader } from './reader.js';
import { Smalls } from './smalls.js';
import { Trunk, type PanelOptions } from './trunk.js';
import type { VerifyMode } from './verified-reader.js';

export { FsReader, type ByteReader } from './reader.js';
export type { StoreEvent, StoreStats } from './parts.js';
export type { PieceTransform } from './pieces.js';
export { panelEligible, type PanelOptions } from './trunk.js';

export interface StoreOptions {
  /** Memory budget: bytes, or a size string / preset resolved against this model (default: everything resident). */
  budget?: number | { memory?: string; preset?: string };
  /** Context length the MLA cache is planned for. */
  ctx?: number;
  /** Sequences an engine decodes together (src/api/engine.ts), counted in the plan (Plan.engineBytes); default 0: one sequence. */
  parallel?: number;
  /** Compute threads the kernels run on, counted in the plan (Plan.threadBytes); default 1. */
  threads?: number;
  chunk?: number;
  reader?: ByteReader;
  maxPiece?: number;
  /** Where weight memory comes from (kernel memory, so kernels use the bytes in place); default plain memory. */
  alloc?: (bytes: number) => Uint8Array;
  /** One buffer for all the pinned pieces of a split matrix, or null when `alloc` would not place
   *  them together anyway (KernelGroup.allocTogether); default: `alloc`. */
  allocTogether?: (bytes: number) => Uint8Array | null;
  /** How weights are read when no `reader` is given: O_DIRECT (direct, auto) or through the page cache (buffered, the default here; the CLI's is auto). */
  io?: IoMode;
  /** Where a one-time notice goes (e.g. "filesystem refuses O_DIRECT"); default stderr. */
  notice?: (msg: string) => void;
  /** Lookahead expert prefetch (default on): guess the next MoE layer's experts and read them early. */
  lookahead?: boolean;
  /** Check bytes with known sha256 (packed records, `k3 verify` sidecars): on first read (default), every read, or not at all. */
  verifyReads?: VerifyMode | 'off';
  /**
   * `--fast`: REQUANTIZE the bf16 trunk matrices `pieces.requantize` takes as each piece is read,
   * pinned or streamed alike, so the numbers do not depend on the budget. In place in the piece's
   * buffer: the plan's bytes are the file's.
   */
  fastTrunk?: boolean;
  /**
   * Resident wide bf16 trunk matrices laid out in column panels once read (formats/panels.ts; the
   * same values, so the same numbers): matrices wider than `from` columns, panels about `width`
   * wide. Default on (PANEL_FROM, PANEL_COLS) where `pieces` allows panels; false: every matrix row-major.
   */
  panels?: PanelOptions | false;
  /** What the kernels do to trunk bytes as they are read: decode coded rows, requantize, the panel limit (default: none of these). */
  pieces?: PieceTransform;
  /** Trunk matrices (bases) the plan pins before the forward order (PlanEnv.pinFirst; drafter-plan.ts drafterPlanEnv). */
  pinFirst?: readonly string[];
  /** Bytes of the budget kept beside the model (PlanEnv.reservedBytes: a drafter's memory). */
  reserveBytes?: number;
  /** Widest matrix something beside the model runs on its kernels (PlanEnv.kernelCols: a drafter's). */
  kernelCols?: number;
}

/** What opening a checkpoint needs: the options, config overrides, and the size of a sequence's state (the model's). */
export type OpenOptions = StoreOptions & { overrides?: ConfigOverrides; stateSize: (cfg: ModelConfig) => StateSize };

/** What a store is made of: a checkpoint prepared (prepareStore), a reader, and the options of its parts. */
export interface StoreInit {
  cfg: ModelConfig;
  entries: Map<string, TensorEntry>;
  layout: Layout;
  reader: ByteReader;
  state: StateSize;
  budget: number;
  ctx: number;
  chunk: number;
  parallel?: number;
  env?: PlanEnv;
  alloc?: (bytes: number) => Uint8Array;
  allocTogether?: (bytes: number) => Uint8Array | null;
  fastTrunk?: boolean;
  panels?: PanelOptions | false;
  pieces?: PieceTransform;
  lookahead?: boolean;
}

const plainAlloc = (bytes: number): Uint8Array => new Uint8Array(bytes);

export class WeightStore {
  readonly cfg: ModelConfig;
  readonly entries: Map<string, TensorEntry>;
  readonly layout: Layout;
  readonly reader: ByteReader;
  readonly plan: Plan;
  readonly stats: StoreStats = newStats();
  /** Test hook: told of every expert read, expert use and matrix use, in order. */
  trace: ((e: StoreEvent) => void) | null = null;
  private readonly parts: StoreParts;
  private readonly trunk: Trunk;
  private readonly expertSlots: ExpertSlots;
  private readonly smalls: Smalls;

  constructor(o: StoreInit) {
    this.cfg = o.cfg;
    this.entries = o.entries;
    this.layout = o.layout;
    this.reader = o.reader;
    this.plan = makePlan(o.cfg, o.layout, o.state, o.budget, o.ctx, o.chunk, o.parallel ?? 0, o.env ?? {});
    checkFloor(this.plan);
    const alloc = o.alloc ?? plainAlloc;
    const parts: StoreParts = (this.parts = { layout: o.layout, plan: this.plan, stats: this.stats, reads: new TimedReads(o.reader, this.stats), alloc, trace: () => this.trace });
    this.trunk = new Trunk(parts, { allocTogether: o.allocTogether, fastTrunk: o.fastTrunk, panels: o.panels, transform: o.pieces });
    this.expertSlots = new ExpertSlots(parts, o.cfg);
    this.expertSlots.lookahead = o.lookahead ?? true;
    this.smalls = new Smalls(parts);
  }

  /** Open a checkpoint directory with a memory budget (default: everything resident). */
  static open(dir: string, opts: OpenOptions): WeightStore {
    return WeightStore.fromPrepared(prepareStore(dir, opts), opts);
  }

  /** Open from what `prepareStore` read (config, tensor index, layout, budget), so it is read once. */
  static fromPrepared(p: Prepared, opts: StoreOptions = {}): WeightStore {
    const base = opts.reader ?? makeReader(opts.io ?? 'buffered', () => new FsReader(), opts.notice);
    const reader = withChecksums(p.dir, p.entries, base, opts.verifyReads ?? 'first');
    return new WeightStore({ ...p, reader, alloc: opts.alloc, allocTogether: opts.allocTogether ?? opts.alloc, fastTrunk: opts.fastTrunk, panels: opts.panels, pieces: opts.pieces, lookahead: opts.lookahead });
  }

  /** The plan `open` would make, without refusing a budget below the floor or opening files. */
  static plan(dir: string, opts: OpenOptions): Plan {
    return WeightStore.planOf(prepareStore(dir, opts));
  }

  static planOf(p: Prepared): Plan {
    return makePlan(p.cfg, p.layout, p.state, p.budget, p.ctx, p.chunk, p.parallel, p.env);
  }

  /** Widest matrix the kernels must handle (columns). */
  static maxCols(p: Prepared): number {
    return kernelMaxCols(p.cfg, p.layout, p.env);
  }

  /** Lookahead expert prefetch on (guesses decide only what is read early, never what is computed). */
  get lookahead(): boolean {
    return this.expertSlots.lookahead;
  }

  set lookahead(on: boolean) {
    this.expertSlots.lookahead = on;
  }

  /** Test hook: replaces each lookahead guess (e.g. with experts sure to be wrong). */
  get guessOverride(): ((layer: number, guessed: number[]) => number[]) | null {
    return this.expertSlots.guessOverride;
  }

  set guessOverride(f: ((layer: number, guessed: number[]) => number[]) | null) {
    this.expertSlots.guessOverride = f;
  }

  /** The bytes of the trunk pieces laid out in column panels (pinned pieces of panelled matrices). */
  get panelledBytes(): number {
    return this.trunk.panelledBytes;
  }

  /** Whether the trunk matrices `--fast` requantizes include `base`. */
  isRequantized(base: string): boolean {
    return this.trunk.isRequantized(base);
  }

  /** How many trunk matrices (and their stored bytes) `--fast` requantizes. */
  get requantized(): { matrices: number; bytes: number } {
    return this.trunk.requantized;
  }

  /** A trunk matrix, checked against [rows, cols]. */
  mat(base: string, rows: number, cols: number): Mat {
    return lendMatrix(this.parts, this.trunk, this.trunk.matrix(base, rows, cols), base);
  }

  /**
   * A small tensor (RMSNorm gains, biases, A_log, conv taps) as f32 values, checked to hold `count`
   * elements (or at least `count` when `atLeast`, for K3's A_log padded to head_dim).
   */
  vector(name: string, count: number, atLeast = false): Promise<Float32Array> {
    return this.smalls.vector(name, count, atLeast);
  }

  /** Embedding rows of `ids` as f32 [ids.length, D]: read on demand, or from the table when the plan keeps it. */
  embedRows(ids: number[]): Promise<Float32Array> {
    return this.smalls.embedRows(ids);
  }

  /**
   * Every weight buffer the plan holds is made: each pinned piece and each expert slot (both made
   * on first use). From then on a forward pass allocates no weight memory, so nothing it allocates
   * can land inside a kernel chain launched meanwhile (moe.ts headGraph), which frees what
   * lies above its start.
   */
  get buffersMade(): boolean {
    return this.trunk.buffersMade && this.expertSlots.buffersMade;
  }

  /**
   * Begin lending the routed experts `ids` of layer l: the cache step and the reads of the first
   * batch (as many as the cache holds at once) start now, so they run while the caller computes
   * (the shared expert); the returned function lends them to `use`, batch by batch, resident
   * experts of a batch before those still being read; its `ready` says whether all of them are in
   * memory already. Which experts are computed, and on what, never depends on the cache; only
   * which reads happen, and when, does.
   */
  beginExperts(l: number, ids: number[]): ((use: UseExperts) => Promise<void>) & { ready: boolean } {
    return this.expertSlots.begin(l, ids);
  }

  /** Lend the routed experts `ids` of layer l to `use` (beginExperts, then lend at once). */
  async experts(l: number, ids: number[], use: UseExperts): Promise<void> {
    await this.beginExperts(l, ids)(use);
  }

  /**
   * The MoE layer after l and its router matrix, when lookahead is on, that router is resident
   * (guessing must cost no trunk read: it pays off where the trunk is pinned and experts dominate
   * the reads) and the cache is smaller than all experts (else there is nothing to read ahead).
   */
  lookaheadLayer(l: number): number | null {
    return this.expertSlots.lookaheadLayer(l);
  }

  /**
   * Lookahead: read experts guessed for a later MoE layer into free (or policy-chosen) slots now,
   * while the current layer computes. Never evicts the current step's experts; a wrong guess
   * costs a read and a slot, never a different number.
   */
  guessExperts(l: number, guess: number[]): void {
    this.expertSlots.guess(l, guess);
  }

  /**
   * Read everything the plan keeps resident now, instead of on first use: the pinned trunk and,
   * when the cache holds every expert, all experts, and the embedding table when the plan keeps
   * it. Makes the first tokens as fast as the rest. `onProgress(bytes read, bytes to read)` after
   * each batch.
   */
  async preload(onProgress?: (done: number, total: number) => void): Promise<void> {
    const allExperts = this.expertSlots.holdAll;
    const total = this.plan.pinnedBytes + (allExperts ? this.plan.expertCacheBytes : 0) + this.plan.embedResidentBytes;
    const s = this.stats;
    const read = () => s.trunkBytesRead + s.expertBytesRead + s.embedBytesRead + s.smallBytesRead;
    const r0 = read();
    const report = () => onProgress?.(Math.min(read() - r0, total), total);
    await this.trunk.preload(report);
    if (allExperts) await this.expertSlots.preload(report);
    if (this.plan.embedResidentBytes > 0) await this.embedRows([0]);
    onProgress?.(total, total);
    this.stats.ioWaitMs = 0;
  }

  get ringStats() {
    return this.trunk.ring.stats;
  }

  async close(): Promise<void> {
    await this.trunk.ring.drain();
    await this.expertSlots.drain();
    this.reader.close();
  }
}

export type Prepared = ReturnType<typeof prepareStore>;

/** Read a checkpoint's config and tensor index, lay it out, and resolve the budget (no weights read). */
export function prepareStore(dir: string, opts: OpenOptions) {
  const cfg = loadConfig(dir, opts.overrides);
  const entries = indexCheckpointDir(dir);
  const layout = buildLayout(cfg, entries, opts.maxPiece);
  checkTensorsMatchConfig(cfg, entries);
  const ctx = opts.ctx ?? 4096;
  const chunk = opts.chunk ?? 64;
  const b = opts.budget ?? Number.MAX_SAFE_INTEGER;
  const state = opts.stateSize(cfg);
  const parallel = opts.parallel ?? 0;
  // what the plan counts beside the weights: the threads, and the buffers of the reader fromPrepared makes
  const env: PlanEnv = {
    threads: opts.threads ?? 1,
    directIo: !opts.reader && (opts.io ?? 'buffered') !== 'buffered' && directSupported(),
    verified: (opts.verifyReads ?? 'first') !== 'off' && knownRanges(dir, entries).length > 0,
    ...(opts.pinFirst ? { pinFirst: opts.pinFirst } : {}),
    ...(opts.reserveBytes ? { reservedBytes: opts.reserveBytes } : {}),
    ...(opts.kernelCols ? { kernelCols: opts.kernelCols } : {}),
  };
  const budget = typeof b === 'number' ? b : resolveBudget(b.memory, b.preset, () => maxBudget(cfg, layout, state, ctx, chunk, parallel, env));
  return { dir, cfg, entries, layout, state, budget, ctx, chunk, parallel, env };
}
