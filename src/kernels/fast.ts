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
// Fused ops (ops/, listed in docs/KERNELS.md): each eager call here is a one-step chain (chain.ts)
// of its op. The model keeps its sequence state in this memory (KernelGroup.allocF32), so the
// fused ops run on it in place.

import * as os from 'node:os';
import type { WeightView } from '../formats/weight.js';
import { kernelModule, instantiate, initConstants, relaxedSimdAvailable, type KernelExports } from './wasm/loader.js';
import { CONST_END } from './wasm/kernels.js';
import { align, threadScratchBytes, type GatedMlpOp, type KernelsOptions, type MatmulOp, type OutCopy } from './options.js';
import { EXPERT_FMTS, FMT_CODE, layoutOf, noTransposed, opSdt, prepOpArgs, resolveView, stageX, type Arena, type Layout, type Prep, type Resolved } from './layout.js';
import type { ActKind } from './wasm/act.js';
import { Pool, writeMatmulOp, writeOp, maxOps } from './pool.js';
import { ACT } from './ops/act.js';
import { ATTNRES_SCORES } from './ops/attnres-scores.js';
import { ATTNRES_SUM } from './ops/attnres-sum.js';
import { PREP } from './ops/prep.js';
import type { KdaBlockArgs } from './wasm/kda-block.js';
import { Chain, type ChainPort } from './chain.js';
import { KernelMemory } from './memory.js';
import { depthSoftmax } from './ref.js';
import { timedCall, timedRun, type KernelProfile, type ProfileBucket } from './profile.js';

export type { KdaBlockArgs } from './wasm/kda-block.js';
export { threadScratchBytes, type GatedMlpOp, type KernelsOptions, type MatmulOp, type Region } from './options.js';
export { PER_MEMORY, kernelMembers } from './memory.js';

const PAGE = 65536;
// Node 20 allows 4 GiB (65536 pages) per memory; one page less keeps every end pointer the
// kernels compute (base + length) below 2^32, where i32 arithmetic would wrap.
const MAX_PAGES = 65535;

export class Kernels extends KernelMemory {
  private readonly ctrl: Int32Array;
  private readonly maxOps: number;
  /** This instance's exports and arena, as the layouts (layout.ts) use them. */
  private readonly arena: Arena;
  /**
   * Optional fast path, off by default: mxfp4 products take 8-bit activations and integer block
   * dots (wasm/q8.ts; same bytes as matmulQ8Ref there, not those of the exact path).
   */
  fastMxfp4 = false;
  private prof: KernelProfile | null = null;

