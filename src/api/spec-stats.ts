// Speculation counters per model, for `k3 serve`'s /metrics: every speculative generation (spec or
// drafter, run alone: alone.ts) adds its run recorder's sweeps here. Counts, not rates, so a
// scraper can take rates over any window.

import type { Model } from '../model/model.js';
import type { RunSummary } from '../generate/report.js';

export interface SpecStats {
  /** Speculative generations finished. */
  generations: number;
  sweeps: number;
  /** Draft tokens verified, and those K3 accepted. */
  drafted: number;
  accepted: number;
  /** Tokens emitted by the sweeps (accepted drafts and K3's own token after them). */
  emitted: number;
  /** Per draft position k (0 first): sweeps that drafted it, and those that accepted it. */
  draftedAt: number[];
  acceptedAt: number[];
  /** Weight bytes the sweeps read through the store (trunk, experts, embeddings, small tensors). */
  sweepBytes: number;
  /** Bytes the DSpark drafter read itself (K3's lm_head and embedding rows the plan does not hold). */
  drafterBytes: number;
}

const STATS = new WeakMap<Model, SpecStats>();

/** The model's speculation counters (zeros before any speculative generation). */
export function specStats(model: Model): SpecStats {
  let s = STATS.get(model);
  if (!s) {
    s = { generations: 0, sweeps: 0, drafted: 0, accepted: 0, emitted: 0, draftedAt: [], acceptedAt: [], sweepBytes: 0, drafterBytes: 0 };
    STATS.set(model, s);
  }
  return s;
}

/** Add one speculative generation's report (and the bytes its drafter read) to the model's counters. */
export function addSpecRun(model: Model, r: RunSummary, drafterBytes: number): void {
  const s = specStats(model);
  s.generations++;
  s.drafterBytes += drafterBytes;
  for (const st of r.steps) {
    if (st.emitted === undefined) continue;
    const drafted = st.drafted ?? 0;
    const accepted = st.accepted ?? 0;
    s.sweeps++;
    s.drafted += drafted;
    s.accepted += accepted;
    s.emitted += st.emitted;
    s.sweepBytes += st.gb_read * 1e9;
    for (let k = 0; k < drafted; k++) {
      s.draftedAt[k] = (s.draftedAt[k] ?? 0) + 1;
      s.acceptedAt[k] = (s.acceptedAt[k] ?? 0) + (k < accepted ? 1 : 0);
    }
  }
}
