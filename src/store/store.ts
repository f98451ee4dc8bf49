// Where weights live. The model asks for a matrix by name and gets a Mat it can look at block by
// block; it cannot tell whether the bytes were pinned, streamed through the ring just now, or
// found in the expert cache. That is what makes every budget compute the same numbers.
//
//   pinned trunk    the first pieces of the forward order, kept after their first read
//   ring            the other trunk pieces, streamed with read-ahead (ring.ts)
//   expert cache    slots of one expert each, filled with parallel reads the moment a router has
//                   chosen (and, by lookahead, with guesses for the next layer before it has)
//   small tensors   norms, biases, conv taps: resident once read
//   embedding       rows read on demand

import * as fs from 'node:fs';
import { loadConfig, type ConfigOverrides, type ModelConfig } from '../checkpoint/config.js';
import { indexCheckpointDir } from '../checkpoint/dir.js';
import { checkTensorsMatchConfig } from '../checkpoint/expect.js';
import { type TensorEntry } from '../checkpoint/safetensors.js';
import { bf16ToF32, f16ToF32 } from '../formats/dtypes.js';
import { decodeRow } from '../formats/decode.js';
import { PANEL_COLS, PANEL_FROM, panelWidth, toPanelsInPlace } from '../formats/panels.js';
import { ReadError, UserError } from '../util/errors.js';
import { allSettledOrThrow } from '../util/settle.js';
import { directSupported, makeReader, type IoMode } from './direct-reader.js';
import { CyclePolicy, ExpertCache, expertKey, keyLayer } from './expert-cache.js';
import { buildLayout, pieceView, type ExpertPart, type Layout, type Piece, type Range, type TrunkMatrixLayout } from './layout.js';
import { residentMat, type GatedMats, type Mat } from './mat.js';
import { checkFloor, kernelMaxCols, makePlan, maxBudget, resolveBudget, type Plan, type PlanEnv, type StateSize } from './plan.js';
import { Ring } from './ring.js';
import { bf16Decoder, decodeRunInPlace, q7View, requantizeQ7InPlace } from '../kernels/fast.js';
import type { WeightView } from '../formats/weight.js';
import { knownRanges, withChecksums } from './checksums.js';
import type { VerifyMode } from './verified-reader.js';

/** Positioned reads of byte ranges into caller memory. A test double can inject faults. */
export interface ByteReader {
  read(file: string, offset: number, into: Uint8Array): Promise<void>;
  close(): void;
}

const MAX_READ = 1 << 30; // one fs.read moves at most 2 GiB in Node 20; stay well below

export class FsReader implements ByteReader {
  private readonly fds = new Map<string, number>();

