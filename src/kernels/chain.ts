// A chained dispatch (issue 13: one dispatch per block rather than per product): the products
// and fused steps of a block written as steps, each step reading what the steps before it wrote,
// run in one publish of the pool with a barrier (OP_BARRIER) between steps. The intermediates
// stay in the arena and no JavaScript runs between the steps, which after a weight stream is cold
// and slow (bench/glue.ts). Every op is the kernel that runs alone, on the same inputs in the
// same order, so a chain gives the bytes of the same calls made one dispatch each.
//
// Activations that lie in kernel memory are laid out for their product (permuted, in token tiles,
// 8-bit blocks) by an OP_PREP at the start of the step that reads them, after the steps that
// write them; activations outside kernel memory are copied and laid out when the op is added.

import type { WeightView } from '../formats/weight.js';
import type { ActKind } from './wasm/act.js';
import type { KdaBlockArgs } from './wasm/kda-block.js';
import { writeMatmulOp, writeOp } from './pool.js';
import type { ArgDecl, OpDef } from './ops/op.js';
import { ACT } from './ops/act.js';
import { ATTNRES_NORM } from './ops/attnres-norm.js';
import { BARRIER as BARRIER_OP } from './ops/barrier.js';
import { GATHER_ROWS } from './ops/gather-rows.js';
import { KDA_BLOCK, kdaParams } from './ops/kda-block.js';
import { KDA_STEP } from './ops/kda-step.js';
import { MLA_APPEND } from './ops/mla-append.js';
import { MLA_SCORES } from './ops/mla-scores.js';
import { MLA_SOFTMAX } from './ops/mla-softmax.js';
import { MLA_WSUM } from './ops/mla-wsum.js';
import { MOE_COMBINE } from './ops/moe-combine.js';
import { MVT } from './ops/mvt.js';
import { RMS_NORM } from './ops/rms-norm.js';
import { SIGMOID_GATE } from './ops/sigmoid-gate.js';
import type { ProfileBucket } from './profile.js';

/** A product's weight as the kernels address it (Kernels.resolve). */
export interface ChainMat {
  fmtCode: number;
  w: number;
  s: number;
  sdt: number;
  rows: number;
  cols: number;
  /** How the product reads its activations (Kernels.layoutOf): one array laid out once per layout. */
  layout: number;
  experts: boolean;
}

/** What a chain needs from its Kernels (their private state, lent as functions). */
export interface ChainPort {
  ctrl: Int32Array;
  maxOps: number;
  mem(): ArrayBufferLike;
  mark(): number;
  release(m: number): void;
  allocOffset(bytes: number, alignment?: number): number;
  contains(a: ArrayBufferView): boolean;
  mat(w: WeightView, T: number): ChainMat;
  /** x (outside kernel memory) copied in and laid out for w's product now, once per chain (`seen`, the port's own records): its offset. */
  stageNow(seen: unknown[], x: Float32Array, T: number, w: WeightView): number;
  /** The layout of x at `src` for w's product as an op in `slot` when one is needed: where it will be, and the op writer. */
  stageOp(src: number, T: number, w: WeightView): [number, ((slot: number) => void) | null];
  threadsFor(macs: number): number;
  /** Pool.run: every step, or (`steps`) a launch that returns after the first steps. */
  run(nops: number, nth: number, bucket: ProfileBucket, steps?: number): void;
  /** Pool.join: the rest of a launched dispatch. */
  join(): void;
  /** Time a whole call into the profile's dispatch bucket (as the other entry points do). */
  timed(fn: () => void): void;
}

/** One gated MLP of Chain.gatedMlps; y (optional) is where its output goes. */
export interface ChainMlp {
  gate: WeightView;
  up: WeightView;
  down: WeightView;
  x: Float32Array;
  T: number;
  y?: Float32Array;
}

type Writer = (slot: number) => void;
const BARRIER: Writer = () => {};

