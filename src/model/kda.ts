// Kimi Delta Attention (docs/spec/ARCHITECTURE.md §3.3, §4.3; docs/spec/K3.md §6.3). Prefill runs the exact recurrence
// token by token (not the chunked form), so prefill and decode give the same bytes.
//
// State per layer: S [H, dk, dk] f32 (rows = key channel, columns = value channel) and the last
// W-1 pre-convolution inputs of q, k, v (conv tails), zeros at the start of a sequence.

import { viewsNow, type Mat } from '../store/mat.js';
import { expRef, sigmoidRef, type Compute, type KdaBlockArgs } from '../graph/compute.js';
import { linear, linearMany } from './ops.js';
import { blockInput, chainInput, inputConstants, type BlockInput } from './block-input.js';

const fr = Math.fround;

export interface KdaParams {
  heads: number;
  headDim: number;
  convSize: number;
  /** λ of K3's bounded gate, or null for Kimi Linear's −exp(A_log)·softplus(z). */
  gateLowerBound: number | null;
  eps: number;
}

export interface KdaWeights {
  q: Mat;
  k: Mat;
  v: Mat;
  /** Depthwise conv taps [P, W] (tap W-1 multiplies the current token). */
  qConv: Float32Array;
  kConv: Float32Array;
  vConv: Float32Array;
  fa: Mat;
  fb: Mat;
  b: Mat;
  /** Output gate: full-rank g_proj (K3) or the low-rank pair g_a / g_b (Kimi Linear). */
  gate: { full: Mat } | { a: Mat; b: Mat };
  o: Mat;
  /** Per head (first `heads` entries are used; K3 pads to head_dim). */
  aLog: Float32Array;
  dtBias: Float32Array;
  oNorm: Float32Array;
}

export interface KdaState {
  S: Float32Array;
  /** [3][W-1][P]: q, k, v tails, oldest first. */
  conv: Float32Array;
  /**
   * Per-token vectors q, k, v, α, o [P each] and β [H], in the same memory as S when the state
   * was allocated in kernel memory (the WebAssembly step then copies nothing); null otherwise.
   */
  work: Float32Array | null;
  /** While a speculative sweep runs (startKdaSweep): what rolling it back needs. */
  sweep?: KdaSweep | null;
}

/**
 * What a speculative sweep keeps so that it can be cut back to its first tokens without reading
 * a weight again (issue 9): S and the conv tails from before the sweep, and per token the vectors
 * the recurrence consumed (q, k, v, α [P each], β [H]) and the conv tails after it.
 */
export interface KdaSweep {
  S0: Float32Array;
  conv0: Float32Array;
  steps: Float32Array[];
  tails: Float32Array[];
}

/** Allocates zero-filled f32 arrays (e.g. in kernel memory: KernelGroup.allocF32). */
export type F32Alloc = (n: number) => Float32Array;

/**
 * Floats of one layer's state: S [H·d·d], the conv tails [3·(W-1)·P], and the per-token work
 * vectors q, k, v, α, o [P each] and β [H] (kept with the state in kernel memory, or allocated
 * per call without it: the plan counts them either way).
 */
export function kdaStateFloats(p: Pick<KdaParams, 'heads' | 'headDim' | 'convSize'>): { S: number; conv: number; work: number } {
  const P = p.heads * p.headDim;
  return { S: P * p.headDim, conv: 3 * (p.convSize - 1) * P, work: 5 * P + p.heads };
}

/**
 * A zero state. With `alloc`, S, the conv tails and the work vectors are one allocation (so they
 * share one kernel memory); without, plain arrays.
 */
export function newKdaState(p: KdaParams, alloc?: F32Alloc | null): KdaState {
  const { S: nS, conv: nConv, work: nWork } = kdaStateFloats(p);
  if (!alloc) return { S: new Float32Array(nS), conv: new Float32Array(nConv), work: null };
  const buf = alloc(nS + nConv + nWork);
  return { S: buf.subarray(0, nS), conv: buf.subarray(nS, nS + nConv), work: buf.subarray(nS + nConv) };
}

