// Sampling under a constraint, exactly as if the ids not allowed had logit -Infinity before the
// usual chain (penalties, bias, top-k, top-p, min-p, temperature). Shortcuts where that is
// exact: the first choice (argmax or draw) is tried as it is; when the state allows few ids and
// nothing in the chain depends on the other ids (no penalties, no bias), the chain runs on just
// those ids' logits (the same order, the same one draw, the same id as on the masked vector);
// untruncated sampling draws again a few times before masking (exact by rejection); greedy
// removes refused candidates one by one. Otherwise the mask is applied to a copy (the caller's
// logits stay as they were: the prefix cache holds them).

import type { Sampler } from '../sampling.js';
import type { TokenConstraint } from './constraint.js';

/** Greedy candidates tried one by one before the whole mask is built. */
const GREEDY_TRIES = 4;
/** Draws after a refused one before the whole mask is built (untruncated sampling). */
const REDRAWS = 8;

export function sampleConstrained(sampler: Sampler, logits: Float32Array, history: readonly number[], V: number, c: TokenConstraint, left: number): number {
  const o = sampler.opts;
  const plainChain = !sampler.bias && o.repetitionPenalty === 1 && o.presencePenalty === 0 && o.frequencyPenalty === 0;
  const untruncated = (o.topK === 0 || o.topK >= V) && o.topP >= 1 && o.minP === 0;
  if (sampler.greedy || untruncated) {
    const id = sampler.sample(logits, history, V);
    if (c.allows(id, left)) return id;
  }
  if (sampler.greedy && plainChain && c.best) return c.best(logits, left);
  const few = plainChain ? (c.allowed?.(left) ?? null) : null;
  if (few) {
    // top-k sorts the candidates when k is below their number: pad with -Infinity so that it
    // sorts here too (the masked vector has more candidates than k)
    const n = o.topK > 0 && o.topK < V && o.topK >= few.length ? o.topK + 1 : few.length;
    const sub = new Float32Array(n).fill(-Infinity);
    for (let k = 0; k < few.length; k++) sub[k] = logits[few[k]!]!;
    return few[sampler.sample(sub, [], n)]!;
  }
  if (sampler.greedy) {
    const work = logits.slice(0, V);
    for (let i = 1; i < GREEDY_TRIES; i++) {
      const id = sampler.sample(work, history, V);
      if (c.allows(id, left)) return id;
      work[id] = -Infinity;
    }
    c.mask(work, left);
    return sampler.sample(work, history, V);
  }
  if (untruncated && plainChain) {
    const id = redraw(sampler, logits, V, c, left);
    if (id >= 0) return id;
  }
  const work = logits.slice(0, V);
  c.mask(work, left);
  return sampler.sample(work, history, V);
}

/** Up to REDRAWS more draws from softmax(logits / T) (no penalties or bias in the chain); -1 when none is allowed. */
function redraw(sampler: Sampler, logits: Float32Array, V: number, c: TokenConstraint, left: number): number {
  const t = sampler.opts.temperature;
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (logits[i]! > max) max = logits[i]!;
  const cum = new Float64Array(V);
  let sum = 0;
  for (let i = 0; i < V; i++) cum[i] = sum += logits[i] === -Infinity ? 0 : Math.exp((logits[i]! - max) / t);
  for (let k = 0; k < REDRAWS; k++) {
    const u = sampler.rng.nextFloat() * sum;
    let lo = 0;
    let hi = V - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (u < cum[mid]!) hi = mid;
      else lo = mid + 1;
    }
    if (c.allows(lo, left)) return lo;
  }
  return -1;
}