/** An op argument (Chain.op): an i32 word, or an array, passed as its byte offset: in place when
 *  it lies in kernel memory, else copied in when the op is added (and out after run() when the op
 *  writes it). So an array outside kernel memory must not be an output of an earlier step. */
export type OpArg = number | Float32Array | Float64Array | Int32Array | Uint32Array;

/** a[0, n) (the view an op reads), after checking a holds n values. */
function f32s(a: Float32Array, n: number, what: string): Float32Array {
  if (a.length < n) throw new RangeError(`${what}: ${a.length} values, need ${n}`);
  return a.length === n ? a : a.subarray(0, n);
}

export class Chain {
  private readonly mark: number;
  /** Per step: its layout ops, then its ops. */
  private readonly steps: { preps: Writer[]; ops: Writer[] }[] = [{ preps: [], ops: [] }];
  /** Layouts already staged in the current step: source offset, T, columns, layout, where the result is. */
  private stepPreps: { src: number; T: number; cols: number; layout: number; at: number }[] = [];
  /** Outputs outside kernel memory, copied out after run(). */
  private readonly copies: { y: ArrayBufferView; off: number; bytes: number; step: number }[] = [];
  /** Activations outside kernel memory laid out so far (the port's records). */
  private readonly staged: unknown[] = [];
  private macs = 0;
  /** The most units (rows, heads, tokens) of one op: more threads than that find nothing to claim. */
  private units = 0;
  private experts = false;
  private products = false;
  private ran = false;
  /** Launched and not joined yet. */
  private launched = false;
  /** The arena's top once the chain was run (-1 before). */
  private top = -1;

  constructor(private readonly k: ChainPort) {
    this.mark = k.mark();
  }

  /** Ops added after this may read what the ops before it write. */
  next(): this {
    if (this.cur.ops.length || this.cur.preps.length) this.steps.push({ preps: [], ops: [] });
    this.stepPreps = [];
    return this;
  }

  /** The steps next() has closed (a launch's `steps` counts these). */
  get closedSteps(): number {
    return this.steps.length - (this.cur.ops.length || this.cur.preps.length ? 0 : 1);
  }

  /** n floats in the arena, valid until done() (their contents are whatever the arena held). */
  alloc(n: number): Float32Array {
    const off = this.k.allocOffset(4 * n); // (first: it may grow the memory, and mem() then is the new buffer)
    return new Float32Array(this.k.mem(), off, n);
  }

  /** y[t, r] = W[r, :] · x[t, :] (Kernels.matmul) into y (kernel memory in place, other arrays after run()) or a new arena array. */
  matmul(w: WeightView, x: Float32Array, T: number, y?: Float32Array): Float32Array {
    const R = this.k.mat(w, T);
    if (x.length < T * R.cols) throw new RangeError(`activations: ${x.length} values, need ${T * R.cols}`);
    let xo: number;
    if (this.k.contains(x)) {
      const src = x.byteOffset;
      const seen = this.stepPreps.find((p) => p.src === src && p.T === T && p.cols === R.cols && p.layout === R.layout);
      if (seen) xo = seen.at;
      else {
        const [at, op] = this.k.stageOp(src, T, w);
        if (op) this.cur.preps.push(op);
        this.stepPreps.push({ src, T, cols: R.cols, layout: R.layout, at });
        xo = at;
      }
    } else xo = this.k.stageNow(this.staged, x, T, w);
    const n = T * R.rows;
    const out = y ?? this.alloc(n);
    if (out.length < n) throw new RangeError(`output: ${out.length} values, need ${n}`);
    let yo: number;
    if (this.k.contains(out)) yo = out.byteOffset;
    else {
      yo = this.k.allocOffset(4 * n);
      this.copies.push({ y: out, off: yo, bytes: 4 * n, step: this.steps.length });
    }
    const ctrl = this.k.ctrl;
    this.cur.ops.push((slot) => writeMatmulOp(ctrl, slot, R.fmtCode, R.w, R.s, R.sdt, R.rows, R.cols, xo, T, yo, 0, R.rows));
    this.macs += n * R.cols;
    this.units = Math.max(this.units, R.rows);
    this.experts ||= R.experts;
    this.products = true;
    return out;
  }