/**
 * Causal depthwise conv + SiLU for one token over P channels, updating the tail (docs/spec/K3.md §6.3 K4):
 * u = Σ_m c[j,m]·x_{t-W+1+m}[j] (m = 0 oldest … W-1 current), summed in that order; out = silu(u).
 * σ here and in the rest of the block is sigmoidRef (our own exp, shared with the WebAssembly
 * block kernel wasm/kda-block.ts), not Math.exp.
 */
export function shortConvStep(xt: Float32Array, xo: number, taps: Float32Array, tail: Float32Array, tailOff: number, P: number, W: number, out: Float32Array, oo: number): void {
  for (let j = 0; j < P; j++) {
    let u = 0;
    for (let m = 0; m < W - 1; m++) u += taps[j * W + m]! * tail[tailOff + m * P + j]!;
    u += taps[j * W + W - 1]! * xt[xo + j]!;
    out[oo + j] = u * sigmoidRef(u);
  }
  // Shift the tail: drop the oldest, append the current input.
  for (let m = 0; m < W - 2; m++) tail.copyWithin(tailOff + m * P, tailOff + (m + 1) * P, tailOff + (m + 2) * P);
  if (W > 1) tail.set(xt.subarray(xo, xo + P), tailOff + (W - 2) * P);
}

/**
 * Per-channel decay α = exp(g) (docs/spec/ARCHITECTURE.md §3.3 P4–P5, §4.3); z is f_b(f_a(x)) before dt_bias. K3's bounded
 * gate uses sigmoidRef and expRef (the block kernel's numbers); Kimi Linear's softplus gate stays
 * on Math (the kernel takes its α from here). A = Math.exp(A_log) either way.
 */
export function kdaDecay(p: KdaParams, z: Float32Array, zo: number, aLog: Float32Array, dtBias: Float32Array, out: Float32Array): void {
  const d = p.headDim;
  for (let h = 0; h < p.heads; h++) {
    const A = Math.exp(aLog[h]!);
    for (let i = 0; i < d; i++) {
      const c = h * d + i;
      const zz = z[zo + c]! + dtBias[c]!;
      if (p.gateLowerBound !== null) out[c] = expRef(p.gateLowerBound * sigmoidRef(A * zz));
      else out[c] = Math.exp(-A * (zz >= 20 ? zz : Math.log1p(Math.exp(zz))));
    }
  }
}

/** L2-normalize each head of a [P] vector in place: x / sqrt(Σx² + 1e-6), times `scale`. */
function l2Heads(x: Float32Array, heads: number, d: number, scale: number): void {
  for (let h = 0; h < heads; h++) {
    let ss = 0;
    for (let i = 0; i < d; i++) ss += x[h * d + i]! * x[h * d + i]!;
    const inv = 1 / Math.sqrt(ss + 1e-6);
    for (let i = 0; i < d; i++) x[h * d + i] = fr(x[h * d + i]! * inv) * scale;
  }
}

/** One sequence's rows of a batched KDA call: `T` consecutive rows advancing `state`. */
export interface KdaPart {
  T: number;
  state: KdaState;
}

/**
 * KDA for T tokens of normalized input x [T, D], advancing `state`. Returns [T, D]. Given parts
 * (several sequences' rows back to back), the projections run once over all rows (each weight
 * read once) and each part's recurrence on its own state; each row's numbers are as if alone.
 */
