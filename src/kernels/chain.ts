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
import {
  OP_ACT, OP_ATTNRES_NORM, OP_BARRIER, OP_KDA_BLOCK, OP_MLA_APPEND, OP_MLA_SCORES, OP_MLA_SOFTMAX, OP_MLA_WSUM, OP_MOE_COMBINE, OP_MVT, OP_RMSNORM,
  OP_GATHER_ROWS, OP_SIGMOID_GATE, writeFusedOp, writeMatmulOp,
} from './pool.js';
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
  /** A KDA block's parameter block (Kernels.kdaBlock's arguments, y in kernel memory): its offset and work. */
  kdaParams(a: KdaBlockArgs): { pb: number; macs: number };
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

export class Chain {
  private readonly mark: number;
  /** Per step: its layout ops, then its ops. */
  private readonly steps: { preps: Writer[]; ops: Writer[] }[] = [{ preps: [], ops: [] }];
  /** Layouts already staged in the current step: source offset, T, columns, layout, where the result is. */
  private stepPreps: { src: number; T: number; cols: number; layout: number; at: number }[] = [];
  /** Outputs outside kernel memory, copied out after run(). */
  private readonly copies: { y: Float32Array; off: number; n: number }[] = [];
  /** Activations outside kernel memory laid out so far (the port's records). */
  private readonly staged: unknown[] = [];
  private macs = 0;
  private experts = false;
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
      this.copies.push({ y: out, off: yo, n });
    }
    const ctrl = this.k.ctrl;
    this.cur.ops.push((slot) => writeMatmulOp(ctrl, slot, R.fmtCode, R.w, R.s, R.sdt, R.rows, R.cols, xo, T, yo, 0, R.rows));
    this.macs += n * R.cols;
    this.experts ||= R.experts;
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
    this.fused(OP_ACT, [fn, gate.byteOffset, up.byteOffset, out.byteOffset, pb], n4 / 4, n4 * 32); // (about 100 flops an element)
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
    const ys = this.k.allocOffset(4 * T * K, 4), ws = this.k.allocOffset(4 * T * K, 4), ep = this.f64s(eps);
    const out = this.alloc(T * zw);
    const end = mem().byteLength - 4 * zw;
    for (let i = 0; i < rows.length; i++) {
      if (!(rows[i]! <= end && rows[i]! % 4 === 0)) throw new RangeError('moe combine: expert rows must lie in kernel memory');
    }
    new Uint32Array(mem(), ys, T * K).set(rows);
    new Float32Array(mem(), ws, T * K).set(weights.subarray(0, T * K));
    this.fused(OP_MOE_COMBINE, [ys, ws, K, zw, norm ? norm.byteOffset : 0, ep, out.byteOffset], T, T * K * zw + (norm ? 2 * T * zw : 0));
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
    this.fused(OP_ATTNRES_NORM, [tab, m, D, fold ? fold.byteOffset : 0, ep, norm.byteOffset, sc, out.byteOffset], T, T * D * (3 * m + 3));
    return out;
  }

  /**
   * RMSNorm of T rows of n values (ops.ts rmsNorm; wasm/fused.ts rms_norm_rows) as one op of the
   * current step: x an arena array (row t at t·xStride), w a constant in kernel memory. A new arena array [T, n].
   */
  rmsNorm(x: Float32Array, T: number, n: number, w: Float32Array, eps: number, xStride = n): Float32Array {
    this.inArena('rms norm', x, w);
    const out = this.alloc(T * n);
    this.fused(OP_RMSNORM, [x.byteOffset, 4 * xStride, w.byteOffset, n, this.f64s(eps), out.byteOffset, 4 * n], T, 3 * T * n);
    return out;
  }

  /**
   * MLA's latents of T tokens appended to a cache (mla.ts appendLatents, without rope): row t of
   * `lat` = RMSNorm(a row t [0, Lk)) with `norm`, row t of `rope` = a row t [Lk, Lk + dr); lat and
   * rope are the cache's arrays from the first new position. One op of the current step.
   */
  mlaAppend(a: Float32Array, T: number, Lk: number, dr: number, norm: Float32Array, eps: number, lat: Float32Array, rope: Float32Array): void {
    this.inArena('mla append', a, norm, lat, rope);
    this.fused(OP_MLA_APPEND, [a.byteOffset, 4 * (Lk + dr), norm.byteOffset, Lk, dr, this.f64s(eps), lat.byteOffset, rope.byteOffset], T, 3 * T * Lk);
  }

  /**
   * Transposed products of H heads (Kernels.matvecTHeads; op OP_MVT): y[h] = rows r0 + h·rStride
   * .. + n of w, transposed, times x[h·xStride ..] (an arena array). A new arena array [H, w.cols].
   */
  mvtHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xStride: number, H: number): Float32Array {
    this.inArena('mvt', x);
    const R = this.k.mat(w, 1);
    if (!(0 <= r0 && n >= 0 && r0 + (H - 1) * rStride + n <= R.rows)) throw new RangeError(`mvt heads: bad rows of ${R.rows}`);
    const y = this.alloc(H * R.cols);
    this.fused(OP_MVT, [R.fmtCode, R.w, R.s, R.sdt, R.rows, R.cols, r0, rStride, n, x.byteOffset, 4 * xStride, y.byteOffset, 4 * R.cols], H, H * n * R.cols);
    return y;
  }

  /** MLA scores of H heads over n cached positions (Kernels.mlaScores; mla.ts mlaScoresRef), q's rope part at qo, stride qStride. A new arena array [H, n]. */
  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number): Float32Array {
    this.inArena('mla scores', qLat, q, lat, rope);
    const out = this.alloc(H * n);
    this.fused(OP_MLA_SCORES, [qLat.byteOffset, q.byteOffset + 4 * qo, 4 * qStride, lat.byteOffset, rope.byteOffset, n, Lk, dr, this.f64s(scale), out.byteOffset], H, H * n * (Lk + dr));
    return out;
  }

  /** The softmax of each head's n scores in place (mla.ts attend: exp in f64 with Math.exp, f32(ex / Z)). */
  mlaSoftmax(sc: Float32Array, n: number, H: number): void {
    this.inArena('mla softmax', sc);
    const ex = this.k.allocOffset(8 * H * n, 8);
    this.fused(OP_MLA_SOFTMAX, [sc.byteOffset, n, ex], H, 20 * H * n);
  }

  /** out[h] = Σ_s f32(P[h·n + s] · lat[s]) (Kernels.mlaWeightedSum; mla.ts mlaWeightedSumRef). A new arena array [H, Lk]. */
  mlaWsum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number): Float32Array {
    this.inArena('mla sum', P, lat);
    const out = this.alloc(H * Lk);
    this.fused(OP_MLA_WSUM, [P.byteOffset, lat.byteOffset, n, Lk, out.byteOffset], H, H * n * Lk);
    return out;
  }

  /** Rows `rows` of src [*, cols] (an arena array), back to back, as one op of the current step (wasm/fused.ts gather_rows). A new arena array [rows.length, cols]. */
  gatherRows(src: Float32Array, rows: readonly number[], cols: number): Float32Array {
    this.inArena('gather rows', src);
    const n = rows.length;
    for (const r of rows) if (!(r >= 0 && (r + 1) * cols <= src.length)) throw new RangeError(`gather rows: row ${r} outside ${src.length / cols} rows`);
    const tab = this.k.allocOffset(4 * n, 4);
    const t = new Int32Array(this.k.mem(), tab, n);
    for (let i = 0; i < n; i++) t[i] = src.byteOffset + 4 * rows[i]! * cols;
    const out = this.alloc(n * cols);
    this.fused(OP_GATHER_ROWS, [tab, cols, out.byteOffset], n, n * cols);
    return out;
  }

  /** Whether `a` lies in this chain's kernel memory (the fused ops' inputs must). */
  holds(a: ArrayBufferView): boolean {
    return this.k.contains(a);
  }

  /** out[i] = f32(out[i] · σ(g[i])) for i < n, σ(v) = 1 / (1 + Math.exp(−v)) in f64 (MLA's output gate), in place. */
  sigmoidGate(out: Float32Array, g: Float32Array, n: number): void {
    this.inArena('sigmoid gate', out, g);
    this.fused(OP_SIGMOID_GATE, [out.byteOffset, g.byteOffset], n, 20 * n);
  }

  /** A fused op of the current step over units [0, n), counted as `macs` of work. */
  private fused(kind: number, args: number[], n: number, macs: number): void {
    const ctrl = this.k.ctrl;
    this.cur.ops.push((slot) => writeFusedOp(ctrl, slot, kind, args, 0, n));
    this.macs += macs;
  }

  /** The offset of an arena f64 holding v. */
  private f64s(v: number): number {
    const o = this.k.allocOffset(8, 8);
    new Float64Array(this.k.mem(), o, 1)[0] = v;
    return o;
  }

  private inArena(what: string, ...arrays: Float32Array[]): void {
    for (const a of arrays) if (!this.k.contains(a)) throw new RangeError(`chain ${what}: its arrays must lie in kernel memory`);
  }

  /** The KDA block of a.T tokens (Kernels.kdaBlock) as one op of the current step; a.y must be in kernel memory. */
  kdaBlock(a: KdaBlockArgs): void {
    if (!this.k.contains(a.y)) throw new RangeError('chain kdaBlock: y must lie in kernel memory');
    const { pb, macs } = this.k.kdaParams(a);
    this.fused(OP_KDA_BLOCK, [pb], a.H, macs);
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
      const list: Writer[] = [];
      let poolSteps = 0; // the pool's steps (a step's preps are one of their own) within the first `steps`
      this.steps.forEach((s, i) => {
        if (s.preps.length) list.push(...s.preps, BARRIER);
        if (s.ops.length) list.push(...s.ops, BARRIER);
        if (i < steps) poolSteps += (s.preps.length ? 1 : 0) + (s.ops.length ? 1 : 0);
      });
      const nth = this.k.threadsFor(this.macs);
      const bucket: ProfileBucket = this.experts ? 'experts' : 'matmul';
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
          writeFusedOp(ctrl, n, OP_BARRIER, [], 0, 0);
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
      for (const c of this.copies) c.y.set(new Float32Array(mem, c.off, c.n));
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