  /**
   * out = act(gate, up) element-wise (Kernels.gatedActBatch) over arena arrays of a length that
   * is a multiple of 4 (the kernel's unit): a new arena array.
   */
  act(gate: Float32Array, up: Float32Array, kind: ActKind, b: number, bl: number | null): Float32Array {
    const n4 = gate.length;
    if (n4 % 4 || up.length !== n4 || !this.k.contains(gate) || !this.k.contains(up)) throw new RangeError('chain act: gate and up must be arena arrays of one length, a multiple of 4');
    const pb = this.k.allocOffset(16, 16);
    const pars = new Float64Array(this.k.mem(), pb, 2);
    pars[0] = b;
    pars[1] = bl ?? 1;
    const out = this.alloc(n4);
    const fn = kind === 'silu' ? 0 : bl === null ? 1 : 2;
    this.op(ACT, { fn, g: gate, u: up, o: out, pb }, n4 / 4, n4 * 32); // (about 100 flops an element)
    return out;
  }

  /**
   * Gated MLPs y = down · act(gate · x, up · x) (Kernels.gatedMlpBatch) as three steps from the
   * current one: gate and up products, activations, down products. Returns each item's y (its
   * own, or a new arena array); the current step is then the down products'.
   */
  gatedMlps(items: readonly ChainMlp[], kind: ActKind, b: number, bl: number | null): Float32Array[] {
    // gate and up outputs back to back, each padded to 4 elements (the activation's unit)
    const at: number[] = [];
    let n4 = 0;
    for (const it of items) {
      if (it.up.rows !== it.gate.rows || it.up.cols !== it.gate.cols || it.down.cols !== it.gate.rows) throw new RangeError(`gated MLP: gate ${it.gate.rows}x${it.gate.cols}, up ${it.up.rows}x${it.up.cols}, down ${it.down.rows}x${it.down.cols}`);
      at.push(n4);
      n4 += (it.T * it.gate.rows + 3) & ~3;
    }
    // the products write every element but each item's padding, which the activation reads
    // (its outputs there are never read): zeroed
    const g = this.alloc(n4), u = this.alloc(n4);
    items.forEach((it, k) => {
      const n = it.T * it.gate.rows;
      g.fill(0, at[k]! + n, (at[k]! + n + 3) & ~3);
      u.fill(0, at[k]! + n, (at[k]! + n + 3) & ~3);
      this.matmul(it.gate, it.x, it.T, g.subarray(at[k]!, at[k]! + n));
      this.matmul(it.up, it.x, it.T, u.subarray(at[k]!, at[k]! + n));
    });
    const h = this.next().act(g, u, kind, b, bl);
    this.next();
    return items.map((it, k) => this.matmul(it.down, h.subarray(at[k]!, at[k]! + it.T * it.gate.rows), it.T, it.y));
  }

