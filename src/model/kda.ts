// Kimi Delta Attention (docs/spec/ARCHITECTURE.md §3.3, §4.3; docs/spec/K3.md §6.3). Prefill runs the exact recurrence
// token by token (not the chunked form), so prefill and decode give the same bytes.
//
// State per layer: S [H, dk, dk] f32 (rows = key channel, columns = value channel) and the last
// W-1 pre-convolution inputs of q, k, v (conv tails), zeros at the start of a sequence.

import type { Mat } from '../store/mat.js';
import { expRef, sigmoidRef, type Compute, type KdaBlockArgs } from '../graph/compute.js';
import { graphFor, readResident, type Graph } from '../graph/graph.js';
import { inputConstants, type BlockInput } from './block-input.js';

export { shortConvStep } from '../graph/reference.js';

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
 * a weight again (issue 9): S and the conv tails from before the sweep, and each block call's
 * arguments with copies of its rows (the projections after x, the decay's input), in order.
 */
export interface KdaSweep {
  S0: Float32Array;
  conv0: Float32Array;
  calls: KdaBlockArgs[];
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

/** One sequence's rows of a batched KDA call: `T` consecutive rows advancing `state`. */
export interface KdaPart {
  T: number;
  state: KdaState;
}

/**
 * KDA for T tokens of normalized input x [T, D], advancing `state`. Returns [T, D]. Given parts
 * (several sequences' rows back to back), the projections run once over all rows (each weight
 * read once) and each part's block on its own state; each row's numbers are as if alone. One
 * graph (graph/graph.ts): the block's input, the products of x, the low-rank second halves, each
 * part's KDA block (kda_block, or its reference kdaBlockRef), o_proj.
 */
export async function kdaForward(c: Compute, p: KdaParams, w: KdaWeights, xin: Float32Array | BlockInput, T: number, state: KdaState | readonly KdaPart[]): Promise<Float32Array> {
  const H = p.heads, P = H * p.headDim;
  const parts = 'S' in state ? [{ T, state }] : state;
  const gate = w.gate, g1 = 'full' in gate ? gate.full : gate.a;
  await readResident([w.q, w.k, w.v, w.fa, w.b, g1, w.fb, ...('full' in gate ? [] : [gate.b]), w.o]);
  const near = parts.flatMap(({ state: s }) => [s.S, s.conv, ...(s.work ? [s.work] : [])]);
  const g = graphFor(c, near, [w.qConv, w.kConv, w.vConv, w.dtBias, w.oNorm, ...inputConstants(xin)]);
  try {
    const x = g.input(xin);
    const [qr, kr, vr, fa, beta, gg] = [w.q, w.k, w.v, w.fa, w.b, g1].map((m) => g.matmul(m, x, T)) as Float32Array[];
    g.next();
    const z = g.matmul(w.fb, fa!, T);
    const gamma = 'full' in gate ? gg! : g.matmul(gate.b, gg!, T);
    g.next();
    const zOrAlpha = p.gateLowerBound === null ? softplusDecay(g, p, w, z, T) : z;
    const y = g.alloc(T * P);
    const A = expALog(w, H), pr = { qr: qr!, kr: kr!, vr: vr!, beta: beta!, gamma };
    const sweeps: [KdaSweep, KdaBlockArgs][] = [];
    let r0 = 0;
    for (const { T: n, state: s } of parts) {
      const a = blockArgs(p, w, s, pr, r0, n, zOrAlpha.subarray(r0 * P, (r0 + n) * P), y.subarray(r0 * P, (r0 + n) * P), A);
      g.kdaBlock(a);
      if (s.sweep) sweeps.push([s.sweep, a]);
      r0 += n;
    }
    const out = g.next().matmul(w.o, y, T, new Float32Array(T * w.o.rows));
    await g.run();
    // what a rollback re-runs: the block's rows, copied out of the graph's arrays
    for (const [sw, a] of sweeps) sw.calls.push({ ...a, qr: a.qr.slice(), kr: a.kr.slice(), vr: a.vr.slice(), zOrAlpha: a.zOrAlpha.slice(), b: a.b.slice(), gamma: a.gamma.slice() });
    return out;
  } finally {
    g.done();
  }
}

/** Kimi Linear's α = exp(−exp(A_log)·softplus(z + dt_bias)) for T rows, a JavaScript step (Math.log1p: no kernel has it). */
function softplusDecay(g: Graph, p: KdaParams, w: KdaWeights, z: Float32Array, T: number): Float32Array {
  const P = p.heads * p.headDim;
  const alpha = g.alloc(T * P);
  g.host(() => {
    for (let i = 0; i < T; i++) kdaDecay(p, z, i * P, w.aLog, w.dtBias, alpha.subarray(i * P, (i + 1) * P));
  });
  g.next();
  return alpha;
}

/** exp(A_log) per head, in double (the KDA block kernel's A). */
function expALog(w: KdaWeights, H: number): Float64Array {
  const A = new Float64Array(H);
  for (let h = 0; h < H; h++) A[h] = Math.exp(w.aLog[h]!);
  return A;
}

/**
 * The KDA block's arguments for `len` tokens of `state`: the projections' rows [row, row + len),
 * zOrAlpha and y those tokens' rows already; the constant vectors (taps, dt_bias, o_norm) from `k`.
 */
function blockArgs(p: KdaParams, k: Pick<KdaWeights, 'qConv' | 'kConv' | 'vConv' | 'dtBias' | 'oNorm'>, state: KdaState, pr: Record<'qr' | 'kr' | 'vr' | 'beta' | 'gamma', Float32Array>,
  row: number, len: number, zOrAlpha: Float32Array, y: Float32Array, A: Float64Array): KdaBlockArgs {
  const H = p.heads, d = p.headDim, P = H * d;
  const rows = (a: Float32Array, n: number): Float32Array => a.subarray(row * n, (row + len) * n);
  return {
    S: state.S, conv: state.conv, work: state.work ?? new Float32Array(5 * P + H),
    qr: rows(pr.qr, P), kr: rows(pr.kr, P), vr: rows(pr.vr, P), zOrAlpha, b: rows(pr.beta, H), gamma: rows(pr.gamma, P), y,
    qConv: k.qConv, kConv: k.kConv, vConv: k.vConv, dtBias: k.dtBias, A, oNorm: k.oNorm,
    H, d, W: p.convSize, T: len, mode: p.gateLowerBound === null ? 'given' : 'bounded', eps: p.eps, lambda: p.gateLowerBound ?? 0, qScale: 1 / Math.sqrt(d),
  };
}

/** Start recording a speculative sweep on `state` (its S and conv tails are copied). */
export function startKdaSweep(state: KdaState): void {
  state.sweep = { S0: state.S.slice(), conv0: state.conv.slice(), calls: [] };
}

/**
 * End the sweep keeping its first `keep` tokens: S and the tails become exactly what running only
 * those tokens would have left. S and the tails are restored and the block re-run over the kept
 * tokens' recorded rows (same inputs, same operations: same bytes; no weight read).
 */
export function endKdaSweep(c: Compute, p: KdaParams, state: KdaState, keep: number): void {
  const sw = state.sweep;
  state.sweep = null;
  if (!sw) throw new Error('endKdaSweep without startKdaSweep');
  if (keep >= sw.calls.reduce((n, a) => n + a.T, 0)) return;
  const P = p.heads * p.headDim;
  state.S.set(sw.S0);
  state.conv.set(sw.conv0);
  const work = state.work ?? new Float32Array(5 * P + p.heads);
  for (const a of sw.calls) {
    const n = Math.min(keep, a.T);
    if (n <= 0) break;
    c.kdaBlock({ ...a, S: state.S, conv: state.conv, work, T: n, y: new Float32Array(n * P) });
    keep -= n;
  }
}
