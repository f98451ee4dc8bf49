// Fast kernels: WebAssembly SIMD on a shared memory, rows split over a worker pool. Results are
// byte-identical to ref.ts for any thread count, any T, any row range, relaxed SIMD on or off.
//
//   const k = await createKernels({ threads: 2 });
//   const r = k.alloc(bytes);            // weight bytes placed here are used in place (zero copy)
//   k.matmul(w, x, T, y);                // y[t, r] = W[r, :] . x[t, :]
//   await k.close();
//
// Memory: one shared WebAssembly.Memory per Kernels (Node 20: at most 4 GiB each). It holds the
// pool's control block and constant tables, one scratch area per thread, then a bump arena:
// alloc() hands out regions, mark()/release() free them in stack order. Budgets above 4 GiB use
// several Kernels (one memory and one set of workers each).
//
// Zero copy: a WeightView whose `data` (and `scale`) are views into this memory (e.g. bytes read
// straight into `alloc(n).u8`) is used in place; any other weight is copied into the arena for
// the duration of the call (correct, but it costs a copy per call: use upload() or alloc()).
// Activations and outputs may be anywhere; those inside the memory avoid a copy.
//
// Fused pieces (wasm/fused.ts): kdaStep (KDA delta rule, all heads of a token), mlaScores and
// mlaWeightedSum (MLA attention over the latent cache), byte-identical to their references in
// src/model; heads split across the pool. The model keeps its sequence state in this memory
// (KernelGroup.allocF32), so they run in place.

import * as os from 'node:os';
import type { WeightView, WeightFormat, PanelLayout } from '../formats/weight.js';
import { kernelModule, instantiate, initConstants, relaxedSimdAvailable, type KernelExports } from './wasm/loader.js';
import { CONST_END, FMTS, MM_PERM, TILE_PERM, TILE_SCRATCH, TILE_MIN_T, Q8_SDT, Q7_SDT, PANEL_SDT, type Fmt, type Perm } from './wasm/kernels.js';
import { PANEL_ACC_BYTES } from './wasm/mm1.js';
import { q8Bytes, Q8_LAYOUT, ORDER_CODE, type Q8Order } from './wasm/q8.js';
import { q8tBytes, Q8T_LAYOUT } from './wasm/q8-trunk.js';
import type { ActKind } from './wasm/act.js';
import { Pool, writeMatmulOp, writeFusedOp, maxOps, OP_KDA, OP_KDA_BLOCK, OP_MLA_SCORES, OP_MLA_WSUM, OP_MVT, OP_ACT, OP_ATTNRES_SCORES, OP_ATTNRES_SUM, OP_PREP, ACT_OPS } from './pool.js';
import { KDA_BLOCK_BYTES, KDA_BLOCK_WORDS, KDA_BLOCK_F64, type KdaBlockArgs } from './wasm/kda-block.js';
import { Chain, type ChainMlp, type ChainPort } from './chain.js';
import { formatMiB } from '../util/format.js';
import { depthSoftmax } from './ref.js';
import type { KernelProfile, ProfileBucket } from './profile.js';

export type { KdaBlockArgs } from './wasm/kda-block.js';

const PAGE = 65536;
// Node 20 allows 4 GiB (65536 pages) per memory; one page less keeps every end pointer the
// kernels compute (base + length) below 2^32, where i32 arithmetic would wrap.
const MAX_PAGES = 65535;

/** Kernel memory of one thread's scratch area for matrices up to `maxCols` columns: decoded /
 *  widened rows, or a panelled product's accumulators (wasm/mm1.ts addPanelled). */
export function threadScratchBytes(maxCols: number): number {
  return Math.max(3 * align(align(Math.max(16, maxCols), 16) * 4, 64), PANEL_ACC_BYTES) + 256 + TILE_SCRATCH;
}

export interface KernelsOptions {
  /** Threads in all, the calling thread included. Default: os.availableParallelism(). */
  threads?: number;
  /** Bytes of memory committed at start; the arena grows on demand. Default 64 MiB. */
  memoryBytes?: number;
  /** Declared maximum of the shared memory, at most 4 GiB - 64 KiB (the default). */
  maxMemoryBytes?: number;
  /** Use relaxed SIMD where it cannot change results (table lookups). Default true if available. */
  relaxed?: boolean;
  /** Widest matrix (columns) the per-thread scratch must hold. Default 32768. */
  maxCols?: number;
  /** Multiply-adds per extra thread below which a call stays on the calling thread. Default 2^17. */
  minWorkPerThread?: number;
  /** Spin before sleeping, microseconds: workers waiting for work, the caller waiting for workers. */
  spinMicros?: { worker: number; main: number };
  /** Column tiles of the fused kernels (tuning; see wasm/fused.ts). */
  kdaTile?: number;
  wsumTile?: number;
  /** The 8-bit paths' integer dot form (wasm/loader.ts intDotAddIsOne; the same bytes either way). */
  intDotAdd?: boolean;
}

/** A region of kernel memory. */
export interface Region {
  /** Byte offset in the memory (what the kernels address). */
  offset: number;
  bytes: number;
  u8: Uint8Array;
}

/** One independent product of a batch: y[t, r] = W[r, :] . x[t, :] for t < T, r in [r0, r1). */
export interface MatmulOp {
  w: WeightView;
  x: Float32Array;
  T: number;
  y: Float32Array;
  r0?: number;
  r1?: number;
}

