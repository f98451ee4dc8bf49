// The speculative-sampling acceptance rule (Leviathan et al. 2023; Chen et al. 2023) for a
// drafter that proposes one token with certainty (q = a point mass on the draft d): accept d
// with probability min(1, p(d)/q(d)) = p(d); on refusal draw from the residual max(0, p - q),
// normalized, which is p without d. Each emitted id is then distributed exactly as the sampler's
// p, so speculation does not change the output distribution. The draws come from the sampler's
// seeded generator: a given seed gives the same text every run.

import type { Sampler } from './sampling.js';
import type { Choice } from './spec.js';

/** Decide draft `draft` at a position with these logits, for sampler `s` (history: ids seen, for penalties). */
export function acceptDraft(s: Sampler, logits: Float32Array, draft: number, history: readonly number[], V: number): Choice {
  const { ids, probs } = s.distribution(logits, history, V);
  if (s.greedy) return { id: ids[0]!, accepted: ids[0] === draft };
  const at = ids.indexOf(draft);
  const pd = at < 0 ? 0 : probs[at]!;
  if (s.rng.nextFloat() < pd) return { id: draft, accepted: true };
  // residual: p without the draft, renormalized (in the distribution's order, as Sampler.sample)
  const rest = 1 - pd;
  const u = s.rng.nextFloat() * rest;
  let cum = 0;
  let last = -1;
  for (let i = 0; i < ids.length; i++) {
    if (i === at || probs[i]! === 0) continue;
    cum += probs[i]!;
    last = i;
    if (u < cum) return { id: ids[i]!, accepted: false };
  }
  // rounding left u above the sum: the last id with a non-zero probability (the draft if it is the only one)
  return { id: last >= 0 ? ids[last]! : draft, accepted: last < 0 };
}

/**
 * The rule for a drafter with its own distribution q (a DSpark drafter sampling its block): accept
 * `draft` (drawn from q) with probability min(1, p(d)/q(d)); on refusal draw from max(0, p - q),
 * normalized. `q` is over the whole vocabulary; p is the sampler's. Greedy: as acceptDraft.
 */
export function acceptDraftFrom(s: Sampler, logits: Float32Array, draft: number, q: ArrayLike<number>, history: readonly number[], V: number): Choice {
  const { ids, probs } = s.distribution(logits, history, V);
  if (s.greedy) return { id: ids[0]!, accepted: ids[0] === draft };
  const at = ids.indexOf(draft);
  const pd = at < 0 ? 0 : probs[at]!;
  const qd = q[draft]!;
  if (s.rng.nextFloat() * qd < pd) return { id: draft, accepted: true };
  const rest = ids.map((id, i) => Math.max(0, probs[i]! - q[id]!));
  const total = rest.reduce((a, b) => a + b, 0);
  // p <= q everywhere but rounding: p itself (then the refusal had probability ~0)
  const w = total > 0 ? rest : probs;
  const u = s.rng.nextFloat() * (total > 0 ? total : 1);
  let cum = 0;
  let last = -1;
  for (let i = 0; i < ids.length; i++) {
    if (w[i]! === 0) continue;
    cum += w[i]!;
    last = i;
    if (u < cum) return { id: ids[i]!, accepted: false };
  }
  return { id: ids[last]!, accepted: false };
}
