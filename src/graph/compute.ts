// The seam between the model and the kernels: the model's blocks call `Compute` and never a
// kernel. Which kernel runs a product: the WebAssembly kernels whose memory holds the weight's bytes
// (zero copy), or the TypeScript reference. Both give the same bytes (docs/NUMERICS.md), so the
// choice is only about speed. Node 20 caps one WebAssembly.Memory at 4 GiB, so a large budget
// uses a group of kernel instances, each with its own memory and workers; a weight is computed
// by the instance whose memory it lives in.

import { PER_MEMORY, createKernels, kernelMembers, type KdaBlockArgs, type Kernels, type KernelsOptions, type MatmulOp } from '../kernels/fast.js';
import * as ref from '../kernels/ref.js';
import { gatedActRef, type ActKind } from '../kernels/wasm/act.js';
import type { WeightView } from '../formats/weight.js';
import { MiB } from '../util/format.js';
import type { KernelProfile } from '../kernels/profile.js';
import { attnResMix, kdaBlockRef, mlaScoresRef, mlaWeightedSumRef } from './reference.js';

export { KernelProfile, PROFILE_BUCKETS, type ProfileBucket } from '../kernels/profile.js';

/** Kernel memory kept free of sequence state, for the kernels' temporaries (activation copies). */
const STATE_HEADROOM = 192 * MiB;

export class KernelGroup {
  private current = 0;
  private used: number[];

  private constructor(readonly members: Kernels[]) {
    this.used = members.map(() => 0);
  }

  /** Enough instances for `weightBytes` bytes of weight memory. */
  static async create(weightBytes: number, opts: KernelsOptions): Promise<KernelGroup> {
    const n = kernelMembers(weightBytes);
    const members: Kernels[] = [];
    for (let i = 0; i < n; i++) members.push(await createKernels({ ...opts, memoryBytes: Math.min(PER_MEMORY, weightBytes) + 64 * MiB }));
    return new KernelGroup(members);
  }

  get threads(): number {
    return this.members[0]!.threads;
  }

  /**
   * Optional fast path for mxfp4 products (in K3, exactly the routed experts): 8-bit activations
   * and integer block dots (kernels/wasm/q8.ts). Off by default; deterministic, but not the exact
   * path's bytes.
   */
  get fastExperts(): boolean {
    return this.members[0]!.fastMxfp4;
  }

  set fastExperts(on: boolean) {
    for (const k of this.members) k.fastMxfp4 = on;
  }

  /** Where every member's calls add their time (`k3 bench --profile`); null: nothing is timed. */
  set profile(p: KernelProfile | null) {
    for (const k of this.members) k.profile = p;
  }

  /** Bytes of kernel memory for weights, used in place by the kernels. */
  alloc(bytes: number): Uint8Array {
    while (this.current < this.members.length) {
      if (this.used[this.current]! + bytes <= PER_MEMORY) {
        this.used[this.current]! += bytes;
        return this.members[this.current]!.alloc(bytes, 4096).u8;
      }
      this.current++;
    }
    // Over the planned size (should not happen): plain memory, computed with a copy per call.
    return new Uint8Array(bytes);
  }

  /** `bytes` in the member `alloc` would place them in now when they fit there whole, else null
   *  (nothing placed): one buffer for what would otherwise be several allocations in a row, so
   *  that it never leaves a gap that pushes weights past the planned members. */
  allocTogether(bytes: number): Uint8Array | null {
    const i = this.current;
    if (i >= this.members.length || this.used[i]! + bytes > PER_MEMORY) return null;
    return this.alloc(bytes);
  }

  /**
   * A zero-filled Float32Array for sequence state (KDA state, MLA cache), in the kernel memory
   * with the most room, so the fused kernels use it in place. Room is what is left below the
   * memory's maximum after the weights its creator planned for it (`plannedBytes`, whatever of
   * them is not placed yet) and STATE_HEADROOM for the kernels' temporaries. The arena cannot
   * free: state lives as long as the group. Without room: a plain array (the JavaScript
   * reference computes with it; same numbers).
   */
  allocF32(n: number): Float32Array {
    const bytes = n * 4;
    let best: Kernels | null = null;
    let bestRoom = -Infinity;
    this.members.forEach((k, i) => {
      const room = k.maxBytes - k.mark() - Math.max(0, k.plannedBytes - this.used[i]!) - STATE_HEADROOM;
      if (room > bestRoom) {
        bestRoom = room;
        best = k;
      }
    });
    if (!best || bestRoom < bytes + 64) return new Float32Array(n);
    return (best as Kernels).allocF32(n).fill(0);
  }