export async function kdaForward(c: Compute, p: KdaParams, w: KdaWeights, xin: Float32Array | BlockInput, T: number, state: KdaState | readonly KdaPart[]): Promise<Float32Array> {
  const H = p.heads;
  const d = p.headDim;
  const P = H * d;
  const parts = 'S' in state ? [{ T, state }] : state;
  const chained = kdaChained(c, p, w, xin, T, parts);
  if (chained) return chained;
  const x = blockInput(c, xin);
  // Every product of x in one batch, then the low-rank second halves (forward order: weights.ts trunkOrder).
  const g1 = 'full' in w.gate ? w.gate.full : w.gate.a;
  const [qr, kr, vr, fa, beta, g] = (await linearMany(c, [w.q, w.k, w.v, w.fa, w.b, g1].map((m) => ({ m, x, T })))) as Float32Array[];
  const [z, gb] = await linearMany(c, [{ m: w.fb, x: fa!, T }, ...('full' in w.gate ? [] : [{ m: w.gate.b, x: g!, T }])]);
  const gamma = gb ?? g!;
  const y = new Float32Array(T * P);
  let r0 = 0;
  for (const part of parts) {
    kdaRecurrence(c, p, w, { qr, kr, vr, z, beta, gamma }, r0, part.T, part.state, y);
    r0 += part.T;
  }
  return linear(c, w.o, y, T);
}

/**
 * kdaForward in one chained dispatch (Compute.chainFor): the block's input (when still to compute),
 * the projections of x, the low-rank second halves, each part's KDA block, o_proj, a barrier
 * between the steps; the same kernels on the same numbers as the dispatches below, so the same
 * bytes. Null (nothing done) unless every weight is resident in one kernel memory with each
 * part's state, the gate is K3's bounded one (Kimi Linear's softplus decay runs in JavaScript)
 * and no speculative sweep is recording.
 */
function kdaChained(c: Compute, p: KdaParams, w: KdaWeights, xin: Float32Array | BlockInput, T: number, parts: readonly KdaPart[]): Float32Array | null {
  if (p.gateLowerBound === null || !c.group) return null;
  const states: Float32Array[] = [];
  for (const { state } of parts) {
    if (!state.work || state.sweep) return null;
    states.push(state.S, state.conv, state.work);
  }
  const gate = w.gate, full = 'full' in gate;
  const views = viewsNow([w.q, w.k, w.v, w.fa, w.b, ...('full' in gate ? [gate.full, w.fb] : [gate.a, w.fb, gate.b]), w.o]);
  if (!views) return null;
  // the layer's constants placed in kernel memory first (they outlive the chain)
  const placed = c.placedNear(states[0]!, [w.qConv, w.kConv, w.vConv, w.dtBias, w.oNorm, ...inputConstants(xin)]);
  const ch = placed && c.chainFor(views, [...states, ...placed]);
  if (!ch) return null;
  const [qConv, kConv, vConv, dtBias, oNorm] = placed as Float32Array[];
  try {
    const x = chainInput(ch, xin, placed!.slice(5));
    const H = p.heads, P = H * p.headDim;
    const [qr, kr, vr, fa, beta, g] = views.slice(0, 6).map((v) => ch.matmul(v!, x, T)) as Float32Array[];
    ch.next();
    const z = ch.matmul(views[6]!, fa!, T);
    const gamma = full ? g! : ch.matmul(views[7]!, g!, T);
    ch.next();
    const y = ch.alloc(T * P);
    const A = expALog(w, H);
    const pr = { qr: qr!, kr: kr!, vr: vr!, beta: beta!, gamma }, consts = { qConv, kConv, vConv, dtBias, oNorm };
    let r0 = 0;
    for (const { T: n, state } of parts) {
      ch.kdaBlock(blockArgs(p, consts, state, pr, r0, n, z.subarray(r0 * P, (r0 + n) * P), y.subarray(r0 * P, (r0 + n) * P), A));
      r0 += n;
    }
    const out = ch.next().matmul(views.at(-1)!, y, T, new Float32Array(T * w.o.rows));
    ch.run();
    return out;
  } finally {
    ch.done();
  }
}

/** exp(A_log) per head, in double (the KDA block kernel's A). */
function expALog(w: KdaWeights, H: number): Float64Array {
  const A = new Float64Array(H);
  for (let h = 0; h < H; h++) A[h] = Math.exp(w.aLog[h]!);
  return A;
}

