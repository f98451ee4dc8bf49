// Mixture of experts: plain (K2, Kimi Linear; docs/spec/ARCHITECTURE.md §1.5) and K3's latent MoE with its
// norm (docs/spec/ARCHITECTURE.md §4.5). Tokens of a chunk are routed first; each chosen expert is then fetched once and
// applied to every token that chose it; each token's weighted sum is accumulated in router order,
// so a token's numbers do not depend on the other tokens of the chunk.
//
// Overlap (issue 9): the chosen experts' reads start the moment the router has chosen; the shared
// expert, the lookahead guess for the next MoE layer and the already resident experts are
// computed while they are in flight; with nothing to read, the shared expert joins the routed
// experts' dispatches instead. None of this changes a number: each product is the same canonical
// dot product whenever it runs, and the sums keep their order.

import { viewsNow, type Mat } from '../store/mat.js';
import type { Compute } from '../graph/compute.js';
import { addInPlace, gatedMlp, gatedMlpMany, linear, linearBeta, linearMany, rmsNorm, type Activation, type GatedMlpItem, type MlpWeights } from './ops.js';
import { route, type RouterConfig, type Routing } from './router.js';
import type { WeightView } from '../formats/weight.js';
import { blockInput, chainInput, inputConstants, type BlockInput } from './block-input.js';

export interface MoeWeights {
  gate: Mat;
  bias: Float32Array;
  shared: MlpWeights | null;
  /** K3 latent MoE: down [latent, D], up [D, latent], norm [latent]. */
  latent: { down: Mat; up: Mat; norm: Float32Array | null } | null;
}

export interface MoeParams extends RouterConfig {
  act: Activation;
  eps: number;
}

/** Calls `use` with batches of the experts begun (as many as the cache holds at once), each
 *  expert's weights valid only during that call. `ready`: every expert begun is in memory already
 *  (one batch, nothing to read). */
export type LendExperts = ((use: (batch: { expert: number; w: MlpWeights }[]) => Promise<void>) => Promise<void>) & { ready?: boolean };

/** Where a MoE block's routed experts come from. */
export interface ExpertFetch {
  /** Called once per MoE block with every distinct expert the chunk chose, ascending: starts their reads now. */
  begin(ids: number[]): LendExperts;
  /**
   * Lookahead: the next MoE layer's router and bias, and where guesses of its experts go, when
   * guessing costs no weight read (its router is resident); null otherwise.
   */
  next(): Promise<{ gate: Mat; bias: Float32Array; guess(ids: number[]): void } | null>;
  /** Whether lending experts may allocate weight memory (a slot's first use, a piece's first read). */
  mayAllocate?(): boolean;
}

/** MoE(x) for T rows of x [T, D] (or of the input still to compute, which the head chain computes first); returns [T, D]. */
export async function moeForward(c: Compute, p: MoeParams, w: MoeWeights, xin: Float32Array | BlockInput, T: number, fetch: ExpertFetch): Promise<Float32Array> {
  // (not while lending may allocate weight memory: it would lie inside the launched chain)
  const head = fetch.mayAllocate?.() === false ? moeHeadChained(c, p, w, xin, T) : null;
  try {
    return await moeRest(c, p, w, head ? head.x : blockInput(c, xin), T, fetch, head);
  } finally {
    head?.done();
  }
}