  /** The member whose memory holds `a`, if any. */
  ownerOf(a: ArrayBufferView): Kernels | null {
    for (const k of this.members) if (k.contains(a)) return k;
    return null;
  }

  owner(w: WeightView): Kernels | null {
    for (const k of this.members) if (k.contains(w.data)) return k;
    return null;
  }

  async close(): Promise<void> {
    for (const k of this.members) await k.close();
  }
}

export type { GatedMlpOp, KdaBlockArgs, MatmulOp } from '../kernels/fast.js';
/** The exp and sigmoid the fused KDA block computes with (wasm/act.ts), for its reference in src/model. */
export { expRef, sigmoidRef } from '../kernels/wasm/act.js';

/** The canonical f32 dot of the reference kernels (ref.dot), for model code's own reference loops. */
export const dot = ref.dot;
/** The depth softmax of Attention Residuals (ref.depthSoftmax), for the model's reference mix. */
export const depthSoftmax = ref.depthSoftmax;

/**
 * How one model computes: its kernel group (null: the TypeScript reference only). Each model owns
 * one, so several models, with their own kernels and threads, can live in one process. Products
 * of weights outside the group's memory go through the reference; both give the same bytes.
 */
export class Compute {
  constructor(private readonly kernels: KernelGroup | null) {}

  /** The kernel group products run on, or null for the reference. */
  get group(): KernelGroup | null {
    return this.kernels;
  }

  /** y[t, r] = W[r, :] · x[t, :] for t < T (see ref.matmul). */
  matmul(w: WeightView, x: Float32Array, T: number, y: Float32Array): void {
    const k = this.kernels?.owner(w);
    if (k) k.matmul(w, x, T, y);
    else ref.matmul(w, x, T, y);
  }

  /** y[c] = Σ_k x[xo+k] · W[r0+k, c] (see ref.matvecT). */
  matvecT(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
    const k = this.kernels?.owner(w);
    if (k) k.matvecT(w, r0, n, x, xo, y);
    else ref.matvecT(w, r0, n, x, xo, y);
  }

  /** matvecT of H heads in one dispatch: head h over rows r0 + h·rStride, x at xo + h·xStride, into y[h·cols ..]. */
  matvecTHeads(w: WeightView, r0: number, rStride: number, n: number, x: Float32Array, xo: number, xStride: number, y: Float32Array, H: number): void {
    const k = this.kernels?.owner(w);
    if (k) k.matvecTHeads(w, r0, rStride, n, x, xo, xStride, y, H);
    else for (let h = 0; h < H; h++) ref.matvecT(w, r0 + h * rStride, n, x, xo + h * xStride, y.subarray(h * w.cols, (h + 1) * w.cols));
  }

  /** The Attention Residuals mix of candidates [T, D] each (the snapshots, then the current
   *  stream): in the group's kernels, else the reference attnResMix. Same bytes. */
  attnResMix(cands: readonly Float32Array[], T: number, D: number, fold: Float32Array, eps: number): Float32Array {
    const k = this.kernels?.members[0];
    return k ? k.attnResMix(cands, T, D, fold, eps) : attnResMix(cands.slice(0, -1), cands.at(-1)!, T, D, fold, eps);
  }

  // ---- fused ops (kernels/ops/): the WebAssembly kernels when the state lives in this group's
  // memory, else their references (graph/reference.ts), so the caller never branches on where
  // its bytes live. Same bytes.

  /** Runs `fn` on the member whose memory holds every one of `state`; false when none does. */
  private onState(state: readonly ArrayBufferView[], fn: (k: Kernels) => void): boolean {
    const kk = this.kernels?.ownerOf(state[0]!);
    if (!kk || !state.every((a) => kk.contains(a))) return false;
    fn(kk);
    return true;
  }