const FMT_CODE: Record<WeightFormat, number> = Object.fromEntries(FMTS.map((f, i) => [f, i])) as Record<WeightFormat, number>;
const SDT: Record<string, number> = { F32: 0, BF16: 1, F16: 2 };
const SBYTES = [4, 2, 2];
const align = (n: number, a: number): number => Math.ceil(n / a) * a;
/** The formats whose products the profile counts as experts (K3's routed experts, K2's int4). */
const EXPERT_FMTS: ReadonlySet<string> = new Set(['mxfp4', 'int4']);
/** A panelled bf16 matrix's op words (wasm/gen.ts PANEL_SDT): s = block rows << 16 | panel width. */
function panelWord(w: WeightView, L: PanelLayout): { s: number; sdt: number } {
  if (w.format !== 'bf16') throw new TypeError(`${w.name}: column panels are for bf16 rows, not ${w.format}`);
  if (!(L.width > 0 && L.width % 16 === 0 && w.cols % L.width === 0 && L.width < 65536)) throw new RangeError(`${w.name}: panels ${L.width} wide do not split ${w.cols} columns in 16-column steps`);
  if (!(L.rows > 0 && L.rows < 32768 && Number.isInteger(L.rows))) throw new RangeError(`${w.name}: panel blocks of ${L.rows} rows (1 .. 32767)`);
  return { s: L.rows * 65536 + L.width, sdt: PANEL_SDT };
}
/** The transposed products read rows in the checkpoint's layouts only: not q7 rows, not panels. */
function noTransposed(w: WeightView): void {
  if (w.format === 'q7') throw new TypeError(`${w.name}: q7 (requantized by --fast) rows have no transposed product`);
  if (w.panels) throw new TypeError(`${w.name}: rows in column panels have no transposed product`);
}
/** The arguments of q8_act for quantizeQ8's and quantizeQ8T's layouts (scaleMul as f32 bits). */
const actArgs = (o: { order: Q8Order; scaleMul: number; offset: number }): { order: number; scaleBits: number; offset: number } => {
  if (Math.fround(o.scaleMul) !== o.scaleMul) throw new RangeError('q8_act: scaleMul must be an f32');
  return { order: ORDER_CODE[o.order], scaleBits: new Int32Array(new Float32Array([o.scaleMul]).buffer)[0]!, offset: o.offset };
};
const Q8_ACT = actArgs(Q8_LAYOUT), Q8T_ACT = actArgs(Q8T_LAYOUT);

/** Activations prepared for one layout (0/1 rows, 2/3 tiles, id/bf perm; 4 q8; 5 q7) at `off`. */
interface Prep {
  x: Float32Array;
  layout: number;
  cols: number;
  T: number;
  off: number;
}

/** How a product's kernel reads its activations (Kernels.layoutOf). */
interface Layout {
  layout: number;
  tiled: boolean;
  perm: Perm;
  q8: boolean;
  q7: boolean;
}

/** One gated MLP of a batch: y [T, down.rows] = down · act(gate · x, up · x), x [T, gate.cols]. */
export type GatedMlpOp = ChainMlp & { y: Float32Array };

/** An output computed in the arena at `off`, copied to `y` (rows [r0, r1) of each token) after the dispatch. */
interface OutCopy {
  y: Float32Array;
  off: number;
  T: number;
  rows: number;
  r0: number;
  r1: number;
}

interface Resolved {
  readonly fmt: Fmt;
  readonly w: number;
  readonly s: number;
  readonly sdt: number;
  readonly rows: number;
  readonly cols: number;
}

export class Kernels {
  private top: number;
  private readonly buffers = new WeakSet<ArrayBufferLike>();
  /** The memory's buffer and its length as of the last grow (only this instance grows its
   *  memory; a grown shared memory hands out a new buffer, the old one staying valid). Kept so
   *  that the many allocations and checks of a call do not go through the buffer getter. */
  private mem: ArrayBufferLike;
  private memBytes: number;
  private readonly ctrl: Int32Array;
  private readonly maxOps: number;
  /**
   * Optional fast path, off by default: mxfp4 products take 8-bit activations and integer block
   * dots (wasm/q8.ts; same bytes as matmulQ8Ref there, not those of the exact path).
   */
  fastMxfp4 = false;
  private prof: KernelProfile | null = null;

  private constructor(
    readonly memory: WebAssembly.Memory,
    private readonly ex: KernelExports,
    private readonly pool: Pool,
    readonly relaxed: boolean,
    readonly maxCols: number,
    private readonly scratch: number[],
    arenaStart: number,
    private readonly minWork: number,
    /** The `memoryBytes` asked for at creation (what the creator planned to place here). */
    readonly plannedBytes: number,
    /** The memory's maximum size in bytes. */
    readonly maxBytes: number,
  ) {
    this.top = arenaStart;
    this.mem = memory.buffer;
    this.memBytes = this.mem.byteLength;
    this.buffers.add(this.mem);
    this.ctrl = pool.ctrl;
    this.maxOps = maxOps();
  }

  static async create(opts: KernelsOptions = {}): Promise<Kernels> {
    const threads = Math.max(1, Math.floor(opts.threads ?? os.availableParallelism()));
    const maxCols = align(Math.max(16, opts.maxCols ?? 32768), 16);
    const relaxed = (opts.relaxed ?? true) && relaxedSimdAvailable();
    const scratchBytes = threadScratchBytes(maxCols);
    const arenaStart = align(CONST_END + threads * scratchBytes, PAGE);
    const maxPages = Math.min(MAX_PAGES, Math.ceil((opts.maxMemoryBytes ?? MAX_PAGES * PAGE) / PAGE));
    const initialPages = Math.min(maxPages, Math.ceil((arenaStart + (opts.memoryBytes ?? 64 << 20)) / PAGE));
    if (initialPages * PAGE < arenaStart + PAGE) throw new RangeError('kernel memory too small for the scratch areas');
    const memory = new WebAssembly.Memory({ initial: initialPages, maximum: maxPages, shared: true });
    const compiled = kernelModule({ relaxed, kdaTile: opts.kdaTile, wsumTile: opts.wsumTile, intDotAdd: opts.intDotAdd });
    initConstants(memory, compiled);
    const module = compiled.module;
    const ex = instantiate(module, memory);
    const scratch = Array.from({ length: threads }, (_, i) => CONST_END + i * scratchBytes);
    const pool = await Pool.create(module, memory, ex, threads, scratch, opts.spinMicros);
    return new Kernels(memory, ex, pool, relaxed, maxCols, scratch, arenaStart, opts.minWorkPerThread ?? 1 << 17, opts.memoryBytes ?? 64 << 20, maxPages * PAGE);
  }

  /** Threads in all, the calling thread included. */
  get threads(): number {
    return this.pool.size;
  }

  /** Where calls add their time (`k3 bench --profile`); null (the default): nothing is timed. */
  get profile(): KernelProfile | null {
    return this.prof;
  }

  set profile(p: KernelProfile | null) {
    this.prof = p;
    this.pool.timed = p !== null;
    this.pool.waitMs = 0;
  }