async function moeRest(c: Compute, p: MoeParams, w: MoeWeights, x: Float32Array, T: number, fetch: ExpertFetch, head: MoeHead | null): Promise<Float32Array> {
  const D = w.gate.cols;
  // Router logits and (K3) the latent z = W_down x both read x: one batch (or the head chain's
  // first step). The routed experts act on z (K3) or on x (plain MoE); the router always reads x.
  const [logits, zl] = head ? [head.logits, head.z] : await linearMany(c, w.latent ? [{ m: w.gate, x, T }, { m: w.latent.down, x, T }] : [{ m: w.gate, x, T }]);
  const routing = route(p, logits!, w.bias, T);
  const z = zl ?? x;
  const zw = w.latent ? w.latent.down.rows : D;

  const users = new Map<number, number[]>();
  for (let t = 0; t < T; t++) for (const e of routing.ids[t]!) (users.get(e) ?? users.set(e, []).get(e)!).push(t);
  const chosen = [...users.keys()].sort((a, b) => a - b);
  const lend = fetch.begin(chosen); // the reads start here

  // Meanwhile: guess the next MoE layer's experts from this layer's input (its router applied to
  // x; the guess only decides what is read ahead), and the shared expert.
  const next = await fetch.next();
  if (next) {
    const g = route(p, await linear(c, next.gate, x, T), next.bias, T);
    next.guess([...new Set(g.ids.flatMap((r) => [...r]))].sort((a, b) => a - b));
  }
  // The shared expert: now, while reads are in flight; else (every expert in memory) in the
  // first batch's dispatches, where its products (bound by memory bandwidth) and the routed ones
  // (bound by arithmetic) share the threads. Its numbers are the same either way.
  let sharedLater = !head && w.shared !== null && lend.ready === true;
  let s = w.shared && !head && !sharedLater ? await gatedMlp(c, w.shared, x, T, p.act) : null;

  // Per (token, slot) expert outputs, then summed per token in router order.
  const outOf = new Map<number, Float32Array>(); // key t*topK+j -> [zw]
  let chained: Float32Array | null = null;
  await lend(async (batch) => {
    // every expert in memory (one batch): the rest of the block in one chained dispatch, if it can
    if (lend.ready) chained = moeTailChained(c, p, w, batch, users, routing, x, z, T, sharedLater);
    if (chained) return;
    // The batch's gated MLPs (the shared expert's first, when it was left for here): one dispatch
    // of their gate and up products, one of activations, one of down products, each product the
    // same canonical dots as alone.
    const mlps: GatedMlpItem[] = batch.map(({ expert, w: ew }) => {
      const toks = users.get(expert)!;
      // one token's input is z itself (a single row); several are gathered
      return { w: ew, x: T === 1 ? z : gatherRows(z, toks, zw), T: toks.length };
    });
    if (sharedLater) mlps.unshift({ w: w.shared!, x, T });
    const ys = await gatedMlpMany(c, mlps, p.act);
    if (sharedLater) {
      s = ys.shift()!;
      sharedLater = false;
    }
    batch.forEach(({ expert }, k) => {
      users.get(expert)!.forEach((t, i) => {
        const j = routing.ids[t]!.indexOf(expert);
        outOf.set(t * p.topK + j, ys[k]!.subarray(i * zw, (i + 1) * zw));
      });
    });
  });
  if (head) s = head.shared();
  if (chained) {
    if (s) addInPlace(chained, s); // (moeTailChained's own order: the shared expert's output added last)
    return chained;
  }
  if (sharedLater) s = await gatedMlp(c, w.shared!, x, T, p.act); // (nothing was lent)
  const routed = new Float32Array(T * zw);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < p.topK; j++) addScaled(routed, t * zw, outOf.get(t * p.topK + j)!, routing.weights[t]![j]!, zw);
  }

  let out: Float32Array;
  if (w.latent) {
    const normed = w.latent.norm ? rmsNorm(routed, T, zw, w.latent.norm, p.eps) : routed;
    out = await linear(c, w.latent.up, normed, T);
  } else {
    out = routed;
  }
  if (s) addInPlace(out, s);
  return out;
}

/** The head chain's outputs (moeHeadChained): arena arrays, valid until done(). */
interface MoeHead {
  /** The block's input (computed in the chain when it was still to compute). */
  x: Float32Array;
  logits: Float32Array;
  z: Float32Array | null;
  /** The shared expert's output, once the workers have finished it (Chain.join). */
  shared(): Float32Array;
  done(): void;
}

/**
 * The block's products that read only x, as one chained dispatch launched before routing
 * (Chain.launch): the router logits and (K3) the latent z in its first step, which every thread
 * runs; the shared expert then goes on in the workers while this thread routes, starts the
 * experts' reads and stages their chain (JavaScript that runs cold after the weight streams, and
 * that the workers otherwise sat out), until the next dispatch joins it. Where experts are read,
 * the shared expert still overlaps the reads. Same bytes: each product is the canonical dot
 * wherever it runs, and the shared output is added where it was. Null (the step-by-step path)
 * without kernels, without a shared expert, or when a weight is not resident.
 */
function moeHeadChained(c: Compute, p: MoeParams, w: MoeWeights, xin: Float32Array | BlockInput, T: number): MoeHead | null {
  if (!c.group || !w.shared) return null;
  const views = viewsNow([w.gate, ...(w.latent ? [w.latent.down] : []), w.shared.gate, w.shared.up, w.shared.down]);
  if (!views) return null;
  // the latent norm the tail chain uses and the input's constants, placed now: a chain frees what
  // is allocated after its start
  const consts = inputConstants(xin);
  const placed = c.placedNear(views[0]!.data, [...(w.latent?.norm ? [w.latent.norm] : []), ...consts]);
  if (!placed) return null;
  const ch = c.chainFor(views, placed);
  if (!ch) return null;
  try {
    const x = chainInput(ch, xin, placed.slice(placed.length - consts.length));
    const logits = ch.matmul(views[0]!, x, T);
    const z = w.latent ? ch.matmul(views[1]!, x, T) : null;
    const k = views.length - 3;
    const [y] = ch.next().gatedMlps([{ gate: views[k]!, up: views[k + 1]!, down: views[k + 2]!, x, T }], p.act.kind, p.act.situBeta, linearBeta(p.act));
    ch.launch(x === xin ? 1 : 2); // (returns once the router's step is done)
    return { x, logits, z, shared: () => (ch.join(), y!), done: () => ch.done() };
  } catch (e) {
    ch.done();
    throw e;
  }
}