  /**
   * The routed sum and latent norm of T MoE tokens (wasm/fused.ts moe_combine) as one op of the
   * current step: out[t] = Σ_j f32(w_tj · rows[t·K + j]) in router order, then RMSNorm with `norm`
   * (null: none). rows are the byte offsets of zw values each in kernel memory (expert outputs of
   * earlier steps), unsigned: a memory may pass 2 GiB; norm a constant in kernel memory. Returns
   * out, a new arena array [T, zw].
   */
  moeCombine(rows: Uint32Array, weights: Float32Array, T: number, K: number, zw: number, norm: Float32Array | null, eps: number): Float32Array {
    if (rows.length !== T * K || weights.length < T * K) throw new RangeError(`moe combine: ${rows.length} rows and ${weights.length} weights for ${T} tokens of ${K}`);
    if (norm && (!this.k.contains(norm) || norm.length < zw)) throw new RangeError('moe combine: the norm must lie in kernel memory');
    const mem = (): ArrayBufferLike => this.k.mem();
    const ys = this.k.allocOffset(4 * T * K, 4), ws = this.k.allocOffset(4 * T * K, 4), ep = this.f64(eps);
    const out = this.alloc(T * zw);
    const end = mem().byteLength - 4 * zw;
    for (let i = 0; i < rows.length; i++) {
      if (!(rows[i]! <= end && rows[i]! % 4 === 0)) throw new RangeError('moe combine: expert rows must lie in kernel memory');
    }
    new Uint32Array(mem(), ys, T * K).set(rows);
    new Float32Array(mem(), ws, T * K).set(weights.subarray(0, T * K));
    this.op(MOE_COMBINE, { ys, wts: ws, K, zw, norm: norm ?? 0, epsPtr: ep, out }, T, T * K * zw + (norm ? 2 * T * zw : 0));
    return out;
  }

  /**
   * A block's input as one op of the current step (wasm/fused.ts attnres_norm; the reference is
   * blockInput in src/model/block-input.ts): per token, the AttnRes mix of `cands` (the snapshots,
   * then the current stream, each [T, D]) with `fold`, or `cands[0]` itself when fold is null, then
   * RMSNorm with `norm`. fold and norm are constants in kernel memory (placed before the chain);
   * candidates outside it are copied in now. Returns the normalized input, a new arena array [T, D].
   */
  attnResNorm(cands: readonly Float32Array[], fold: Float32Array | null, mixEps: number, norm: Float32Array, normEps: number, T: number, D: number): Float32Array {
    const m = cands.length;
    if (m === 0 || (!fold && m !== 1)) throw new RangeError(`attnres norm: ${m} candidates ${fold ? 'with' : 'without'} a fold`);
    for (const v of fold ? [fold, norm] : [norm]) if (!this.k.contains(v) || v.length < D) throw new RangeError('attnres norm: fold and norm must lie in kernel memory');
    const offs = cands.map((c) => {
      if (c.length < T * D) throw new RangeError(`attnres norm: a candidate of ${c.length} values, need ${T * D}`);
      if (this.k.contains(c)) return c.byteOffset;
      const a = this.alloc(T * D);
      a.set(c.subarray(0, T * D));
      return a.byteOffset;
    });
    const tab = this.k.allocOffset(4 * m, 4), ep = this.k.allocOffset(16, 8), sc = this.k.allocOffset(8 * T * m, 8);
    new Int32Array(this.k.mem(), tab, m).set(offs);
    const eps = new Float64Array(this.k.mem(), ep, 2);
    eps[0] = mixEps;
    eps[1] = normEps;
    const out = this.alloc(T * D);
    this.op(ATTNRES_NORM, { cands: tab, m, D, fold: fold ?? 0, epsPtr: ep, norm, scores: sc, out }, T, T * D * (3 * m + 3));
    return out;
  }

  /**
   * RMSNorm of T rows of n values (ops.ts rmsNorm; wasm/fused.ts rms_norm_rows) as one op of the
   * current step: x an arena array (row t at t·xStride), w a constant in kernel memory. A new arena array [T, n].
   */
  rmsNorm(x: Float32Array, T: number, n: number, w: Float32Array, eps: number, xStride = n): Float32Array {
    const out = this.alloc(T * n);
    this.op(RMS_NORM, { x, xStride: 4 * xStride, w, n, epsPtr: this.f64(eps), out, outStride: 4 * n }, T, 3 * T * n);
    return out;
  }

  /**
   * MLA's latents of T tokens appended to a cache (mlaAppendRef in graph/reference.ts, without rope): row t of
   * `lat` = RMSNorm(a row t [0, Lk)) with `norm`, row t of `rope` = a row t [Lk, Lk + dr); lat and
   * rope are the cache's arrays from the first new position. One op of the current step.
   */
  mlaAppend(a: Float32Array, T: number, Lk: number, dr: number, norm: Float32Array, eps: number, lat: Float32Array, rope: Float32Array): void {
    this.op(MLA_APPEND, { a, aStride: 4 * (Lk + dr), norm, Lk, dr, epsPtr: this.f64(eps), lat, rope }, T, 3 * T * Lk);
  }