  /** pool.run, its time split into `bucket` (the calling thread's share) and waiting for the workers. */
  private runPool(nops: number, nth: number, bucket: ProfileBucket): void {
    const p = this.prof;
    if (!p) {
      this.pool.run(nops, nth);
      return;
    }
    const t0 = performance.now();
    this.pool.waitMs = 0;
    try {
      this.pool.run(nops, nth);
    } finally {
      const w = this.pool.waitMs, ms = performance.now() - t0 - w;
      p.add(bucket, ms);
      if (nth <= 1 && this.pool.size > 1) p.soloMs += ms;
      p.add('wait', w);
      p.calls++;
      if (nth > 1) p.pooled++;
    }
  }

  /** Times a kernel that runs on the calling thread alone (workers idle): its bucket and solo time. */
  private timedSolo(bucket: ProfileBucket, fn: () => void): void {
    const p = this.prof!;
    const t0 = performance.now();
    fn();
    const ms = performance.now() - t0;
    p.add(bucket, ms);
    if (this.pool.size > 1) p.soloMs += ms;
    p.calls++;
  }

  /** Adds the time of a whole call to 'dispatch', less what runPool put in other buckets meanwhile. */
  private timedCall<R>(fn: () => R): R {
    const p = this.prof;
    if (!p) return fn();
    const inner = (): number => p.ms.matmul + p.ms.experts + p.ms.fused + p.ms.wait;
    const t0 = performance.now(), i0 = inner();
    try {
      return fn();
    } finally {
      p.add('dispatch', performance.now() - t0 - (inner() - i0));
    }
  }

  // ---- memory -------------------------------------------------------------------------------