/**
 * Kernels.kdaBlock's arguments for `len` tokens of `state`: the projections' rows [row, row + len),
 * zOrAlpha and y those tokens' rows already; the constant vectors (taps, dt_bias, o_norm) from `k`.
 */
function blockArgs(p: KdaParams, k: Pick<KdaWeights, 'qConv' | 'kConv' | 'vConv' | 'dtBias' | 'oNorm'>, state: KdaState, pr: Record<'qr' | 'kr' | 'vr' | 'beta' | 'gamma', Float32Array>,
  row: number, len: number, zOrAlpha: Float32Array, y: Float32Array, A: Float64Array): KdaBlockArgs {
  const H = p.heads, d = p.headDim, P = H * d;
  const rows = (a: Float32Array, n: number): Float32Array => a.subarray(row * n, (row + len) * n);
  return {
    S: state.S, conv: state.conv, work: state.work!,
    qr: rows(pr.qr, P), kr: rows(pr.kr, P), vr: rows(pr.vr, P), zOrAlpha, b: rows(pr.beta, H), gamma: rows(pr.gamma, P), y,
    qConv: k.qConv, kConv: k.kConv, vConv: k.vConv, dtBias: k.dtBias, A, oNorm: k.oNorm,
    H, d, W: p.convSize, T: len, mode: p.gateLowerBound === null ? 'given' : 'bounded', eps: p.eps, lambda: p.gateLowerBound ?? 0, qScale: 1 / Math.sqrt(d),
  };
}

/** Rows [r0, r0 + T) of the projections through conv, recurrence and gated norm, into y. */
function kdaRecurrence(c: Compute, p: KdaParams, w: KdaWeights, pr: Record<'qr' | 'kr' | 'vr' | 'z' | 'beta' | 'gamma', Float32Array>, r0: number, T: number, state: KdaState, y: Float32Array): void {
  const H = p.heads;
  const d = p.headDim;
  const P = H * d;
  const W = p.convSize;
  const { qr, kr, vr, z, beta, gamma } = pr;
  if (state.work && kdaBlockFused(c, p, w, pr, r0, T, state, y)) return;
  const work = state.work ?? new Float32Array(5 * P + H);
  const q = work.subarray(0, P), k = work.subarray(P, 2 * P), v = work.subarray(2 * P, 3 * P);
  const alpha = work.subarray(3 * P, 4 * P);
  const o = work.subarray(4 * P, 5 * P);
  const betas = work.subarray(5 * P, 5 * P + H);
  const tailLen = (W - 1) * P;
  const qScale = 1 / Math.sqrt(d);
  for (let i = 0; i < T; i++) {
    const t = r0 + i;
    shortConvStep(qr, t * P, w.qConv, state.conv, 0, P, W, q, 0);
    shortConvStep(kr, t * P, w.kConv, state.conv, tailLen, P, W, k, 0);
    shortConvStep(vr, t * P, w.vConv, state.conv, 2 * tailLen, P, W, v, 0);
    l2Heads(q, H, d, qScale);
    l2Heads(k, H, d, 1);
    kdaDecay(p, z, t * P, w.aLog, w.dtBias, alpha);
    for (let h = 0; h < H; h++) betas[h] = sigmoidRef(beta[t * H + h]!); // rounded to f32 by the store
    if (state.sweep) {
      const rec = new Float32Array(4 * P + H);
      rec.set(work.subarray(0, 4 * P));
      rec.set(betas, 4 * P);
      state.sweep.steps.push(rec);
      state.sweep.tails.push(state.conv.slice());
    }
    c.kdaStep(state.S, q, k, v, alpha, betas, o, H, d);
    // Gated RMSNorm per head: o · rsqrt(mean(o²)+eps) · w_on · σ(γ) (docs/spec/ARCHITECTURE.md §3.3 P9; norm first, gate second).
    for (let h = 0; h < H; h++) {
      let ss = 0;
      for (let i = 0; i < d; i++) ss += o[h * d + i]! * o[h * d + i]!;
      const r = 1 / Math.sqrt(ss / d + p.eps);
      for (let i = 0; i < d; i++) {
        const c = h * d + i;
        y[t * P + c] = fr(o[c]! * r) * w.oNorm[i]! * sigmoidRef(gamma[t * P + c]!);
      }
    }
  }
}