  /**
   * Transposed products of H heads (Kernels.matvecTHeads; op OP_MVT): y[h] = rows r0 + h·rStride
   * .. + n of w, transposed, times x[h·xStride ..], into y [H, w.cols] (default a new arena array).
   */
  mvtHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xStride: number, H: number, y?: Float32Array): Float32Array {
    const R = this.k.mat(w, 1);
    if (!(0 <= r0 && n >= 0 && rStride >= 0 && r0 + (H - 1) * rStride + n <= R.rows)) throw new RangeError(`mvt heads: bad rows of ${R.rows}`);
    const out = y ?? this.alloc(H * R.cols);
    this.products = true; // (timed as a product)
    this.op(MVT, {
      fmt: R.fmtCode, w: R.w, s: R.s, sdt: R.sdt, rows: R.rows, cols: R.cols, r0, rStride, n, x, xStride: 4 * xStride, y: out.subarray(0, H * R.cols), yStride: 4 * R.cols,
    }, H, H * n * R.cols);
    return out;
  }

  /** MLA scores of H heads over n cached positions (Kernels.mlaScores; graph/reference.ts mlaScoresRef), q's rope part at qo, stride qStride, into out [H, n] (default a new arena array). */
  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number,
    out = this.alloc(H * n)): Float32Array {
    if (H > 0 && (qo < 0 || qo + (H - 1) * qStride + dr > q.length)) throw new RangeError('mla scores: q too short');
    if (out.length < H * n) throw new RangeError(`mla scores: out has ${out.length} values, need ${H * n}`);
    const qrope = H > 0 ? q.subarray(qo, qo + (H - 1) * qStride + dr) : 0;
    this.op(MLA_SCORES, {
      qlat: f32s(qLat, H * Lk, 'mla qLat'), qrope, qropeStride: 4 * qStride, lat: f32s(lat, n * Lk, 'mla lat'), rope: f32s(rope, n * dr, 'mla rope'),
      n, Lk, dr, scalePtr: this.f64(scale), out: out.subarray(0, H * n),
    }, H, H * n * (Lk + dr));
    return out;
  }

  /** The softmax of each head's n scores in place (mla.ts attend: exp in f64 with Math.exp, f32(ex / Z)). */
  mlaSoftmax(sc: Float32Array, n: number, H: number): void {
    const ex = this.k.allocOffset(8 * H * n, 8);
    this.op(MLA_SOFTMAX, { sc, n, ex }, H, 20 * H * n);
  }

  /** out[h] = Σ_s f32(P[h·n + s] · lat[s]) (Kernels.mlaWeightedSum; graph/reference.ts mlaWeightedSumRef) into out [H, Lk] (default a new arena array). */
  mlaWsum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out = this.alloc(H * Lk)): Float32Array {
    if (out.length < H * Lk) throw new RangeError(`mla sum: out has ${out.length} values, need ${H * Lk}`);
    this.op(MLA_WSUM, { P: f32s(P, H * n, 'mla P'), lat: f32s(lat, n * Lk, 'mla lat'), n, Lk, out: out.subarray(0, H * Lk) }, H, H * n * Lk);
    return out;
  }

  /** Rows `rows` of src [*, cols] (an arena array), back to back, as one op of the current step (wasm/fused.ts gather_rows). A new arena array [rows.length, cols]. */
  gatherRows(src: Float32Array, rows: readonly number[], cols: number): Float32Array {
    if (!this.k.contains(src)) throw new RangeError('chain gather rows: the source must lie in kernel memory');
    const n = rows.length;
    for (const r of rows) if (!(r >= 0 && (r + 1) * cols <= src.length)) throw new RangeError(`gather rows: row ${r} outside ${src.length / cols} rows`);
    const tab = this.k.allocOffset(4 * n, 4);
    const t = new Int32Array(this.k.mem(), tab, n);
    for (let i = 0; i < n; i++) t[i] = src.byteOffset + 4 * rows[i]! * cols;
    const out = this.alloc(n * cols);
    this.op(GATHER_ROWS, { tab, cols, out }, n, n * cols);
    return out;
  }

  /** Whether `a` lies in this chain's kernel memory (the fused ops' inputs must). */
  holds(a: ArrayBufferView): boolean {
    return this.k.contains(a);
  }

  /** out[i] = f32(out[i] · σ(g[i])) for i < n, σ(v) = 1 / (1 + Math.exp(−v)) in f64 (MLA's output gate), in place. */
  sigmoidGate(out: Float32Array, g: Float32Array, n: number): void {
    this.op(SIGMOID_GATE, { out, g }, n, 20 * n);
  }

  /**
   * One KDA delta-rule step of H heads (Kernels.kdaStep; kda.ts kdaRecurStep per head) in place on
   * S [H, d, d]; o [H·d] is written.
   */
  kdaStep(S: Float32Array, q: Float32Array, k: Float32Array, v: Float32Array, alpha: Float32Array, beta: Float32Array, o: Float32Array, H: number, d: number): void {
    const P = H * d;
    if (o.length < P) throw new RangeError(`kda o: ${o.length} values, need ${P}`);
    this.op(KDA_STEP, {
      S: f32s(S, P * d, 'kda S'), q: f32s(q, P, 'kda q'), k: f32s(k, P, 'kda k'), v: f32s(v, P, 'kda v'), alpha: f32s(alpha, P, 'kda alpha'),
      beta: f32s(beta, H, 'kda beta'), o: o.subarray(0, P), d,
    }, H, 2 * P * d);
  }

  /** Op `def` of the current step over units [0, n), counted as `macs` of work; args by name (OpArg). */
  op(def: OpDef, args: Readonly<Record<string, OpArg>>, n: number, macs: number): void {
    const words: number[] = [];
    for (const a of def.args) words.push(this.word(def, a, args[a.name]));
    const ctrl = this.k.ctrl;
    this.cur.ops.push((slot) => writeOp(ctrl, slot, def, words, 0, n));
    this.macs += macs;
    this.units = Math.max(this.units, n);
  }

  /** The word of argument `a` (see OpArg). */
  private word(def: OpDef, a: ArgDecl, v: OpArg | undefined): number {
    if (v === undefined) throw new RangeError(`op ${def.name}: no argument ${a.name}`);
    if (typeof v === 'number') return v;
    if (this.k.contains(v)) return v.byteOffset;
    const step = this.steps.length, end = v.byteOffset + v.byteLength;
    if (this.copies.some((c) => c.step < step && c.y.buffer === v.buffer && c.y.byteOffset < end && v.byteOffset < c.y.byteOffset + c.bytes)) {
      throw new RangeError(`op ${def.name}: ${a.name} is an earlier step's output outside kernel memory`);
    }
    const off = this.k.allocOffset(v.byteLength);
    if (a.io !== 'out') new Uint8Array(this.k.mem(), off, v.byteLength).set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    if (a.io === 'out' || a.io === 'inout') this.copies.push({ y: v, off, bytes: v.byteLength, step });
    return off;
  }

  /** The offset of an arena f64 holding v. */
  f64(v: number): number {
    const o = this.k.allocOffset(8, 8);
    new Float64Array(this.k.mem(), o, 1)[0] = v;
    return o;
  }

  /** The KDA block of a.T tokens (Kernels.kdaBlock) as one op of the current step; a.y must be in kernel memory. */
  kdaBlock(a: KdaBlockArgs): void {
    if (!this.k.contains(a.y)) throw new RangeError('chain kdaBlock: y must lie in kernel memory');
    const { pb, macs } = kdaParams(this.k, a);
    this.op(KDA_BLOCK, { pb }, a.H, macs);
  }

  /** Run every step (in as many dispatches as the control block needs: a cut is a barrier too), then fill the outputs outside kernel memory. */
  run(): void {
    this.launch(Infinity);
    this.join();
  }

  /**
   * Run the first `steps` steps (next() separates them) with every thread and return, leaving
   * the rest to the workers while the caller does other work: the arrays the first steps write
   * may be read at once, the others after join(). Any other dispatch on these kernels joins
   * first, and so does done(). Allocations the caller makes meanwhile must not outlive the chain
   * (done() frees everything above its start). A chain too long for one dispatch runs whole.
   */
  launch(steps: number): void {
    if (this.ran) throw new Error('chain: run() twice');
    this.ran = true;
    this.k.timed(() => {
      const nth = Math.max(1, Math.min(this.k.threadsFor(this.macs), this.units));
      const bucket: ProfileBucket = this.experts ? 'experts' : this.products ? 'matmul' : 'fused';
      const s0 = this.steps[0]!;
      if (this.steps.length === 1 && s0.preps.length === 0 && s0.ops.length <= this.k.maxOps) {
        // one step (every eager call): its ops as they are, one dispatch
        for (let i = 0; i < s0.ops.length; i++) s0.ops[i]!(i);
        if (s0.ops.length) this.k.run(s0.ops.length, nth, bucket);
        this.launched = true;
        this.top = this.k.mark();
        return;
      }
      const list: Writer[] = [];
      let poolSteps = 0; // the pool's steps (a step's preps are one of their own) within the first `steps`
      this.steps.forEach((s, i) => {
        if (s.preps.length) list.push(...s.preps, BARRIER);
        if (s.ops.length) list.push(...s.ops, BARRIER);
        if (i < steps) poolSteps += (s.preps.length ? 1 : 0) + (s.ops.length ? 1 : 0);
      });
      const ctrl = this.k.ctrl;
      const one = list.length - 1 < this.k.maxOps; // (the last barrier is not written)
      let n = 0, lastBarrier = false;
      const flush = (last: boolean): void => {
        if (lastBarrier) n--; // (a dispatch's end is a barrier)
        if (n > 0) this.k.run(n, nth, bucket, last && one ? poolSteps : Infinity);
        n = 0;
        lastBarrier = false;
      };
      for (const wr of list) {
        if (n === this.k.maxOps) flush(false);
        if (wr === BARRIER) {
          if (n === 0) continue;
          writeOp(ctrl, n, BARRIER_OP, [], 0, 0);
        } else wr(n);
        lastBarrier = wr === BARRIER;
        n++;
      }
      flush(true);
      this.launched = true;
      this.top = this.k.mark();
    });
  }

  /** The rest of a launched chain, then its outputs outside kernel memory filled. */
  join(): void {
    if (!this.launched) return;
    this.launched = false;
    this.k.timed(() => {
      this.k.join();
      const mem = this.k.mem();
      for (const c of this.copies) new Uint8Array(c.y.buffer, c.y.byteOffset, c.bytes).set(new Uint8Array(mem, c.off, c.bytes));
    });
  }

  /**
   * Free the chain's arena arrays (every array alloc() and matmul() returned), after the rest of a
   * launch. Something allocated since the run and still held (a weight buffer made meanwhile) would
   * be freed too: then the chain's arrays are left in place instead (counted in `kept`).
   */
  done(): void {
    try {
      this.join();
    } finally {
      if (this.top < 0 || this.k.mark() <= this.top) this.k.release(this.mark);
      else Chain.kept++;
    }
  }

  /** Chains whose arrays done() left in place (see done). */
  static kept = 0;

  private get cur(): { preps: Writer[]; ops: Writer[] } {
    return this.steps[this.steps.length - 1]!;
  }
}