  /** Make the memory at least `end` bytes long. */
  private growTo(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      try {
        this.memory.grow(Math.ceil((end - have) / PAGE));
      } catch {
        throw new RangeError(`kernel memory exhausted: need ${end} bytes, maximum ${formatMiB(have)} reached`);
      }
    }
    this.mem = this.memory.buffer;
    this.memBytes = this.mem.byteLength;
    this.buffers.add(this.mem);
  }

  /** Allocate `bytes` (aligned to `align`, default 64) from the arena, zero-filled on first use only. */
  alloc(bytes: number, alignment = 64): Region {
    if (!(bytes >= 0) || !Number.isInteger(bytes)) throw new RangeError(`alloc: bad size ${bytes}`);
    const offset = this.allocOffset(bytes, alignment);
    return { offset, bytes, u8: new Uint8Array(this.mem, offset, bytes) };
  }

  /** alloc without the view: the offset only (kernel arguments). */
  private allocOffset(bytes: number, alignment = 64): number {
    const offset = align(this.top, alignment);
    const end = offset + bytes;
    if (end > this.memBytes) this.growTo(end);
    this.top = end;
    if (end > this.peak) this.peak = end;
    return offset;
  }

  /** A Float32Array of n elements in kernel memory. */
  allocF32(n: number): Float32Array {
    const r = this.alloc(n * 4, 64);
    return new Float32Array(this.mem, r.offset, n);
  }

  private peak = 0;

  /** The highest the arena top has been: what stays allocated, and the temporaries of the
   *  largest call on top (test/memory.test.ts checks them against the plan's count). */
  get peakTop(): number {
    return this.peak;
  }

  /** Current arena top, for release(). */
  mark(): number {
    return this.top;
  }

  /** Free everything allocated since mark() returned m. */
  release(m: number): void {
    if (m > this.top) throw new RangeError('release: mark is above the arena top');
    this.top = m;
  }

  /** Whether a view lies in this kernel memory (then it can be used in place). */
  contains(a: ArrayBufferView): boolean {
    const b = a.buffer;
    return b === this.mem || this.buffers.has(b);
  }

  /** Copy a weight into the arena; the returned view is used in place by every call. */
  upload(w: WeightView): WeightView {
    const d = this.alloc(w.data.byteLength);
    d.u8.set(w.data);
    let scale: Uint8Array | undefined;
    if (w.scale) {
      const s = this.alloc(w.scale.byteLength);
      s.u8.set(w.scale);
      scale = s.u8;
    }
    return { ...w, data: d.u8, scale };
  }

  private copyIn(a: ArrayBufferView): number {
    const r = this.alloc(a.byteLength);
    r.u8.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    return r.offset;
  }

  /** Views found in place in this memory, resolved once (the store lends the same view objects
   *  for resident matrices and experts, call after call). Never modified after. */
  private readonly inPlace = new WeakMap<WeightView, Resolved>();

  private resolve(w: WeightView): Resolved {
    const held = this.inPlace.get(w);
    if (held) return held;
    const r = this.resolveView(w);
    if (this.contains(w.data) && (!w.scale || this.contains(w.scale))) this.inPlace.set(w, r);
    return r;
  }

  private resolveView(w: WeightView): Resolved {
    const { rows, cols, format } = w;
    if (!(rows >= 0 && cols >= 0 && Number.isInteger(rows) && Number.isInteger(cols))) throw new RangeError(`${w.name}: bad shape`);
    if (cols > this.maxCols) throw new RangeError(`${w.name}: ${cols} columns exceed maxCols ${this.maxCols} (createKernels option)`);
    if (format === 'q7') return this.resolveQ7(w);
    const fmt = format as Fmt;
    if (!(format in FMT_CODE)) throw new TypeError(`${w.name}: unknown format ${format}`);
    const sdt = SDT[w.scaleDtype ?? 'F32'];
    if (sdt === undefined) throw new TypeError(`${w.name}: bad scale dtype ${w.scaleDtype}`);
    let dataBytes: number, scaleBytes = 0;
    switch (fmt) {
      case 'f32': dataBytes = rows * cols * 4; break;
      case 'bf16': case 'f16': dataBytes = rows * cols * 2; break;
      case 'fp8':
        dataBytes = rows * cols;
        scaleBytes = Math.ceil(rows / 128) * Math.ceil(cols / 128) * SBYTES[sdt]!;
        break;
      case 'int4':
        dataBytes = rows * Math.ceil(cols / 8) * 4;
        scaleBytes = rows * Math.ceil(cols / 32) * SBYTES[sdt]!;
        break;
      case 'mxfp4':
        if (cols % 32) throw new RangeError(`${w.name}: mxfp4 needs columns in multiples of 32, got ${cols}`);
        dataBytes = (rows * cols) / 2;
        scaleBytes = (rows * cols) / 32;
        break;
    }
    if (w.data.byteLength < dataBytes) throw new RangeError(`${w.name}: ${w.data.byteLength} data bytes, need ${dataBytes}`);
    if (scaleBytes && (!w.scale || w.scale.byteLength < scaleBytes)) throw new RangeError(`${w.name}: scale has ${w.scale?.byteLength ?? 0} bytes, need ${scaleBytes}`);
    const d = this.contains(w.data) ? w.data.byteOffset : this.copyIn(w.data.subarray(0, dataBytes));
    if (w.panels) return { fmt, w: d, ...panelWord(w, w.panels), rows, cols };
    const s = !scaleBytes ? 0 : this.contains(w.scale!) ? w.scale!.byteOffset : this.copyIn(w.scale!.subarray(0, scaleBytes));
    return { fmt, w: d, s, sdt, rows, cols };
  }

  /** A requantized trunk matrix (`--fast`, wasm/q8-trunk.ts): the bf16 entry with sdt Q7_SDT runs it. */
  private resolveQ7(w: WeightView): Resolved {
    const { rows, cols } = w;
    if (cols % 32) throw new RangeError(`${w.name}: q7 needs columns in multiples of 32, got ${cols}`);
    const dataBytes = rows * cols, scaleBytes = rows * (cols / 32) * 4;
    if (w.data.byteLength < dataBytes) throw new RangeError(`${w.name}: ${w.data.byteLength} data bytes, need ${dataBytes}`);
    if (!w.scale || w.scale.byteLength < scaleBytes) throw new RangeError(`${w.name}: scale has ${w.scale?.byteLength ?? 0} bytes, need ${scaleBytes}`);
    const d = this.contains(w.data) ? w.data.byteOffset : this.copyIn(w.data.subarray(0, dataBytes));
    const s = this.contains(w.scale) ? w.scale.byteOffset : this.copyIn(w.scale.subarray(0, scaleBytes));
    return { fmt: 'bf16', w: d, s, sdt: Q7_SDT, rows, cols };
  }

  /**
   * x [T, cols] in the layout the format's kernel wants: for T >= TILE_MIN_T[fmt] token tiles
   * (tilex), below that the rows themselves or their permuted copy.
   */
  private prepX(x: Float32Array, T: number, cols: number, perm: Perm, tiled: boolean): number {
    const n = T * cols;
    if (x.length < n) throw new RangeError(`activations: ${x.length} values, need ${n}`);
    const inMem = this.contains(x);
    if (tiled) {
      const src = inMem ? x.byteOffset : this.copyIn(x.subarray(0, n));
      const dst = this.alloc(n * 4).offset;
      this.ex.tilex!(src, dst, T, cols, perm === 'bf' ? 1 : 0);
      return dst;
    }
    if (perm === 'id') return inMem ? x.byteOffset : this.copyIn(x.subarray(0, n));
    const src = inMem ? x.byteOffset : this.copyIn(x.subarray(0, n));
    const dst = this.alloc(n * 4).offset;
    this.ex[`permx_${perm}`]!(src, dst, T, cols);
    return dst;
  }

  /** x [T, cols] quantized for the q8 kernel (wasm/q8.ts quantizeQ8's bytes), in the arena. */
  private prepQ8(x: Float32Array, T: number, cols: number): number {
    return this.quantizeActs(x, T, cols, q8Bytes(T, cols), Q8_ACT);
  }

  /** x [T, cols] quantized for the q7 trunk kernel (wasm/q8-trunk.ts quantizeQ8T's bytes), in the arena. */
  private prepQ8T(x: Float32Array, T: number, cols: number): number {
    return this.quantizeActs(x, T, cols, q8tBytes(T, cols), Q8T_ACT);
  }

  /**
   * quantizeBlocks (wasm/q8.ts) by the Wasm q8_act, on the calling thread: the same bytes, a
   * tenth of the time. x is read in place when it lies in this memory, else copied in first.
   */
  private quantizeActs(x: Float32Array, T: number, cols: number, bytes: number, o: { order: number; scaleBits: number; offset: number }): number {
    const n = T * cols;
    if (x.length < n) throw new RangeError(`activations: ${x.length} values, need ${n}`);
    if (cols % 32) throw new RangeError(`q8: columns ${cols} not a multiple of 32`);
    const src = this.contains(x) ? x.byteOffset : this.copyIn(x.subarray(0, n));
    const r = this.alloc(bytes, 64);
    this.ex.q8_act!(src, r.offset, T, cols, o.order, o.scaleBits, o.offset);
    return r.offset;
  }

  /** How a product of R with T tokens wants its activations (wasm/kernels.ts): token tiles from
   *  TILE_MIN_T[fmt] tokens on, else rows; permuted or not; or 8-bit blocks (q8 experts, q7 trunk). */
  private layoutOf(R: Resolved, T: number): Layout {
    const tiled = T >= TILE_MIN_T[R.fmt];
    const perm = tiled ? TILE_PERM[R.fmt] : MM_PERM[R.fmt];
    const q8 = this.fastMxfp4 && R.fmt === 'mxfp4';
    const q7 = R.sdt === Q7_SDT;
    return { layout: q8 ? 4 : q7 ? 5 : perm === 'mx' ? 6 : (tiled ? 2 : 0) + (perm === 'bf' ? 1 : 0), tiled, perm, q8, q7 };
  }

  /** The sdt word of R's matmul op: Q8_SDT sends mxfp4 to the 8-bit kernel (fastMxfp4). */
  private opSdt(R: Resolved): number {
    return this.fastMxfp4 && R.fmt === 'mxfp4' ? Q8_SDT : R.sdt;
  }

  /** x [T, R.cols] prepared for R's kernel on the calling thread, once per (array, layout): its offset. */
  private stageX(preps: Prep[], xa: Float32Array, T: number, R: Resolved): number {
    const L = this.layoutOf(R, T);
    for (const p of preps) if (p.x === xa && p.layout === L.layout && p.cols === R.cols && p.T === T) return p.off;
    const x = L.q8 ? this.prepQ8(xa, T, R.cols) : L.q7 ? this.prepQ8T(xa, T, R.cols) : this.prepX(xa, T, R.cols, L.perm, L.tiled);
    preps.push({ x: xa, layout: L.layout, cols: R.cols, T, off: x });
    return x;
  }

  /**
   * The same preparation of x [T, R.cols] at `src` (in this memory) for a chained dispatch: where
   * the prepared x will be, and the writer of its OP_PREP (null: plain rows, which the kernel
   * reads at src itself).
   */
  private stagePrepOp(src: number, T: number, R: Resolved): [number, ((slot: number) => void) | null] {
    const L = this.layoutOf(R, T), cols = R.cols, n = T * cols, ctrl = this.ctrl;
    if (!L.q8 && !L.q7 && !L.tiled && L.perm === 'id') return [src, null];
    let dst: number, args: number[];
    if (L.q8 || L.q7) {
      if (cols % 32) throw new RangeError(`q8: columns ${cols} not a multiple of 32`);
      const o = L.q8 ? Q8_ACT : Q8T_ACT;
      dst = this.alloc(L.q8 ? q8Bytes(T, cols) : q8tBytes(T, cols), 64).offset;
      args = [2, src, dst, T, cols, o.order, o.scaleBits, o.offset];
    } else {
      dst = this.alloc(n * 4).offset;
      args = L.tiled ? [1, src, dst, T, cols, L.perm === 'bf' ? 1 : 0, 0, 0] : [L.perm === 'mx' ? 3 : 0, src, dst, T, cols, 0, 0, 0];
    }
    return [dst, (slot) => writeFusedOp(ctrl, slot, OP_PREP, args, 0, 1)];
  }

  private threadsFor(macs: number): number {
    return Math.max(1, Math.min(this.pool.size, Math.floor(macs / this.minWork)));
  }

  // ---- kernels ------------------------------------------------------------------------------

  /**
   * y[t*rows + r] = dot(W[r, :], x[t*cols ..]) for t < T and r in [r0, r1), as ref.ts matmul.
   * x is [T, cols], y is [T, rows]; other entries of y are left alone.
   */
  matmul(w: WeightView, x: Float32Array, T: number, y: Float32Array, r0 = 0, r1 = w.rows): void {
    this.matmulBatch([{ w, x, T, y, r0, r1 }]);
  }

  /** Several independent products in one dispatch (no op may read another's output). */
  matmulBatch(ops: readonly MatmulOp[]): void {
    const p = this.prof;
    if (p) this.timedCall(() => this.matmulBatchUntimed(ops, p));
    else this.matmulBatchUntimed(ops, null);
  }

  private matmulBatchUntimed(ops: readonly MatmulOp[], p: KernelProfile | null): void {
    if (ops.length > this.maxOps) {
      for (let i = 0; i < ops.length; i += this.maxOps) this.matmulBatchUntimed(ops.slice(i, i + this.maxOps), p);
      return;
    }
    const m = this.mark();
    try {
      // activations prepared once per (array, layout, cols, T): a short list, searched linearly
      // (a dispatch has a few ops; a Map of strings per call cost more than the search)
      const preps: Prep[] = [];
      const copies: OutCopy[] = [];
      let macs = 0;
      let experts = false;
      for (let i = 0; i < ops.length; i++) {
        const op = ops[i]!;
        const R = this.resolve(op.w);
        const T = op.T, r0 = op.r0 ?? 0, r1 = op.r1 ?? R.rows;
        if (!(Number.isInteger(T) && T >= 0)) throw new RangeError(`bad T ${T}`);
        if (!(0 <= r0 && r0 <= r1 && r1 <= R.rows)) throw new RangeError(`bad row range [${r0}, ${r1}) of ${R.rows}`);
        if (op.y.length < T * R.rows) throw new RangeError(`output: ${op.y.length} values, need ${T * R.rows}`);
        if (EXPERT_FMTS.has(R.fmt)) experts = true;
        const x = this.stageX(preps, op.x, T, R);
        let y: number;
        if (this.contains(op.y)) y = op.y.byteOffset;
        else {
          y = this.allocOffset(T * R.rows * 4);
          copies.push({ y: op.y, off: y, T, rows: R.rows, r0, r1 });
        }
        writeMatmulOp(this.ctrl, i, FMT_CODE[R.fmt], R.w, R.s, this.opSdt(R), R.rows, R.cols, x, T, y, r0, r1);
        macs += (r1 - r0) * R.cols * T;
      }
      if (p) this.runPool(ops.length, this.threadsFor(macs), experts ? 'experts' : 'matmul');
      else this.pool.run(ops.length, this.threadsFor(macs));
      const buf = this.mem;
      for (const c of copies) {
        if (c.r0 === 0 && c.r1 === c.rows) c.y.set(new Float32Array(buf, c.off, c.T * c.rows));
        else for (let t = 0; t < c.T; t++) c.y.set(new Float32Array(buf, c.off + 4 * (t * c.rows + c.r0), c.r1 - c.r0), t * c.rows + c.r0);
      }
    } finally {
      this.release(m);
    }
  }

  /**
   * y[c] = sum_{k<n} x[xo+k] * W[r0+k, c], k ascending, each step f32(y + f32(x*w)); y is [cols].
   * As ref.ts matvecT. Runs on the calling thread.
   */
  matvecT(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
    if (!this.prof) return this.matvecTUntimed(w, r0, n, x, xo, y);
    this.timedSolo('matmul', () => this.matvecTUntimed(w, r0, n, x, xo, y));
  }

  /**
   * matvecT for heads h < H in one dispatch, heads split across the pool: head h is
   * matvecT(w, r0 + h*rStride, n, x, xo + h*xStride, y[h*cols ..]), y being [H, cols]. Same bytes
   * as H calls of matvecT.
   */
  matvecTHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xo: number, xStride: number, y: Float32Array, H: number): void {
    this.timedCall(() => this.matvecTHeadsImpl(w, r0, rStride, n, x, xo, xStride, y, H));
  }

  private matvecTHeadsImpl(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xo: number, xStride: number, y: Float32Array, H: number): void {
    if (H <= 0) return;
    noTransposed(w);
    const m = this.mark();
    try {
      const R = this.resolve(w);
      if (!(0 <= r0 && n >= 0 && rStride >= 0 && r0 + (H - 1) * rStride + n <= R.rows)) throw new RangeError(`matvecTHeads: bad rows of ${R.rows}`);
      const xn = (H - 1) * xStride + n;
      if (xo < 0 || xStride < 0 || xo + xn > x.length) throw new RangeError('matvecTHeads: x too short');
      if (y.length < H * R.cols) throw new RangeError('matvecTHeads: y too short');
      const xs = x.subarray(xo, xo + xn);
      const xoff = this.contains(xs) ? xs.byteOffset : this.copyIn(xs);
      const inMem = this.contains(y);
      const yoff = inMem ? y.byteOffset : this.alloc(H * R.cols * 4).offset;
      const args = [FMT_CODE[R.fmt], R.w, R.s, R.sdt, R.rows, R.cols, r0, rStride, n, xoff, xStride * 4, yoff, R.cols * 4];
      writeFusedOp(this.ctrl, 0, OP_MVT, args, 0, H);
      const nth = Math.min(H, this.threadsFor(H * n * R.cols));
      if (this.prof) this.runPool(1, nth, 'matmul');
      else this.pool.run(1, nth);
      if (!inMem) y.set(new Float32Array(this.mem, yoff, H * R.cols));
    } finally {
      this.release(m);
    }
  }

  private matvecTUntimed(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
    noTransposed(w);
    const m = this.mark();
    try {
      const R = this.resolve(w);
      if (!(0 <= r0 && n >= 0 && r0 + n <= R.rows)) throw new RangeError(`bad rows [${r0}, ${r0 + n}) of ${R.rows}`);
      if (xo < 0 || xo + n > x.length) throw new RangeError('matvecT: x too short');
      if (y.length < R.cols) throw new RangeError('matvecT: y too short');
      const xs = x.subarray(xo, xo + n);
      const xoff = this.contains(xs) ? xs.byteOffset : this.copyIn(xs);
      const inMem = this.contains(y);
      const yoff = inMem ? y.byteOffset : this.alloc(R.cols * 4).offset;
      this.ex[`mvT_${R.fmt}`]!(R.w, R.s, R.sdt, R.rows, R.cols, r0, n, xoff, yoff, this.scratch[0]!);
      if (!inMem) y.set(new Float32Array(this.mem, yoff, R.cols));
    } finally {
      this.release(m);
    }
  }

  // ---- fused pieces (wasm/fused.ts): KDA delta rule, MLA scores and weighted sum --------------
  // Arrays that live in this memory are used in place; others are copied in (and out) for the
  // call. Heads are split across threads (each head is independent: same bytes for any count).

  /** Offset of a[0 .. n) for a kernel call: in place, or a copy in the arena (until release). */
  private f32In(a: Float32Array, n: number, what: string): number {
    if (a.length < n) throw new RangeError(`${what}: ${a.length} values, need ${n}`);
    const s = a.length === n ? a : a.subarray(0, n);
    return this.contains(s) ? s.byteOffset : this.copyIn(s);
  }

  /** Run one fused op over heads [0, H): on the calling thread, or split across the pool. */
  private runFused(kind: number, fn: string, args: number[], H: number, macs: number): void {
    const nth = Math.min(H, this.threadsFor(macs));
    writeFusedOp(this.ctrl, 0, kind, args, 0, H);
    if (this.prof) this.runPool(1, nth, 'fused');
    else if (nth <= 1) this.ex[fn]!(...args, 0, H);
    else this.pool.run(1, nth);
  }

  /**
   * One KDA delta-rule step for heads [0, H) of a token, in place on S [H, d, d]; o [H*d] is
   * written. As kdaRecurStep (src/model/kda.ts) on each head, with beta[h] the head's β.
   */
  kdaStep(S: Float32Array, q: Float32Array, k: Float32Array, v: Float32Array, alpha: Float32Array, beta: Float32Array, o: Float32Array, H: number, d: number): void {
    this.timedCall(() => this.kdaStepImpl(S, q, k, v, alpha, beta, o, H, d));
  }

  private kdaStepImpl(S: Float32Array, q: Float32Array, k: Float32Array, v: Float32Array, alpha: Float32Array, beta: Float32Array, o: Float32Array, H: number, d: number): void {
    const P = H * d;
    const m = this.mark();
    try {
      const sIn = this.contains(S);
      const so = this.f32In(S, P * d, 'kda S');
      const args = [so, this.f32In(q, P, 'kda q'), this.f32In(k, P, 'kda k'), this.f32In(v, P, 'kda v'), this.f32In(alpha, P, 'kda alpha'), this.f32In(beta, H, 'kda beta')];
      if (o.length < P) throw new RangeError(`kda o: ${o.length} values, need ${P}`);
      const oIn = this.contains(o);
      const oo = oIn ? o.byteOffset : this.alloc(P * 4).offset;
      this.runFused(OP_KDA, 'kda_step', [...args, oo, d], H, 2 * P * d);
      const buf = this.mem;
      if (!oIn) o.set(new Float32Array(buf, oo, P));
      if (!sIn) S.set(new Float32Array(buf, so, P * d));
    } finally {
      this.release(m);
    }
  }

  /**
   * The KDA block of T tokens after the projections (wasm/kda-block.ts): short conv, L2, decay
   * (mode 'bounded'; 'given': `zOrAlpha` is α [T, P]), β, delta rule and gated norm, heads split
   * across the pool. S, conv and work must lie in this memory (the sequence state); the other
   * arrays are used in place or copied in; y [T, P] is written. As kdaRecurrence in src/model/kda.ts.
   */
  kdaBlock(a: KdaBlockArgs): void {
    this.timedCall(() => this.kdaBlockImpl(a));
  }

  private kdaBlockImpl(a: KdaBlockArgs): void {
    const m = this.mark();
    try {
      const P = a.H * a.d;
      const yIn = this.contains(a.y);
      const y = yIn ? a.y : this.allocF32(a.T * P);
      const { pb, macs } = this.kdaParams({ ...a, y });
      this.runFused(OP_KDA_BLOCK, 'kda_block', [pb], a.H, macs);
      if (!yIn) a.y.set(y);
    } finally {
      this.release(m);
    }
  }

  /** The KDA block's parameter block in the arena (inputs outside kernel memory copied in; y in it): its offset, and the work it is. */
  private kdaParams(a: KdaBlockArgs): { pb: number; macs: number } {
    const { H, d, W, T } = a;
    const P = H * d;
    if (!this.contains(a.S) || !this.contains(a.conv) || !this.contains(a.work)) throw new RangeError('kdaBlock: the state must lie in kernel memory');
    if (a.S.length < P * d || a.conv.length < 3 * (W - 1) * P || a.work.length < 5 * P + H) throw new RangeError('kdaBlock: state too small');
    if (a.A.length < H) throw new RangeError('kdaBlock: A too short');
    if (a.y.length < T * P) throw new RangeError(`kda y: ${a.y.length} values, need ${T * P}`);
    const pb = this.alloc(KDA_BLOCK_BYTES + 8 * H, 16).offset;
    const w: Record<(typeof KDA_BLOCK_WORDS)[number], number> = {
      S: a.S.byteOffset, conv: a.conv.byteOffset, work: a.work.byteOffset,
      qr: this.f32In(a.qr, T * P, 'kda qr'), kr: this.f32In(a.kr, T * P, 'kda kr'), vr: this.f32In(a.vr, T * P, 'kda vr'),
      z: this.f32In(a.zOrAlpha, T * P, 'kda z'), b: this.f32In(a.b, T * H, 'kda b'), gamma: this.f32In(a.gamma, T * P, 'kda gamma'),
      y: a.y.byteOffset,
      qConv: this.f32In(a.qConv, P * W, 'kda qConv'), kConv: this.f32In(a.kConv, P * W, 'kda kConv'), vConv: this.f32In(a.vConv, P * W, 'kda vConv'),
      dtBias: this.f32In(a.dtBias, P, 'kda dtBias'), A: pb + KDA_BLOCK_BYTES, oNorm: this.f32In(a.oNorm, d, 'kda oNorm'),
      d, H, W, T, mode: a.mode === 'bounded' ? 1 : 0,
    };
    const buf = this.mem;
    const words = new Int32Array(buf, pb, KDA_BLOCK_WORDS.length);
    KDA_BLOCK_WORDS.forEach((k, i) => (words[i] = w[k]));
    const f = new Float64Array(buf, pb, KDA_BLOCK_BYTES / 8 + H);
    f[KDA_BLOCK_F64.eps / 8] = a.eps;
    f[KDA_BLOCK_F64.lambda / 8] = a.lambda;
    f[KDA_BLOCK_F64.qScale / 8] = a.qScale;
    f.set(a.A.subarray(0, H), KDA_BLOCK_BYTES / 8);
    // work per head and token: the delta rule's 2·d² plus the element-wise pieces (~8 exps per channel)
    return { pb, macs: T * (2 * P * d + 64 * P) };
  }

  /**
   * MLA scores of H heads against n cached positions: out[h*n + s] =
   * f32(f32(dot(qLat[h*Lk ..], lat[s*Lk ..]) + dot(q[qo + h*qStride ..], rope[s*dr ..])) * scale),
   * dot the canonical 16-lane dot (as mlaScoresRef in src/model/mla.ts).
   */
  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): void {
    this.timedCall(() => this.mlaScoresImpl(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out));
  }

  private mlaScoresImpl(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): void {
    const m = this.mark();
    try {
      if (H > 0 && (qo < 0 || qo + (H - 1) * qStride + dr > q.length)) throw new RangeError('mla scores: q too short');
      const ql = this.f32In(qLat, H * Lk, 'mla qLat');
      const qr = H > 0 ? this.f32In(q.subarray(qo), (H - 1) * qStride + dr, 'mla q') : 0;
      const lo = this.f32In(lat, n * Lk, 'mla lat'), ro = this.f32In(rope, n * dr, 'mla rope');
      const sp = this.alloc(8, 8).offset;
      new Float64Array(this.mem, sp, 1)[0] = scale;
      if (out.length < H * n) throw new RangeError(`mla scores: out has ${out.length} values, need ${H * n}`);
      const oIn = this.contains(out);
      const oo = oIn ? out.byteOffset : this.alloc(H * n * 4).offset;
      this.runFused(OP_MLA_SCORES, 'mla_scores', [ql, qr, qStride * 4, lo, ro, n, Lk, dr, sp, oo], H, H * n * (Lk + dr));
      if (!oIn) out.set(new Float32Array(this.mem, oo, H * n));
    } finally {
      this.release(m);
    }
  }

  /** out[h*Lk + i] = Σ_s f32(P[h*n + s] · lat[s*Lk + i]), s ascending (as mlaWeightedSumRef). */
  mlaWeightedSum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): void {
    this.timedCall(() => this.mlaWeightedSumImpl(P, lat, n, Lk, H, out));
  }

  private mlaWeightedSumImpl(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): void {
    const m = this.mark();
    try {
      const po = this.f32In(P, H * n, 'mla P'), lo = this.f32In(lat, n * Lk, 'mla lat');
      if (out.length < H * Lk) throw new RangeError(`mla sum: out has ${out.length} values, need ${H * Lk}`);
      const oIn = this.contains(out);
      const oo = oIn ? out.byteOffset : this.alloc(H * Lk * 4).offset;
      this.runFused(OP_MLA_WSUM, 'mla_wsum', [po, lo, n, Lk, oo], H, H * n * Lk);
      if (!oIn) out.set(new Float32Array(this.mem, oo, H * Lk));
    } finally {
      this.release(m);
    }
  }

  // ---- Attention Residuals (wasm/fused.ts) ----------------------------------------------------

  /**
   * The depth mix of src/model/attnres.ts attnResMix, same bytes: candidates `cands` (each [T, D]),
   * scores and the weighted sum in WebAssembly (tokens split across threads), the softmax over the
   * m scores of a token in between (depthSoftmax, the reference's own).
   */
  attnResMix(cands: readonly Float32Array[], T: number, D: number, fold: Float32Array, eps: number): Float32Array {
    return this.timedCall(() => this.attnResMixImpl(cands, T, D, fold, eps));
  }

  private attnResMixImpl(cands: readonly Float32Array[], T: number, D: number, fold: Float32Array, eps: number): Float32Array {
    const m = cands.length;
    const mk = this.mark();
    try {
      const offs = this.allocOffset(4 * m, 4);
      const co = cands.map((c, i) => this.f32In(c, T * D, `attnres candidate ${i}`));
      new Int32Array(this.mem, offs, m).set(co);
      const fo = this.f32In(fold, D, 'attnres fold');
      const eo = this.allocOffset(8, 8);
      new Float64Array(this.mem, eo, 1)[0] = eps;
      const so = this.allocOffset(8 * T * m, 8);
      this.runFused(OP_ATTNRES_SCORES, 'attnres_scores', [offs, m, D, fo, eo, so], T, 2 * T * m * D);
      const s = new Float64Array(this.mem, so, T * m);
      for (let t = 0; t < T; t++) depthSoftmax(s.subarray(t * m, (t + 1) * m));
      const oo = this.allocOffset(4 * T * D);
      this.runFused(OP_ATTNRES_SUM, 'attnres_sum', [offs, m, D, so, oo], T, T * m * D);
      return new Float32Array(this.mem, oo, T * D).slice();
    } finally {
      this.release(mk);
    }
  }

  // ---- gated activations (wasm/act.ts) -------------------------------------------------------

  /**
   * out[i] = f32(act(gate[i], up[i])) for i < gate.length, as gatedActRef (wasm/act.ts): SiLU
   * gate, or SiTU with β = b and βl = bl (null: no cap on up). One call of gatedActBatch.
   */
  gatedAct(gate: Float32Array, up: Float32Array, out: Float32Array, kind: ActKind, b: number, bl: number | null): void {
    this.gatedActBatch([{ gate, up, out }], kind, b, bl);
  }

  /**
   * gatedAct of several arrays (e.g. every routed expert of a MoE batch) in one dispatch: they are
   * copied into the arena back to back (each padded to 4 elements) and the elements split across
   * the pool in groups of 4. Element-wise, so the same bytes as one call each on one thread.
   */
  gatedActBatch(items: readonly { gate: Float32Array; up: Float32Array; out: Float32Array }[], kind: ActKind, b: number, bl: number | null): void {
    this.timedCall(() => this.gatedActBatchImpl(items, kind, b, bl));
  }

  private gatedActBatchImpl(items: readonly { gate: Float32Array; up: Float32Array; out: Float32Array }[], kind: ActKind, b: number, bl: number | null): void {
    let n4 = 0;
    for (const { gate, up, out } of items) {
      const n = gate.length;
      if (up.length < n || out.length < n) throw new RangeError(`gatedAct: ${n} gate values, up ${up.length}, out ${out.length}`);
      n4 += (n + 3) & ~3;
    }
    if (n4 === 0) return;
    const m = this.mark();
    try {
      const r = this.alloc(16 + 12 * n4, 16);
      const buf = this.mem;
      const pars = new Float64Array(buf, r.offset, 2);
      pars[0] = b;
      pars[1] = bl ?? 1;
      const go = r.offset + 16, uo = go + 4 * n4, oo = uo + 4 * n4;
      const g = new Float32Array(buf, go, 2 * n4).fill(0);
      let at = 0;
      for (const { gate, up } of items) {
        const n = gate.length;
        g.set(gate, at);
        g.set(up.length === n ? up : up.subarray(0, n), n4 + at);
        at += (n + 3) & ~3;
      }
      const fn = kind === 'silu' ? 0 : bl === null ? 1 : 2;
      writeFusedOp(this.ctrl, 0, OP_ACT, [fn, go, uo, oo, r.offset], 0, n4 / 4);
      // about 100 flops an element (two tanh and a sigmoid for SiTU)
      const nth = Math.min(n4 / 4, this.threadsFor(n4 * 32));
      if (this.prof) this.runPool(1, nth, 'fused');
      else if (nth <= 1) this.ex[ACT_OPS[fn]!]!(go, uo, oo, n4, r.offset);
      else this.pool.run(1, nth);
      const res = new Float32Array(buf, oo, n4);
      at = 0;
      for (const { gate, out } of items) {
        const n = gate.length;
        out.set(res.subarray(at, at + n));
        at += (n + 3) & ~3;
      }
    } finally {
      this.release(m);
    }
  }

  /**
   * A chained dispatch on this instance (chain.ts): steps of products and fused ops run in one
   * publish, a barrier between steps; run() it, read its outputs, then done().
   */
  chain(): Chain {
    return new Chain(this.port);
  }

  private portMade: ChainPort | null = null;

  private get port(): ChainPort {
    return (this.portMade ??= {
      ctrl: this.ctrl,
      maxOps: this.maxOps,
      mem: () => this.mem,
      mark: () => this.mark(),
      release: (m) => this.release(m),
      allocOffset: (bytes, alignment) => this.allocOffset(bytes, alignment),
      contains: (a) => this.contains(a),
      mat: (w, T) => {
        const R = this.resolve(w);
        return { fmtCode: FMT_CODE[R.fmt], w: R.w, s: R.s, sdt: this.opSdt(R), rows: R.rows, cols: R.cols, layout: this.layoutOf(R, T).layout, experts: EXPERT_FMTS.has(R.fmt) };
      },
      stageNow: (seen, x, T, w) => this.stageX(seen as Prep[], x, T, this.resolve(w)),
      stageOp: (src, T, w) => this.stagePrepOp(src, T, this.resolve(w)),
      kdaParams: (a) => this.kdaParams(a),
      threadsFor: (macs) => this.threadsFor(macs),
      run: (nops, nth, bucket, steps) => {
        if (this.prof) this.runPool(nops, nth, bucket); // (timed whole: no launch)
        else this.pool.run(nops, nth, steps);
      },
      join: () => this.pool.join(),
      timed: (fn) => this.timedCall(fn),
    });
  }

  /**
   * Gated MLPs y = down · act(gate · x, up · x) in one chained dispatch: the gate and up
   * products, the activations, the down products, each a step of the chain; the same bytes as
   * matmulBatch, gatedActBatch and matmulBatch one after another.
   */
  gatedMlpBatch(items: readonly GatedMlpOp[], kind: ActKind, b: number, bl: number | null): void {
    const ch = this.chain();
    try {
      ch.gatedMlps(items, kind, b, bl);
      ch.run();
    } finally {
      ch.done();
    }
  }

  /** Stop the workers. The memory stays usable for reading. */
  async close(): Promise<void> {
    await this.pool.close();
  }
}

/** Create a kernel instance: its own shared memory, module instance and worker pool. */
export function createKernels(opts: KernelsOptions = {}): Promise<Kernels> {
  return Kernels.create(opts);
}

// The bf16 block code of `k3 pack --compress`: encoder, reference and WebAssembly decoders.
export { bf16Decoder } from './wasm/bf16-decode.js';
export { CODE_NAME, REF_DECODER, blockRowsFor, decodeRunInPlace, encodeBlock, runRawBytes, runStoredBytes, type BlockDecoder, type CodedRun } from './bf16-code.js';

// The `--fast` trunk requantization (bf16 rows to 7-bit blocks, in place; wasm/q8-trunk.ts).
export { requantizeQ7InPlace, q7Bytes, q7View } from './wasm/q8-trunk.js';