  private fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = fs.openSync(file, 'r');
      } catch (e) {
        throw new ReadError(`${file}: cannot open (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 4);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    const fd = this.fd(file);
    const length = into.byteLength;
    let done = 0;
    while (done < length) {
      const want = Math.min(MAX_READ, length - done);
      const got = await new Promise<number>((resolve, reject) =>
        fs.read(fd, into, done, want, offset + done, (err, n) => (err ? reject(new ReadError(`${file}: read of ${want} bytes at offset ${offset + done} failed (${err.code ?? err.message})`, 4)) : resolve(n))),
      );
      if (got === 0) throw new ReadError(`${file}: short read at offset ${offset + done}: got ${done} of ${length} bytes (file truncated?)`, 4);
      done += got;
    }
  }

  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    this.fds.clear();
  }
}

export interface StoreStats {
  trunkBytesRead: number;
  expertBytesRead: number;
  embedBytesRead: number;
  smallBytesRead: number;
  /** Milliseconds the forward pass spent waiting for reads. */
  ioWaitMs: number;
  expertHits: number;
  expertMisses: number;
  /** Milliseconds during which at least one read was in flight (compare ioWaitMs: io_overlap). */
  readBusyMs: number;
  /** Lookahead: experts guessed for a layer before its router ran, and those its router then chose. */
  guesses: number;
  guessHits: number;
  /** Guessed experts read ahead (guesses that were not resident already). */
  guessReads: number;
}

/** What the store did, in order, for tests that check when reads are issued (see `WeightStore.trace`). */
export type StoreEvent =
  | { kind: 'routed'; layer: number; experts: number[] }
  | { kind: 'read-expert'; layer: number; expert: number; guess: boolean }
  | { kind: 'use-expert'; layer: number; expert: number }
  | { kind: 'use-matrix'; name: string; row: number };

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
   * `--fast`: REQUANTIZE the bf16 trunk matrices to 7-bit blocks (kernels/wasm/q8-trunk.ts) as
   * each piece is read, pinned or streamed alike, so the numbers do not depend on the budget.
   * Not MLA's kv_b (read by rows) nor the MoE router (names.ts TrunkMatrix.exact). In place in the
   * piece's buffer: the plan's bytes are the file's (the q7 bytes take 56% of them).
   */
  fastTrunk?: boolean;
  /**
   * Resident wide bf16 trunk matrices laid out in column panels once read (formats/panels.ts; the
   * same values, so the same numbers): matrices wider than `from` columns, panels about `width`
   * wide. Default on (PANEL_FROM, PANEL_COLS); false: every matrix row-major.
   */
  panels?: PanelOptions | false;
}

export interface PanelOptions {
  from?: number;
  width?: number;
}

/** What opening a checkpoint needs: the options, config overrides, and the size of a sequence's state (the model's). */
export type OpenOptions = StoreOptions & { overrides?: ConfigOverrides; stateSize: (cfg: ModelConfig) => StateSize };

const plainAlloc = (bytes: number): Uint8Array => new Uint8Array(bytes);

export class WeightStore {
  readonly plan: Plan;
  readonly stats: StoreStats = { trunkBytesRead: 0, expertBytesRead: 0, embedBytesRead: 0, smallBytesRead: 0, ioWaitMs: 0, expertHits: 0, expertMisses: 0, readBusyMs: 0, guesses: 0, guessHits: 0, guessReads: 0 };
  /** Lookahead expert prefetch on (guesses decide only what is read early, never what is computed). */
  lookahead = true;
  /** Test hook: replaces each lookahead guess (e.g. with experts sure to be wrong). */
  guessOverride: ((layer: number, guessed: number[]) => number[]) | null = null;
  /** Test hook: told of every expert read, expert use and matrix use, in order. */
  trace: ((e: StoreEvent) => void) | null = null;
  private readonly pinned = new Map<number, PinnedPiece>();
  /** Split trunk matrices pinned in one buffer, by base (null: in a buffer per piece); see pinBuffer. */
  private readonly together = new Map<string, Uint8Array | null>();
  /** Trunk matrices requantized to q7 as they are read (`fastTrunk`). */
  private readonly q7 = new Set<string>();
  /** Trunk matrices whose pinned pieces go in column panels, by base: the panel width. */
  private readonly panelWidths = new Map<string, number>();
  private readonly ring: Ring;
  private readonly smalls = new Map<string, Promise<Float32Array>>();
  private readonly cache: ExpertCache<number>;
  private readonly slots: Uint8Array[] = [];
  private readonly freeSlots: number[] = [];

  constructor(
    readonly cfg: ModelConfig,
    readonly entries: Map<string, TensorEntry>,
    readonly layout: Layout,
    readonly reader: ByteReader,
    state: StateSize,
    budget: number,
    ctx: number,
    chunk: number,
    private readonly alloc: (bytes: number) => Uint8Array = plainAlloc,
    parallel = 0,
    fastTrunk = false,
    private readonly allocTogether: (bytes: number) => Uint8Array | null = alloc,
    panels: PanelOptions | false = {},
    env: PlanEnv = {},
  ) {
    if (fastTrunk) for (const m of layout.matrices.values()) if (fastEligible(m)) this.q7.add(m.base);
    if (panels) {
      for (const m of layout.matrices.values()) {
        const w = this.q7.has(m.base) ? 0 : panelEligible(m, panels);
        if (w) this.panelWidths.set(m.base, w);
      }
    }
    this.plan = makePlan(cfg, layout, state, budget, ctx, chunk, parallel, env);
    checkFloor(this.plan);
    const streamed = layout.sequence.slice(this.plan.pinnedPieces);
    this.ring = new Ring(alloc(this.plan.ringBytes), streamed, (p, into) => this.readPiece(p, into));
    this.cache = new ExpertCache<number>(this.plan.expertSlots, new CyclePolicy(cfg.numLayers), (l, e, slot) => {
      this.pending.delete(expertKey(l, e));
      this.failedReads.delete(expertKey(l, e));
      if (slot !== undefined) this.freeSlots.push(slot);
    });
  }

  /** Open a checkpoint directory with a memory budget (default: everything resident). */
  static open(dir: string, opts: OpenOptions): WeightStore {
    return WeightStore.fromPrepared(prepareStore(dir, opts), opts);
  }

  /** Open from what `prepareStore` read (config, tensor index, layout, budget), so it is read once. */
  static fromPrepared(p: Prepared, opts: StoreOptions = {}): WeightStore {
    const base = opts.reader ?? makeReader(opts.io ?? 'buffered', () => new FsReader(), opts.notice);
    const reader = withChecksums(p.dir, p.entries, base, opts.verifyReads ?? 'first');
    const store = new WeightStore(p.cfg, p.entries, p.layout, reader, p.state, p.budget, p.ctx, p.chunk, opts.alloc, p.parallel, opts.fastTrunk ?? false, opts.allocTogether ?? opts.alloc, opts.panels ?? {}, p.env);
    store.lookahead = opts.lookahead ?? true;
    return store;
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
    return kernelMaxCols(p.cfg, p.layout);
  }

  private inFlight = 0;
  private busySince = 0;

  /** Every read goes through here: counts the time at least one read is in flight. */
  private async io(file: string, offset: number, into: Uint8Array): Promise<void> {
    if (this.inFlight++ === 0) this.busySince = performance.now();
    try {
      await this.reader.read(file, offset, into);
    } finally {
      if (--this.inFlight === 0) this.stats.readBusyMs += performance.now() - this.busySince;
    }
  }

  private async readRange(r: Range, into: Uint8Array): Promise<void> {
    await this.io(r.file, r.offset, into);
  }

  private async readPiece(p: Piece, into: Uint8Array): Promise<void> {
    await this.readStored(p, into);
    if (this.q7.has(p.base)) requantizeQ7InPlace(into, p.r1 - p.r0, p.cols);
  }

  private async readStored(p: Piece, into: Uint8Array): Promise<void> {
    if (p.code) {
      // Coded rows (k3 pack --compress): the stored bytes go to the end of the piece's buffer and decode in place.
      await this.readRange(p.data, into.subarray(p.bytes - p.data.length, p.bytes));
      decodeRunInPlace(into.subarray(0, p.bytes), p.code, bf16Decoder());
      this.stats.trunkBytesRead += p.data.length;
      return;
    }
    const dataLen = p.data.length;
    const reads = [this.readRange(p.data, into.subarray(0, dataLen))];
    if (p.scale) reads.push(this.readRange(p.scale, into.subarray(dataLen, dataLen + p.scale.length)));
    await allSettledOrThrow(reads);
    this.stats.trunkBytesRead += p.bytes;
  }

  /** The view of a piece's buffer: as stored, in column panels (pinned pieces of panelled
   *  matrices: readPinned), or the q7 rows it was requantized to (in its own buffer, or in its
   *  matrix's one buffer: pinQ7Together). */
  private viewOf(p: Piece, buf: Uint8Array, base: string): WeightView {
    const width = this.panelWidth(p);
    if (width) return { ...pieceView(p, buf, base), panels: { rows: p.r1 - p.r0, width } };
    if (!this.q7.has(p.base)) return pieceView(p, buf, base);
    const whole = this.together.get(p.base);
    if (whole) return q7View(base, whole, p.rows, p.cols, p.r0, p.r1);
    return q7View(base, buf, p.r1 - p.r0, p.cols);
  }

  /** The panel width of piece p's bytes (pinned pieces of panelled matrices), 0: row-major. */
  private panelWidth(p: Piece): number {
    return p.seq < this.plan.pinnedPieces ? (this.panelWidths.get(p.base) ?? 0) : 0;
  }

  /** A pinned piece's stored rows, then (panelled matrices) laid out in column panels in place. */
  private async readPinned(p: Piece, buf: Uint8Array): Promise<void> {
    await this.readPiece(p, buf);
    const width = this.panelWidth(p);
    if (width) toPanelsInPlace(buf, p.r1 - p.r0, p.cols, width);
  }

  /** The bytes of the trunk pieces laid out in column panels (pinned pieces of panelled matrices). */
  get panelledBytes(): number {
    let bytes = 0;
    for (const b of this.panelWidths.keys()) for (const p of this.layout.matrices.get(b)!.pieces) if (this.panelWidth(p)) bytes += p.bytes;
    return bytes;
  }

  /** Whether the trunk matrices `--fast` requantizes include `base`. */
  isRequantized(base: string): boolean {
    return this.q7.has(base);
  }

  /** How many trunk matrices (and their stored bytes) `--fast` requantizes. */
  get requantized(): { matrices: number; bytes: number } {
    let bytes = 0;
    for (const b of this.q7) for (const p of this.layout.matrices.get(b)!.pieces) bytes += p.bytes;
    return { matrices: this.q7.size, bytes };
  }

  private async acquirePiece(p: Piece): Promise<Uint8Array> {
    if (p.seq >= this.plan.pinnedPieces) {
      const t0 = performance.now();
      const buf = await this.ring.acquire(p);
      this.stats.ioWaitMs += performance.now() - t0;
      return buf;
    }
    let e = this.pinned.get(p.seq);
    // a read that failed is tried again, into the same buffer, by the next use
    if (!e || e.failed) {
      const m = this.layout.matrices.get(p.base)!;
      const whole = this.togetherBuffer(m);
      if (whole && this.q7.has(p.base)) {
        this.pinQ7Together(m, whole);
        e = this.pinned.get(p.seq)!;
      } else {
        const buf = e?.buf ?? this.pinBuffer(p, m, whole);
        e = this.pin(p, buf, this.readPinned(p, buf));
      }
    }
    const t0 = performance.now();
    await e.ready;
    this.stats.ioWaitMs += performance.now() - t0;
    return e.buf;
  }

  /**
   * A pinned piece's buffer: its own, or its rows of one buffer that holds its whole matrix (a split
   * matrix, every piece pinned, rows only: bf16 / f16 / f32 without scales; `--fast`'s requantized
   * ones go through pinQ7Together), so that the matrix is one view too (`now`) and the chained
   * dispatches take it (a matrix over DEFAULT_MAX_PIECE is split: K3's KDA and MoE products, its
   * lm_head). The same bytes either way.
   */
  private pinBuffer(p: Piece, m: TrunkMatrixLayout, whole: Uint8Array | null): Uint8Array {
    if (!whole) return this.alloc(p.bytes);
    const i = m.pieces.indexOf(p);
    if (i < 0) throw new Error(`${p.base}: piece ${p.seq} not in its matrix`);
    return piecesIn(m, whole)[i]!;
  }

  /** The one buffer of split matrix m's pieces (allocated at the first piece's pinning), or null
   *  when m does not go in one (togetherEligible) or it did not fit where weights go now. */
  private togetherBuffer(m: TrunkMatrixLayout): Uint8Array | null {
    if (!this.togetherEligible(m)) return null;
    let buf = this.together.get(m.base);
    if (buf === undefined) {
      buf = this.allocTogether(m.pieces.reduce((n, q) => n + q.bytes, 0));
      this.together.set(m.base, buf);
    }
    return buf;
  }

  /**
   * Pins every piece of a split matrix that `--fast` requantizes, in its one buffer: the pieces'
   * bf16 rows are read there, then the whole matrix is requantized at once, so that its q7 rows
   * are one view (row r at r * cols, all scales after all rows: the layout the kernels take) and
   * the chained dispatches take it, as they take a bf16 matrix's. Each piece's entry is ready when
   * the whole is. The q7 bytes of a row are its own (requantizeQ7Ref works row by row), so they
   * are those of a piece requantized alone (streamed pieces): the same numbers at every budget.
   */
  private pinQ7Together(m: TrunkMatrixLayout, whole: Uint8Array): void {
    const bufs = piecesIn(m, whole);
    const ready = allSettledOrThrow(m.pieces.map((q, i) => this.readStored(q, bufs[i]!))).then(() => requantizeQ7InPlace(whole, m.rows, m.cols));
    m.pieces.forEach((q, i) => this.pin(q, bufs[i]!, ready));
  }

  /** Records piece p as pinned in buf, its bytes there once `ready` settles (done then). */
  private pin(p: Piece, buf: Uint8Array, ready: Promise<void>): PinnedPiece {
    const entry = { buf, ready, done: false, failed: false };
    ready.then(() => void (entry.done = true), () => void (entry.failed = true));
    this.pinned.set(p.seq, entry);
    return entry;
  }

  /** A split matrix whose every piece is pinned. */
  private splitPinned(m: TrunkMatrixLayout): boolean {
    return m.pieces.length > 1 && m.pieces.every((p) => p.seq < this.plan.pinnedPieces);
  }

  private togetherEligible(m: TrunkMatrixLayout): boolean {
    return this.splitPinned(m) && m.pieces.every((p) => !p.scale);
  }

  private releasePiece(p: Piece): void {
    if (p.seq >= this.plan.pinnedPieces) this.ring.release(p);
  }

  /** A trunk matrix, checked against [rows, cols]. */
  mat(base: string, rows: number, cols: number): Mat {
    const m = this.layout.matrices.get(base);
    if (!m) throw new UserError(`missing tensor ${base}.weight in the checkpoint`);
    if (m.rows !== rows || m.cols !== cols) throw new UserError(`tensor ${base} is [${m.rows}, ${m.cols}], expected [${rows}, ${cols}]`);
    const acquire = async (p: Piece) => {
      const buf = await this.acquirePiece(p);
      this.trace?.({ kind: 'use-matrix', name: base, row: p.r0 });
      return buf;
    };
    const release = (p: Piece) => this.releasePiece(p);
    const view = (p: Piece, buf: Uint8Array) => this.viewOf(p, buf, base);
    // A pinned single-piece matrix stays put for the store's life: its view may be batched.
    const resident = m.pieces.length === 1 && m.pieces[0]!.seq < this.plan.pinnedPieces;
    let held: WeightView | null = null;
    const now = (): WeightView | null => {
      if (this.trace) return null; // a traced store lends through acquire, so that every use is traced
      if (held) return held;
      const e = this.pinned.get(m.pieces[0]!.seq);
      if (!e?.done) return null;
      held = view(m.pieces[0]!, e.buf);
      return held;
    };
    // A split matrix pinned in one buffer (pinBuffer): one view once every piece is read.
    const together = this.togetherEligible(m);
    let heldWhole: WeightView | null = null;
    const wholeNow = (): WeightView | null => {
      if (this.trace) return null;
      if (heldWhole) return heldWhole;
      const buf = this.together.get(base);
      if (!buf || !m.pieces.every((p) => this.pinned.get(p.seq)?.done)) return null;
      heldWhole = this.q7.has(base) ? q7View(base, buf, rows, cols) : { ...view(m.pieces[0]!, buf), name: base, rows, data: buf };
      return heldWhole;
    };
    // Every piece of a split matrix pinned: its blocks may be batched too (one dispatch, not one each).
    const allPinned = this.splitPinned(m);
    let heldParts: { view: WeightView; r0: number }[] | null = null;
    const partsNow = (): { view: WeightView; r0: number }[] | null => {
      if (this.trace) return null;
      if (heldParts) return heldParts;
      const out: { view: WeightView; r0: number }[] = [];
      for (const p of m.pieces) {
        const e = this.pinned.get(p.seq);
        if (!e?.done) return null;
        out.push({ view: view(p, e.buf), r0: p.r0 });
      }
      heldParts = out;
      return out;
    };
    return {
      name: base,
      rows,
      cols,
      format: m.format,
      resident,
      ...(resident ? { now } : together ? { now: wholeNow } : {}),
      ...(allPinned ? { partsNow } : {}),
      async parts(fn) {
        for (const p of m.pieces) {
          const buf = await acquire(p);
          try {
            fn(view(p, buf), p.r0);
          } finally {
            release(p);
          }
        }
      },
      async whole(fn) {
        if (m.pieces.length !== 1) throw new Error(`${base}: whole() on a matrix split into ${m.pieces.length} pieces`);
        const p = m.pieces[0]!;
        const buf = await acquire(p);
        try {
          return fn(view(p, buf));
        } finally {
          release(p);
        }
      },
    };
  }

  /**
   * A small tensor (RMSNorm gains, biases, A_log, conv taps) as f32 values, checked to hold `count`
   * elements (or at least `count` when `atLeast`, for K3's A_log padded to head_dim).
   */
  vector(name: string, count: number, atLeast = false): Promise<Float32Array> {
    let v = this.smalls.get(name);
    if (!v) {
      v = this.readSmall(name, count, atLeast);
      this.smalls.set(name, v);
      // a failed read is not kept: the next use reads again
      const held = v;
      held.catch(() => this.smalls.get(name) === held && this.smalls.delete(name));
    }
    return v;
  }

  private async readSmall(name: string, count: number, atLeast: boolean): Promise<Float32Array> {
    const e = this.layout.smalls.get(name);
    if (!e) throw new UserError(`missing tensor ${name} in the checkpoint`);
    const n = e.shape.reduce((a, b) => a * b, 1);
    if (atLeast ? n < count : n !== count) throw new UserError(`${e.file}: tensor ${name} has ${n} elements (shape ${JSON.stringify(e.shape)}), expected ${count}`);
    const b = new Uint8Array(e.nbytes);
    await this.io(e.file, e.offset, b);
    this.stats.smallBytesRead += e.nbytes;
    const out = new Float32Array(n);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    switch (e.dtype) {
      case 'F32':
        for (let i = 0; i < n; i++) out[i] = dv.getFloat32(i * 4, true);
        break;
      case 'BF16':
        for (let i = 0; i < n; i++) out[i] = bf16ToF32(dv.getUint16(i * 2, true));
        break;
      case 'F16':
        for (let i = 0; i < n; i++) out[i] = f16ToF32(dv.getUint16(i * 2, true));
        break;
      default:
        throw new UserError(`${e.file}: tensor ${name} has dtype ${e.dtype}, expected F32, BF16 or F16`);
    }
    return out;
  }

  private embedTable: Promise<Uint8Array> | null = null;

  /** Embedding rows of `ids` as f32 [ids.length, D]: read on demand, or from the table when the plan keeps it. */
  async embedRows(ids: number[]): Promise<Float32Array> {
    const E = this.layout.embed;
    const D = E.cols;
    const rowBytes = E.data.nbytes / E.rows;
    const out = new Float32Array(ids.length * D);
    if (this.plan.embedResidentBytes > 0) {
      if (!this.embedTable) {
        const buf = new Uint8Array(E.data.nbytes);
        const table = this.readRange({ file: E.data.file, offset: E.data.offset, length: E.data.nbytes }, buf).then(() => {
          this.stats.embedBytesRead += E.data.nbytes;
          return buf;
        });
        this.embedTable = table;
        table.catch(() => this.embedTable === table && (this.embedTable = null));
      }
      const table = await this.embedTable;
      const view = { name: 'embed', format: E.format, rows: E.rows, cols: D, data: table };
      ids.forEach((id, i) => decodeRow(view, id, out.subarray(i * D, (i + 1) * D)));
      return out;
    }
    const bufs = ids.map(() => new Uint8Array(rowBytes));
    await allSettledOrThrow(ids.map((id, i) => this.io(E.data.file, E.data.offset + id * rowBytes, bufs[i]!)));
    ids.forEach((_, i) => {
      decodeRow({ name: 'embed', format: E.format, rows: 1, cols: D, data: bufs[i]! }, 0, out.subarray(i * D, (i + 1) * D));
    });
    this.stats.embedBytesRead += ids.length * rowBytes;
    return out;
  }

  /** Where each part (gate, up, down; data then scale) of an expert goes inside its slot. */
  private slotLayout(parts: ExpertPart[]): { coalesced: Range | null; offsets: number[] } {
    const ranges = parts.flatMap((p) => (p.scale ? [p.data, p.scale] : [p.data]));
    const file = ranges[0]!.file;
    const lo = Math.min(...ranges.map((r) => r.offset));
    const hi = Math.max(...ranges.map((r) => r.offset + r.length));
    if (ranges.every((r) => r.file === file) && hi - lo === this.layout.expertBytes) {
      // One contiguous run per expert (K3 ships them so): one read, parts at their file offsets.
      return { coalesced: { file, offset: lo, length: hi - lo }, offsets: ranges.map((r) => r.offset - lo) };
    }
    let o = 0;
    return { coalesced: null, offsets: ranges.map((r) => ((o += r.length), o - r.length)) };
  }

  private readonly places = new Map<number, { parts: ExpertPart[]; coalesced: Range | null; offsets: number[] }>();

  /** An expert's parts and where they go in its slot (worked out once per expert). */
  private expertPlace(l: number, e: number): { parts: ExpertPart[]; coalesced: Range | null; offsets: number[] } {
    const key = l * 65536 + e;
    let p = this.places.get(key);
    if (!p) {
      const parts = this.layout.experts(l, e);
      p = { parts, ...this.slotLayout(parts) };
      this.places.set(key, p);
    }
    return p;
  }

  private async readExpert(l: number, e: number, slot: Uint8Array): Promise<void> {
    const { parts, coalesced, offsets } = this.expertPlace(l, e);
    if (coalesced) await this.readRange(coalesced, slot.subarray(0, coalesced.length));
    else {
      const ranges = parts.flatMap((p) => (p.scale ? [p.data, p.scale] : [p.data]));
      await allSettledOrThrow(ranges.map((r, i) => this.readRange(r, slot.subarray(offsets[i]!, offsets[i]! + r.length))));
    }
    this.stats.expertBytesRead += this.layout.expertBytes;
  }

  private expertWeights(l: number, e: number, slot: Uint8Array): GatedMats {
    const { parts, offsets } = this.expertPlace(l, e);
    let k = 0;
    const mats = parts.map((p) => {
      const dataOff = offsets[k++]!;
      const view = pieceView({ ...p, scale: null }, slot.subarray(dataOff, dataOff + p.data.length), `expert ${l}.${e}.${p.mat}`);
      if (p.scale) {
        const so = offsets[k++]!;
        view.scale = slot.subarray(so, so + p.scale.length);
        view.scaleDtype = p.scaleDtype;
      }
      return residentMat(view);
    });
    return { gate: mats[0]!, up: mats[1]!, down: mats[2]! };
  }

  /**
   * Every weight buffer the plan holds is made: each pinned piece and each expert slot (both made
   * on first use). From then on a forward pass allocates no weight memory, so nothing it allocates
   * can land inside a kernel chain launched meanwhile (moe.ts moeHeadChained), which frees what
   * lies above its start.
   */
  get buffersMade(): boolean {
    return this.pinned.size >= this.plan.pinnedPieces && this.slots.length >= this.plan.expertSlots;
  }

  private slot(i: number): Uint8Array {
    if (this.slots.length === 0 && i === 0) {
      // Every slot of the plan at the first one's use (planned memory; pages nobody wrote cost no
      // RSS): no later step allocates expert memory (buffersMade). Slots are handed out in order.
      for (let k = 0; k < this.plan.expertSlots; k++) this.slots.push(this.alloc(this.layout.expertBytes));
      for (let k = this.plan.expertSlots - 1; k > 0; k--) this.freeSlots.push(k);
    }
    let s = this.slots[i];
    if (!s) {
      s = this.alloc(this.layout.expertBytes);
      this.slots[i] = s;
    }
    return s;
  }

  /** Reads into each expert slot, chained: a slot is refilled only after its last read settled. */
  private readonly slotBusy: Promise<void>[] = [];
  /** Expert reads still in flight, by expertKey: a hit on one waits for it. */
  private readonly pending = new Map<number, Promise<void>>();
  /** Lookahead guesses not yet settled by their layer's router, by expertKey. */
  private readonly guessed = new Set<number>();
  /** The last layer begun fits the cache in one batch (only then are guesses read ahead). */
  private oneBatch = false;

  /** Start reading expert (l, e) into a free slot now; the cache maps it to that slot. */
  private startRead(l: number, e: number, guess: boolean, put: (slot: number) => boolean): void {
    const si = this.freeSlots.pop() ?? this.slots.length;
    const buf = this.slot(si);
    if (!put(si)) {
      this.freeSlots.push(si);
      return;
    }
    this.trace?.({ kind: 'read-expert', layer: l, expert: e, guess });
    const read = (this.slotBusy[si] ?? Promise.resolve()).catch(() => {}).then(() => this.readExpert(l, e, buf));
    this.slotBusy[si] = read;
    const key = expertKey(l, e);
    this.pending.set(key, read);
    this.failedReads.delete(key);
    // A failed guess that nobody uses must not surface as an unhandled rejection; a use awaits it.
    read.then(
      () => this.pending.get(key) === read && this.pending.delete(key),
      () => this.pending.get(key) === read && this.failedReads.add(key),
    );
  }

  /** Experts whose read failed and that no use has been told of yet (by expertKey). */
  private readonly failedReads = new Set<number>();

  /** Count layer l's lookahead guesses against what its router chose. */
  private settleGuesses(l: number, chosen: number[]): void {
    for (const e of chosen) if (this.guessed.delete(expertKey(l, e))) this.stats.guessHits++;
    for (const k of [...this.guessed]) if (keyLayer(k) === l) this.guessed.delete(k);
  }

  /** Cache step for one batch of layer l and the start of its missing reads. */
  private startBatch(l: number, part: number[]): { part: number[]; missing: Set<number> } {
    const missing = this.cache.step(l, part);
    this.stats.expertMisses += missing.length;
    this.stats.expertHits += part.length - missing.length;
    for (const e of missing) this.startRead(l, e, false, (si) => this.cache.put(l, e, si));
    return { part, missing: new Set(missing) };
  }

  /** The handles lent for the expert each slot holds (built on its first use there). */
  private readonly slotMats: ({ key: number; w: GatedMats } | undefined)[] = [];

  private weightsOf(l: number, e: number): { expert: number; w: GatedMats } {
    const si = this.cache.get(l, e);
    if (si === undefined) throw new Error(`expert ${l}.${e} not resident after its read`);
    this.trace?.({ kind: 'use-expert', layer: l, expert: e });
    const key = expertKey(l, e), held = this.slotMats[si];
    if (held?.key === key) return { expert: e, w: held.w };
    const w = this.expertWeights(l, e, this.slot(si));
    this.slotMats[si] = { key, w };
    return { expert: e, w };
  }

  /** Lend one started batch: the experts already resident first, the rest once their reads are in. */
  private async lendBatch(l: number, b: { part: number[]; missing: Set<number> }, use: (batch: { expert: number; w: GatedMats }[]) => Promise<void>): Promise<void> {
    const ready = b.part.filter((e) => !b.missing.has(e) && !this.pending.has(expertKey(l, e)));
    const later = b.part.filter((e) => !ready.includes(e));
    if (ready.length > 0) await use(ready.map((e) => this.weightsOf(l, e)));
    if (later.length === 0) return;
    const t0 = performance.now();
    try {
      await Promise.all(later.map((e) => this.pending.get(expertKey(l, e))));
    } catch (err) {
      // The use that is told of a failed read drops the expert: the next step reads it anew.
      for (const e of later) if (this.failedReads.has(expertKey(l, e))) this.cache.drop(l, e);
      throw err;
    }
    this.stats.ioWaitMs += performance.now() - t0;
    await use(later.map((e) => this.weightsOf(l, e)));
  }

  /**
   * Begin lending the routed experts `ids` of layer l: the cache step and the reads of the first
   * batch (as many as the cache holds at once) start now, so they run while the caller computes
   * (the shared expert); the returned function lends them to `use`, batch by batch, resident
   * experts of a batch before those still being read; its `ready` says whether all of them are in
   * memory already. Which experts are computed, and on what, never depends on the cache; only
   * which reads happen, and when, does.
   */
  beginExperts(l: number, ids: number[]): ((use: (batch: { expert: number; w: GatedMats }[]) => Promise<void>) => Promise<void>) & { ready: boolean } {
    this.trace?.({ kind: 'routed', layer: l, experts: ids });
    this.settleGuesses(l, ids);
    const size = Math.max(1, this.plan.expertSlots);
    this.oneBatch = ids.length <= size;
    const first = this.startBatch(l, ids.slice(0, size));
    const lend = async (use: (batch: { expert: number; w: GatedMats }[]) => Promise<void>): Promise<void> => {
      for (let i = 0, b = first; ; b = this.startBatch(l, ids.slice(i, i + size))) {
        await this.lendBatch(l, b, use);
        i += size;
        if (i >= ids.length) return;
      }
    };
    // in memory already: one batch, nothing missing, no read of an earlier step still in flight
    const ready = this.oneBatch && first.missing.size === 0 && first.part.every((e) => !this.pending.has(expertKey(l, e)));
    return Object.assign(lend, { ready });
  }

  /** Lend the routed experts `ids` of layer l to `use` (beginExperts, then lend at once). */
  async experts(l: number, ids: number[], use: (batch: { expert: number; w: GatedMats }[]) => Promise<void>): Promise<void> {
    await this.beginExperts(l, ids)(use);
  }

  /**
   * The MoE layer after l and its router matrix, when lookahead is on, that router is resident
   * (guessing must cost no trunk read: it pays off where the trunk is pinned and experts dominate
   * the reads) and the cache is smaller than all experts (else there is nothing to read ahead).
   */
  lookaheadLayer(l: number): number | null {
    if (!this.lookahead || this.plan.expertSlots >= this.plan.expertsTotal) return null;
    for (let n = l + 1; n < this.cfg.numLayers; n++) if (this.cfg.layers[n]!.ffn === 'moe') return n;
    return null;
  }

  /**
   * Lookahead: read experts guessed for a later MoE layer into free (or policy-chosen) slots now,
   * while the current layer computes. Never evicts the current step's experts; a wrong guess
   * costs a read and a slot, never a different number.
   */
  guessExperts(l: number, guess: number[]): void {
    // A layer lent in several batches evicts its own earlier batches; guesses would not survive it.
    if (!this.oneBatch) return;
    const ids = this.guessOverride ? this.guessOverride(l, guess) : guess;
    for (const e of ids) this.guessed.add(expertKey(l, e));
    this.stats.guesses += ids.length;
    for (const e of this.cache.reserveGuesses(l, ids)) {
      this.stats.guessReads++;
      this.startRead(l, e, true, (si) => this.cache.putGuess(l, e, si));
    }
  }

  /**
   * Read everything the plan keeps resident now, instead of on first use: the pinned trunk and,
   * when the cache holds every expert, all experts. Makes the first tokens as fast as the rest.
   */
  /** Read the resident weights now; `onProgress(bytes read, bytes to read)` after each batch. */
  async preload(onProgress?: (done: number, total: number) => void): Promise<void> {
    const pins = this.layout.sequence.slice(0, this.plan.pinnedPieces);
    const allExperts = this.plan.expertSlots > 0 && this.plan.expertSlots >= this.plan.expertsTotal;
    const total = this.plan.pinnedBytes + (allExperts ? this.plan.expertCacheBytes : 0) + this.plan.embedResidentBytes;
    const s = this.stats;
    const read = () => s.trunkBytesRead + s.expertBytesRead + s.embedBytesRead + s.smallBytesRead;
    const r0 = read();
    const report = () => onProgress?.(Math.min(read() - r0, total), total);
    for (let i = 0; i < pins.length; i += 8) {
      await Promise.all(pins.slice(i, i + 8).map(async (p) => this.releasePiece((await this.acquirePiece(p), p))));
      report();
    }
    if (allExperts) {
      const all = Array.from({ length: this.cfg.moe.experts }, (_, e) => e);
      for (let l = 0; l < this.cfg.numLayers; l++) {
        if (this.cfg.layers[l]!.ffn === 'moe') await this.experts(l, all, async () => {});
        report();
      }
    }
    if (this.plan.embedResidentBytes > 0) await this.embedRows([0]);
    onProgress?.(total, total);
    this.stats.ioWaitMs = 0;
  }

  get ringStats() {
    return this.ring.stats;
  }

  async close(): Promise<void> {
    await this.ring.drain();
    await Promise.allSettled(this.slotBusy);
    this.reader.close();
  }
}

/** A pinned piece: its buffer, the read (and requantization) that fills it, and whether that has finished. */
interface PinnedPiece { buf: Uint8Array; ready: Promise<void>; done: boolean; failed: boolean }

/** Each piece's bytes in its matrix's one buffer (pinBuffer), the pieces in row order. */
function piecesIn(m: TrunkMatrixLayout, whole: Uint8Array): Uint8Array[] {
  let off = 0;
  return m.pieces.map((q) => whole.subarray(off, (off += q.bytes)));
}

/**
 * The panel width of trunk matrix m's pinned pieces, 0 for none: bf16 products (not read by rows)
 * wider than `from` columns that split into panels (formats/panels.ts panelWidth), in pieces of
 * fewer than 32768 rows (the kernels' op word, fast.ts panelWord).
 */
export function panelEligible(m: TrunkMatrixLayout, o: PanelOptions): number {
  const rows = m.pieces[0] ? m.pieces[0].r1 - m.pieces[0].r0 : 0;
  if (m.format !== 'bf16' || m.whole || m.cols <= (o.from ?? PANEL_FROM) || rows >= 32768) return 0;
  return panelWidth(m.cols, o.width ?? PANEL_COLS);
}

/** The trunk matrices `--fast` requantizes: bf16 products in 32-column blocks, not read by rows, not the router. */
export function fastEligible(m: TrunkMatrixLayout): boolean {
  return m.format === 'bf16' && !m.whole && !m.exact && m.cols % 32 === 0;
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
  };
  const budget = typeof b === 'number' ? b : resolveBudget(b.memory, b.preset, () => maxBudget(cfg, layout, state, ctx, chunk, parallel, env));
  return { dir, cfg, entries, layout, state, budget, ctx, chunk, parallel, env };
}
