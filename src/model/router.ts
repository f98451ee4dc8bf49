// MoE router, "noaux_tc" with sigmoid scores (docs/spec/ARCHITECTURE.md §1.5, docs/spec/K3.md §6.5):
// scores s = σ(W x); selection on c = s + bias (groups limit first); weights from the UNBIASED s
// (unless the Kimi Linear HF quirk is switched on), renormalized, then scaled.
// Ties break by the lower expert index; the returned order is descending selection score.

import { sigmoid } from './ops.js';

const fr = Math.fround;

export interface RouterConfig {
  experts: number;
  topK: number;
  groups: number;
  topkGroup: number;
  renormalize: boolean;
  scaling: number;
  biasedWeights: boolean;
}

export interface Routing {
  /** [T][topK] expert ids, in router order. */
  ids: Int32Array[];
  /** [T][topK] weights matching ids. */
  weights: Float32Array[];
}

/** Route T tokens from their router logits [T, E] (gate · x, canonical dots) and the correction bias [E]. */
export function route(cfg: RouterConfig, logits: Float32Array, bias: Float32Array, T: number): Routing {
  const E = cfg.experts;
  const ids: Int32Array[] = [];
  const weights: Float32Array[] = [];
  const s = new Float32Array(E);
  const c = new Float32Array(E);
  for (let t = 0; t < T; t++) {
    for (let e = 0; e < E; e++) {
      s[e] = sigmoid(logits[t * E + e]!);
      c[e] = s[e]! + bias[e]!;
    }
    const sel = selectTopK(cfg, c);
    const w = new Float32Array(cfg.topK);
    let sum = 0;
    for (let j = 0; j < cfg.topK; j++) {
      w[j] = cfg.biasedWeights ? c[sel[j]!]! : s[sel[j]!]!;
      sum += w[j]!;
    }
    for (let j = 0; j < cfg.topK; j++) {
      const norm = cfg.renormalize && cfg.topK > 1 ? w[j]! / (sum + 1e-20) : w[j]!;
      w[j] = fr(norm) * cfg.scaling;
    }
    ids.push(sel);
    weights.push(w);
  }
  return { ids, weights };
}

/** Indices of the topK largest c (after group limiting), descending, ties to the lower index. */
export function selectTopK(cfg: Pick<RouterConfig, 'experts' | 'topK' | 'groups' | 'topkGroup'>, c: Float32Array): Int32Array {
  const E = cfg.experts;
  let allowed: Uint8Array | null = null;
  if (cfg.groups > 1 && cfg.topkGroup < cfg.groups) {
    // Group score = sum of the two largest c in the group; keep topkGroup groups; others are −inf.
    const per = E / cfg.groups;
    const gs = new Float64Array(cfg.groups);
    for (let g = 0; g < cfg.groups; g++) {
      let m1 = -Infinity, m2 = -Infinity;
      for (let e = g * per; e < (g + 1) * per; e++) {
        const v = c[e]!;
        if (v > m1) {
          m2 = m1;
          m1 = v;
        } else if (v > m2) m2 = v;
      }
      gs[g] = per > 1 ? m1 + m2 : m1;
    }
    const order = [...gs.keys()].sort((a, b) => gs[b]! - gs[a]! || a - b);
    allowed = new Uint8Array(E);
    for (const g of order.slice(0, cfg.topkGroup)) allowed.fill(1, g * per, (g + 1) * per);
  }
  // The K best by insertion, in one pass (a sort of all E with a comparator took 140 µs a layer
  // at E = 896, this takes 2.7; Intel Xeon): an expert goes before every kept one with a smaller
  // c; among equal c the earlier expert, met first, stays first.
  const K = cfg.topK;
  const top = new Int32Array(K);
  let n = 0;
  for (let e = 0; e < E; e++) {
    if (allowed && !allowed[e]) continue;
    const v = c[e]!;
    if (n === K && !(v > c[top[K - 1]!]!)) continue;
    let j = n < K ? n++ : K - 1;
    for (; j > 0 && v > c[top[j - 1]!]!; j--) top[j] = top[j - 1]!;
    top[j] = e;
  }
  return n === K ? top : top.slice(0, n);
}