  /** The KDA block of a.T tokens after its projections (Kernels.kdaBlock) when the state (S, conv,
   *  work) lives in this group's memory, else its reference kdaBlockRef. The layer's constant
   *  vectors (taps, dt_bias, o_norm) are placed in kernel memory once and reused. */
  kdaBlock(a: KdaBlockArgs): void {
    const done = this.onState([a.S, a.conv, a.work], (kk) => {
      const c = (v: Float32Array): Float32Array => this.resident(kk, v);
      kk.kdaBlock({ ...a, qConv: c(a.qConv), kConv: c(a.kConv), vConv: c(a.vConv), dtBias: c(a.dtBias), oNorm: c(a.oNorm) });
    });
    if (!done) kdaBlockRef(a);
  }

  private readonly placed = new WeakMap<Float32Array, Float32Array>();

  /** A copy of the constant vector v in kk's memory, made once (v itself if it is there already or there is no room). */
  private resident(kk: Kernels, v: Float32Array): Float32Array {
    if (kk.contains(v)) return v;
    let p = this.placed.get(v);
    if (!p) {
      const a = this.kernels!.allocF32(v.length);
      p = kk.contains(a) ? a : v;
      p.set(v);
      this.placed.set(v, p);
    }
    return p;
  }

  /** MLA scores of H heads over n cached positions (see Kernels.mlaScores; reference mlaScoresRef). */
  mlaScores(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): void {
    if (!this.onState([lat], (kk) => kk.mlaScores(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out))) mlaScoresRef(qLat, q, qo, qStride, lat, rope, n, Lk, dr, scale, H, out);
  }

  /** MLA weighted latent sums of H heads (see Kernels.mlaWeightedSum; reference mlaWeightedSumRef). */
  mlaWeightedSum(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): void {
    if (!this.onState([lat], (kk) => kk.mlaWeightedSum(P, lat, n, Lk, H, out))) mlaWeightedSumRef(P, lat, n, Lk, H, out);
  }

  /**
   * Gated activation out[i] = f32(act(gate[i], up[i])): in WebAssembly (see Kernels.gatedAct) by
   * the member holding gate, else the first; without kernels, gatedActRef. Same bytes.
   */
  gatedAct(gate: Float32Array, up: Float32Array, out: Float32Array, kind: ActKind, b: number, bl: number | null): void {
    this.gatedActBatch([{ gate, up, out }], kind, b, bl);
  }

  /** gatedAct of several arrays in one dispatch (Kernels.gatedActBatch, by the first member); same bytes as one call each. */
  gatedActBatch(items: readonly { gate: Float32Array; up: Float32Array; out: Float32Array }[], kind: ActKind, b: number, bl: number | null): void {
    const g = this.kernels;
    if (g) g.members[0]!.gatedActBatch(items, kind, b, bl);
    else for (const { gate, up, out } of items) gatedActRef(gate, up, out, kind, b, bl);
  }

  /**
   * The constant vectors `vs` (a layer's KDA taps, dt_bias, o_norm) in the kernel memory that
   * holds `near` (the state), placed once as kdaBlock places them; null when `near` is in none.
   * Call it before a chain begins: a chain frees what is allocated after its start.
   */
  placedNear(near: ArrayBufferView, vs: readonly Float32Array[]): Float32Array[] | null {
    const kk = this.kernels?.ownerOf(near);
    return kk ? vs.map((v) => this.resident(kk, v)) : null;
  }

  /**
   * Independent products in as few dispatches as possible: grouped by the kernel instance whose
   * memory holds each weight; weights outside kernel memory go through the reference. Each output
   * is exactly what matmul() gives.
   */
  matmulBatch(ops: readonly MatmulOp[]): void {
    const groups = new Map<Kernels, MatmulOp[]>();
    for (const op of ops) {
      const k = this.kernels?.owner(op.w);
      if (k) (groups.get(k) ?? groups.set(k, []).get(k)!).push(op);
      else ref.matmul(op.w, op.x, op.T, op.y);
    }
    for (const [k, list] of groups) k.matmulBatch(list);
  }

  /**
   * A zero-filled Float32Array for sequence state: in the group's kernel memory when it has room
   * (KernelGroup.allocF32), so the fused kernels use it in place; else a plain array.
   */
  allocF32(n: number): Float32Array {
    return this.kernels ? this.kernels.allocF32(n) : new Float32Array(n);
  }
}

/** The TypeScript reference, shared by every model opened without kernels. */
export const REF_COMPUTE = new Compute(null);

/** Where the dots' fused multiply-add is emulated, the line that says so (kernels/wasm/fma.ts). */
export { maddHint } from '../kernels/wasm/loader.js';
