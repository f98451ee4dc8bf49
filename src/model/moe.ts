// Mixture of experts: plain (K2, Kimi Linear; docs/spec/ARCHITECTURE.md §1.5) and K3's latent MoE with its
// norm (docs/spec/ARCHITECTURE.md §4.5). Tokens of a chunk are routed first; each chosen expert is then fetched once and
// applied to every token that chose it; each token's weighted sum is accumulated in router order,
// so a token's numbers do not depend on the other tokens of the chunk.
//
// Overlap (issue 9): the chosen experts' reads start the moment the router has chosen; the shared
// expert (launched with the router's step, its workers going on while this thread routes), the
// lookahead guess for the next MoE layer and the already resident experts are computed while they
// are in flight. None of this changes a number: each product is the same canonical dot product
// whenever it runs, and the sums keep their order.

import type { Mat } from '../store/mat.js';
import type { Compute } from '../graph/compute.js';
import { graphNear, onGraph, type Graph } from '../graph/graph.js';
import { addInPlace, linear, linearBeta, type Activation, type MlpWeights } from './ops.js';
import { route, type RouterConfig, type Routing } from './router.js';
import { inputConstants, type BlockInput } from './block-input.js';

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

/** MoE(x) for T rows of x [T, D] (or of the input still to compute, the head's first step); returns [T, D]. */
export async function moeForward(c: Compute, p: MoeParams, w: MoeWeights, xin: Float32Array | BlockInput, T: number, fetch: ExpertFetch): Promise<Float32Array> {
  const g = headGraph(c, w, xin, fetch);
  try {
    // Router logits and (K3) the latent z = W_down x both read x: one step. The routed experts act
    // on z (K3) or on x (plain MoE); the router always reads x.
    const D = w.gate.cols;
    const x = g.input(xin);
    const logits = g.matmul(w.gate, x, T);
    const z = w.latent ? g.matmul(w.latent.down, x, T) : x;
    // The shared expert goes on past start() (a chain's workers, or the host at run()) while this
    // thread routes, starts the experts' reads and stages their graph. Its numbers are the same
    // wherever it runs: each product is the canonical dot.
    g.overlap();
    const s = w.shared ? g.gatedMlps([{ w: w.shared, x, T, y: g.alloc(T * D) }], p.act.kind, p.act.situBeta, linearBeta(p.act))[0]! : null;
    await g.start();
    const routing = route(p, logits, w.bias, T);
    const users = new Map<number, number[]>(); // expert -> the tokens that chose it, ascending
    for (let t = 0; t < T; t++) for (const e of routing.ids[t]!) (users.get(e) ?? users.set(e, []).get(e)!).push(t);
    const lend = fetch.begin([...users.keys()].sort((a, b) => a - b)); // the reads start here

    // Meanwhile: guess the next MoE layer's experts from this layer's input (its router applied to
    // x; the guess only decides what is read ahead).
    const next = await fetch.next();
    if (next) {
      const guess = route(p, await linear(c, next.gate, x, T), next.bias, T);
      next.guess([...new Set(guess.ids.flatMap((r) => [...r]))].sort((a, b) => a - b));
    }
    await g.run(); // (on the host: the shared expert now, while the reads are in flight)
    const y = await routedExperts(c, p, w, lend, users, routing, z, T);
    g.join();
    return s ? addInPlace(y, s) : y;
  } finally {
    g.done();
  }
}

/**
 * The graph of the block's calls that read only x: chained in the router's kernel memory (with the
 * latent norm routedExperts takes placed there too: a chain frees what is allocated after its
 * start) only once the store allocates no more weight memory (every pinned piece is read then),
 * which would lie inside its launched chain; on the host before.
 */
function headGraph(c: Compute, w: MoeWeights, xin: Float32Array | BlockInput, fetch: ExpertFetch): Graph {
  return graphNear(c, fetch.mayAllocate?.() === false ? w.gate : null, [...(w.latent?.norm ? [w.latent.norm] : []), ...inputConstants(xin)]);
}

/**
 * Σ_j weight_tj · expert_tj(z_t) per token in router order, latent-normed and brought up to D (K3),
 * [T, D]. Each batch the lending gives runs on a graph of its own; a batch of every expert
 * (lend.ready) takes the sum and the up product in the same graph, else its outputs are kept on
 * the host for a last graph. Same bytes either way (moe_combine is the sum's and norm's reference order).
 */
async function routedExperts(c: Compute, p: MoeParams, w: MoeWeights, lend: LendExperts, users: Map<number, number[]>, routing: Routing, z: Float32Array, T: number): Promise<Float32Array> {
  const K = p.topK, D = w.gate.cols, zw = w.latent ? w.latent.down.rows : D;
  const ys: Float32Array[] = new Array(T * K); // (t, j) -> the row of expert ids[t][j]'s output for token t
  const wts = new Float32Array(T * K);
  for (let t = 0; t < T; t++) wts.set(routing.weights[t]!.subarray(0, K), t * K);
  const consts = w.latent?.norm ? [w.latent.norm] : [];
  const sumUp = (g: Graph): Float32Array => {
    const routed = g.next().moeCombine(ys, wts, T, K, zw, w.latent?.norm ?? null, p.eps);
    const y = new Float32Array(T * D);
    if (w.latent) g.next().matmul(w.latent.up, routed, T, y);
    else g.next().host(() => y.set(routed));
    return y;
  };
  let out: Float32Array | null = null;
  await lend(async (batch) => {
    const whole = lend.ready === true; // (else the batch's weights are lent only during this call)
    const mats = [...batch.flatMap((e) => [e.w.gate, e.w.up, e.w.down]), ...(whole && w.latent ? [w.latent.up] : [])];
    out = await onGraph(c, mats, consts, (g) => {
      const xs = batch.map(({ expert }) => (T === 1 ? z : g.gatherRows(z, users.get(expert)!, zw)));
      const outs = g.next().gatedMlps(batch.map(({ expert, w: ew }, k) => {
        const n = users.get(expert)!.length;
        return { w: ew, x: xs[k]!, T: n, y: whole ? g.alloc(n * zw) : new Float32Array(n * zw) };
      }), p.act.kind, p.act.situBeta, linearBeta(p.act));
      batch.forEach(({ expert }, k) => users.get(expert)!.forEach((t, i) => (ys[t * K + routing.ids[t]!.indexOf(expert)] = outs[k]!.subarray(i * zw, (i + 1) * zw))));
      return whole ? sumUp(g) : null;
    });
  });
  return out ?? (await onGraph(c, w.latent ? [w.latent.up] : [], consts, sumUp));
}