  private constructor(
    memory: WebAssembly.Memory,
    private readonly ex: KernelExports,
    private readonly pool: Pool,
    readonly relaxed: boolean,
    readonly maxCols: number,
    arenaStart: number,
    private readonly minWork: number,
    /** The `memoryBytes` asked for at creation (what the creator planned to place here). */
    readonly plannedBytes: number,
    /** The memory's maximum size in bytes. */
    readonly maxBytes: number,
  ) {
    super(memory, arenaStart);
    this.ctrl = pool.ctrl;
    this.maxOps = maxOps();
    this.arena = { ex, contains: (a) => this.contains(a), copyIn: (a) => this.copyIn(a), allocOffset: (b, al) => this.allocOffset(b, al) };
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
    return new Kernels(memory, ex, pool, relaxed, maxCols, arenaStart, opts.minWorkPerThread ?? 1 << 17, opts.memoryBytes ?? 64 << 20, maxPages * PAGE);
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

  /** pool.run, timed into `bucket` when a profile is attached. */
  private runPool(nops: number, nth: number, bucket: ProfileBucket): void {
    if (this.prof) timedRun(this.prof, this.pool, nops, nth, bucket);
    else this.pool.run(nops, nth);
  }

  /** Views found in place in this memory, resolved once (the store lends the same view objects
   *  for resident matrices and experts, call after call). Never modified after. */
  private readonly inPlace = new WeakMap<WeightView, Resolved>();

  private resolve(w: WeightView): Resolved {
    const held = this.inPlace.get(w);
    if (held) return held;
    const r = resolveView(this.arena, w, this.maxCols);
    if (this.contains(w.data) && (!w.scale || this.contains(w.scale))) this.inPlace.set(w, r);
    return r;
  }

  /** How a product of R with T tokens reads its activations (layout.ts layoutOf). */
  private layoutOf(R: Resolved, T: number): Layout {
    return layoutOf(R, T, this.fastMxfp4);
  }

  /** The sdt word of R's matmul op: Q8_SDT sends mxfp4 to the 8-bit kernel (fastMxfp4). */
  private opSdt(R: Resolved): number {
    return opSdt(R, this.fastMxfp4);
  }

  /** x [T, R.cols] prepared for R's kernel on the calling thread, once per (array, layout): its offset. */
  private stageX(preps: Prep[], xa: Float32Array, T: number, R: Resolved): number {
    return stageX(this.arena, preps, xa, T, R, this.layoutOf(R, T));
  }

  /**
   * The same preparation of x [T, R.cols] at `src` (in this memory) for a chained dispatch: where
   * the prepared x will be, and the writer of its prep op (null: plain rows, which the kernel
   * reads at src itself).
   */
  private stagePrepOp(src: number, T: number, R: Resolved): [number, ((slot: number) => void) | null] {
    const [dst, args] = prepOpArgs(this.arena, src, T, R, this.layoutOf(R, T)), ctrl = this.ctrl;
    return [dst, args && ((slot) => writeOp(ctrl, slot, PREP, args, 0, 1))];
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
    if (p) timedCall(p, () => this.matmulBatchUntimed(ops, p));
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
   * As ref.ts matvecT: matvecTHeads of one head (on the calling thread).
   */
  matvecT(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
    this.matvecTHeads(w, r0, 0, n, x, xo, 0, y, 1);
  }

  /**
   * matvecT for heads h < H in one dispatch, heads split across the pool: head h is
   * matvecT(w, r0 + h*rStride, n, x, xo + h*xStride, y[h*cols ..]), y being [H, cols]. Same bytes
   * as H calls of matvecT.
   */
  matvecTHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xo: number, xStride: number, y: Float32Array, H: number): void {
    if (H <= 0) return;
    noTransposed(w);
    const xn = (H - 1) * xStride + n;
    if (xo < 0 || xStride < 0 || xo + xn > x.length) throw new RangeError('matvecTHeads: x too short');
    if (y.length < H * w.cols) throw new RangeError('matvecTHeads: y too short');
    this.once((ch) => ch.mvtHeads(w, r0, rStride, n, x.subarray(xo, xo + xn), xStride, H, y.subarray(0, H * w.cols)));
  }

  // ---- fused ops (ops/): one-step chains. Arrays in this memory are used in place; others are
  // copied in (and out) for the call (chain.ts OpArg). Heads or tokens split across threads.

  /** Offset of a[0 .. n) for a kernel call: in place, or a copy in the arena (until release). */
  private f32In(a: Float32Array, n: number, what: string): number {
    if (a.length < n) throw new RangeError(`${what}: ${a.length} values, need ${n}`);
    const s = a.length === n ? a : a.subarray(0, n);
    return this.contains(s) ? s.byteOffset : this.copyIn(s);
  }

  /** The ops `fill` adds to a new chain, run as one dispatch: an eager call is a one-step chain. */
  private once(fill: (ch: Chain) => void): void {
    const ch = new Chain(this.port); // (not chain(): what a caller counts as its chains)
    try {
      fill(ch);
      ch.run();
    } finally {
      ch.done();
    }
  }

  /**
   * One KDA delta-rule step for heads [0, H) of a token, in place on S [H, d, d]; o [H*d] is
   * written. As kdaRecurStep (src/graph/reference.ts) on each head, with beta[h] the head's β.
   */
  kdaStep(S: Float32Array, q: Float32Array, k: Float32Array, v: Float32Array, alpha: Float32Array, beta: Float32Array, o: Float32Array, H: number, d: number): void {
    this.once((ch) => ch.kdaStep(S, q, k, v, alpha, beta, o, H, d));
  }

  /**
   * The KDA block of T tokens after the projections (ops/kda-block.ts): short conv, L2, decay
   * (mode 'bounded'; 'given': `zOrAlpha` is α [T, P]), β, delta rule and gated norm, heads split
   * across the pool. S, conv and work must lie in this memory (the sequence state); the other
   * arrays are used in place or copied in; y [T, P] is written. As kdaBlockRef in src/graph/reference.ts.
   */
  kdaBlock(a: KdaBlockArgs): void {
    const m = this.mark();
    try {
      const yIn = this.contains(a.y);
      const y = yIn ? a.y : this.allocF32(a.T * a.H * a.d);
      this.once((ch) => ch.kdaBlock({ ...a, y }));
      if (!yIn) a.y.set(y);
    } finally {
      this.release(m);
    }
  }

  /**
   * MLA scores of H heads against n cached positions: out[h*n + s] =
   * f32(f32(dot(qLat[h*Lk ..], lat[s*Lk ..]) + dot(q[qo + h*qStride ..], rope[s*dr ..])) * scale),
   * dot the canonical 16-lane dot (as mlaScoresRef in src/graph/reference.ts).
   */
  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): void {
    this.once((ch) => ch.mlaScores(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out));
  }