/**
 * The same rows through the WebAssembly block kernel (Compute.kdaBlock), when the state lives in
 * kernel memory: one dispatch for all T tokens, or one per token while a sweep records them.
 * Returns false (nothing done) otherwise. Same bytes as the loop in kdaRecurrence.
 */
function kdaBlockFused(c: Compute, p: KdaParams, w: KdaWeights, pr: Record<'qr' | 'kr' | 'vr' | 'z' | 'beta' | 'gamma', Float32Array>, r0: number, T: number, state: KdaState, y: Float32Array): boolean {
  const H = p.heads;
  const P = H * p.headDim;
  const A = expALog(w, H);
  let zOrAlpha = pr.z.subarray(r0 * P, (r0 + T) * P);
  if (p.gateLowerBound === null) {
    // Kimi Linear's softplus gate stays in JavaScript (Math.log1p): the kernel takes α as given
    zOrAlpha = new Float32Array(T * P);
    for (let i = 0; i < T; i++) kdaDecay(p, pr.z, (r0 + i) * P, w.aLog, w.dtBias, zOrAlpha.subarray(i * P, (i + 1) * P));
  }
  const call = (i: number, len: number, out: Float32Array): boolean => c.kdaBlock(blockArgs(p, w, state, pr, r0 + i, len, zOrAlpha.subarray(i * P, (i + len) * P), out, A));
  const yr = y.subarray(r0 * P, (r0 + T) * P);
  if (!state.sweep) return call(0, T, yr);
  for (let i = 0; i < T; i++) {
    if (!call(i, 1, yr.subarray(i * P, (i + 1) * P))) {
      if (i === 0) return false;
      throw new Error('kdaBlock: the state left kernel memory mid-chunk');
    }
    // what the recurrence consumed (q, k, v, α, β) and the tails after the token, as kdaRecurrence records them
    const work = state.work!;
    const rec = new Float32Array(4 * P + H);
    rec.set(work.subarray(0, 4 * P));
    rec.set(work.subarray(5 * P, 5 * P + H), 4 * P);
    state.sweep.steps.push(rec);
    state.sweep.tails.push(state.conv.slice());
  }
  return true;
}

/** Start recording a speculative sweep on `state` (its S and conv tails are copied). */
export function startKdaSweep(state: KdaState): void {
  state.sweep = { S0: state.S.slice(), conv0: state.conv.slice(), steps: [], tails: [] };
}

/**
 * End the sweep keeping its first `keep` tokens: S and the tails become exactly what running only
 * those tokens would have left. S is restored and only the recurrence re-run over the kept tokens,
 * on the vectors the sweep recorded (same inputs, same operations: same bytes; no weight read).
 */
export function endKdaSweep(c: Compute, p: KdaParams, state: KdaState, keep: number): void {
  const sw = state.sweep;
  state.sweep = null;
  if (!sw) throw new Error('endKdaSweep without startKdaSweep');
  if (keep >= sw.steps.length) return;
  const H = p.heads;
  const d = p.headDim;
  const P = H * d;
  state.S.set(sw.S0);
  state.conv.set(keep > 0 ? sw.tails[keep - 1]! : sw.conv0);
  const work = state.work ?? new Float32Array(5 * P + H);
  for (let t = 0; t < keep; t++) {
    const s = sw.steps[t]!;
    work.set(s.subarray(0, 4 * P), 0);
    work.set(s.subarray(4 * P), 5 * P);
    c.kdaStep(state.S, work.subarray(0, P), work.subarray(P, 2 * P), work.subarray(2 * P, 3 * P), work.subarray(3 * P, 4 * P), work.subarray(5 * P, 5 * P + H), work.subarray(4 * P, 5 * P), H, d);
  }
}