/**
 * The block after routing in one chained dispatch (Compute.chainFor), when every weight is
 * resident in one kernel memory: the batch's gated MLPs (with the shared expert's when
 * `withShared`), the routed sum and latent norm (moe_combine: addScaled and rmsNorm's
 * operations in their order), the latent up product; the shared expert's output added last, as
 * below. Same bytes as the step-by-step path; null (nothing done) when it cannot chain.
 */
function moeTailChained(c: Compute, p: MoeParams, w: MoeWeights, batch: readonly { expert: number; w: MlpWeights }[], users: Map<number, number[]>,
  routing: Routing, x: Float32Array, z: Float32Array, T: number, withShared: boolean): Float32Array | null {
  if (!c.group) return null;
  const mlps = [...(withShared ? [w.shared!] : []), ...batch.map((e) => e.w)];
  const views = viewsNow([...mlps.flatMap((g) => [g.gate, g.up, g.down]), ...(w.latent ? [w.latent.up] : [])]);
  if (!views) return null;
  const norm = w.latent?.norm ? c.placedNear(views[0]!.data, [w.latent.norm]) : null; // (before the chain: it outlives it)
  if (w.latent?.norm && !norm) return null;
  const ch = c.chainFor(views, norm ?? []);
  if (!ch) return null;
  try {
    const zw = w.latent ? w.latent.down.rows : w.gate.cols, D = w.gate.cols, K = p.topK;
    const v = (i: number): WeightView => views[i]!;
    const shared = withShared ? new Float32Array(T * D) : null;
    // several tokens: each expert's rows of z gathered by the threads in a first step when z lies
    // in kernel memory (the head chain's output), else here
    const inChain = T > 1 && ch.holds(z);
    const items = mlps.map((_, k) => {
      if (withShared && k === 0) return { gate: v(0), up: v(1), down: v(2), x, T, y: shared! };
      const toks = users.get(batch[k - (withShared ? 1 : 0)]!.expert)!;
      return { gate: v(3 * k), up: v(3 * k + 1), down: v(3 * k + 2), x: T === 1 ? z : inChain ? ch.gatherRows(z, toks, zw) : gatherRows(z, toks, zw), T: toks.length };
    });
    if (inChain) ch.next();
    const ys = ch.gatedMlps(items, p.act.kind, p.act.situBeta, linearBeta(p.act));
    // each (token, slot)'s expert output row, by its byte offset: the i-th row of its expert's
    // output for the token that is i-th among the expert's users (users lists tokens ascending)
    const at = new Map(batch.map((e, k) => [e.expert, ys[k + (withShared ? 1 : 0)]!.byteOffset]));
    const seen = new Map<number, number>(); // rows of each expert taken so far
    const rows = new Uint32Array(T * K); // (byte offsets: past 2 GiB in a large kernel memory)
    const wts = new Float32Array(T * K);
    for (let t = 0; t < T; t++) {
      const ids = routing.ids[t]!, ws = routing.weights[t]!;
      for (let j = 0; j < K; j++) {
        const e = ids[j]!, i = seen.get(e) ?? 0;
        seen.set(e, i + 1);
        rows[t * K + j] = at.get(e)! + 4 * i * zw;
        wts[t * K + j] = ws[j]!;
      }
    }
    const routed = ch.next().moeCombine(rows, wts, T, K, zw, norm?.[0] ?? null, p.eps);
    const out = w.latent ? ch.next().matmul(views.at(-1)!, routed, T, new Float32Array(T * D)) : null;
    ch.run();
    const y = out ?? routed.slice();
    if (shared) addInPlace(y, shared);
    return y;
  } finally {
    ch.done();
  }
}

/** acc[o + i] = f32(acc[o + i] + f32(w · y[i])) for i < n. A function of its own, so that it is
 *  optimized apart from moeForward (which V8 deoptimizes now and then: it has many shapes). */
function addScaled(acc: Float32Array, o: number, y: Float32Array, w: number, n: number): void {
  for (let i = 0; i < n; i++) acc[o + i] = acc[o + i]! + Math.fround(w * y[i]!);
}

/** The rows `toks` of z [*, zw], back to back. */
function gatherRows(z: Float32Array, toks: readonly number[], zw: number): Float32Array {
  const a = new Float32Array(toks.length * zw);
  for (let i = 0; i < toks.length; i++) a.set(z.subarray(toks[i]! * zw, (toks[i]! + 1) * zw), i * zw);
  return a;
}