  /** out[h*Lk + i] = Σ_s f32(P[h*n + s] · lat[s*Lk + i]), s ascending (as mlaWeightedSumRef). */
  mlaWeightedSum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): void {
    this.once((ch) => ch.mlaWsum(P, lat, n, Lk, H, out));
  }

  /**
   * The depth mix of src/model/attnres.ts attnResMix, same bytes: candidates `cands` (each [T, D]),
   * scores and the weighted sum in WebAssembly (tokens split across threads), the softmax over the
   * m scores of a token in between (depthSoftmax, the reference's own).
   */
  attnResMix(cands: readonly Float32Array[], T: number, D: number, fold: Float32Array, eps: number): Float32Array {
    const m = cands.length;
    const mk = this.mark();
    try {
      const offs = this.allocOffset(4 * m, 4);
      new Int32Array(this.mem, offs, m).set(cands.map((c, i) => this.f32In(c, T * D, `attnres candidate ${i}`)));
      const so = this.allocOffset(8 * T * m, 8), out = this.allocF32(T * D);
      this.once((ch) => ch.op(ATTNRES_SCORES, { cands: offs, m, D, fold: fold.subarray(0, D), epsPtr: ch.f64(eps), scores: so }, T, 2 * T * m * D));
      const s = new Float64Array(this.mem, so, T * m);
      for (let t = 0; t < T; t++) depthSoftmax(s.subarray(t * m, (t + 1) * m));
      this.once((ch) => ch.op(ATTNRES_SUM, { cands: offs, m, D, pi: so, out }, T, T * m * D));
      return out.slice();
    } finally {
      this.release(mk);
    }
  }

  // ---- gated activations (ops/act.ts) ----------------------------------------------------------

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
    let n4 = 0;
    for (const { gate, up, out } of items) {
      const n = gate.length;
      if (up.length < n || out.length < n) throw new RangeError(`gatedAct: ${n} gate values, up ${up.length}, out ${out.length}`);
      n4 += (n + 3) & ~3;
    }
    if (n4 === 0) return;
    const m = this.mark();
    try {
      // gate and up back to back, each item padded to 4 elements (the op's unit)
      const g = this.allocF32(2 * n4).fill(0), o = this.allocF32(n4), pb = this.allocOffset(16, 16);
      const pars = new Float64Array(this.mem, pb, 2);
      pars[0] = b;
      pars[1] = bl ?? 1;
      let at = 0;
      for (const { gate, up } of items) {
        const n = gate.length;
        g.set(gate, at);
        g.set(up.length === n ? up : up.subarray(0, n), n4 + at);
        at += (n + 3) & ~3;
      }
      const fn = kind === 'silu' ? 0 : bl === null ? 1 : 2;
      // about 100 flops an element (two tanh and a sigmoid for SiTU)
      this.once((ch) => ch.op(ACT, { fn, g: g.subarray(0, n4), u: g.subarray(n4), o, pb }, n4 / 4, n4 * 32));
      at = 0;
      for (const { gate, out } of items) {
        const n = gate.length;
        out.set(o.subarray(at, at + n));
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
      threadsFor: (macs) => this.threadsFor(macs),
      run: (nops, nth, bucket, steps) => {
        if (this.prof) this.runPool(nops, nth, bucket); // (timed whole: no launch)
        else this.pool.run(nops, nth, steps);
      },
      join: () => this.pool.join(),
      timed: (fn) => timedCall(this.prof, fn),
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

// docs/KERNELS.md's text, generated from the op registry (npm run kernels-doc).
export { kernelsDoc } from './ops/doc.js';

// The `--fast` trunk requantization (bf16 rows to 7-bit blocks, in place; wasm/q8-trunk.ts).
export { requantizeQ7InPlace, q7Bytes, q7View } from './wasm/q8-trunk.js';
