// Drafters for speculative decoding (spec.ts): cheap guesses of the next tokens, checked by the
// model in one multi-token forward. A guess only decides what is verified, never what is emitted.

import type { Taps } from '../model/taps.js';

/** Proposes up to `max` tokens to follow `context` (the prompt and everything emitted so far). */
export interface Drafter {
  draft(context: readonly number[], max: number): number[];
  /** K3's hidden states this drafter reads: every forward of the generation hands them out (taps.ts). */
  readonly taps?: Taps;
  /**
   * Per proposal of the last draft (aligned with it): the drafter's estimate that K3 accepts it
   * given that the proposals before it were accepted (DSpark's confidence head); null or absent:
   * no estimate, the width model (spec-width.ts) goes by the run's own acceptance rates.
   */
  readonly lastConfidence?: readonly number[] | null;
}

/**
 * Prompt-lookup drafting: find the latest earlier occurrence of the context's last n tokens
 * (n from `longest` down to `shortest`) and propose the tokens that followed it. Text that
 * repeats (code, quotes, a reply echoing the prompt) drafts well; other text finds no match and
 * drafts nothing, which costs nothing.
 */
export class NgramDrafter implements Drafter {
  constructor(
    readonly longest = 3,
    readonly shortest = 1,
  ) {}

  draft(context: readonly number[], max: number): number[] {
    const L = context.length;
    for (let n = Math.min(this.longest, L - 1); n >= this.shortest; n--) {
      // latest start s < L - n where context[s .. s+n) equals the last n tokens
      for (let s = L - n - 1; s >= 0; s--) {
        let same = true;
        for (let i = 0; i < n && same; i++) same = context[s + i] === context[L - n + i];
        if (same) return context.slice(s + n, Math.min(s + n + max, L)) as number[];
      }
    }
    return [];
  }
}

/**
 * For benchmarks: drafts taken from an earlier run of the same prompt (`reference`: prompt and
 * generated ids), with the last (1 - acceptShare) of each draft replaced by a wrong token, so
 * the share of drafted tokens accepted is set: with 4 drafts, 1 → 4 of 4, 0.75 → 3, 0.5 → 2,
 * 0 → none. Random weights give no natural text, so n-gram drafts would almost never hit.
 */
export class ReplayDrafter implements Drafter {
  constructor(
    readonly reference: readonly number[],
    readonly acceptShare: number,
  ) {
    if (!(acceptShare >= 0 && acceptShare <= 1)) throw new Error(`acceptShare ${acceptShare} is not in [0, 1]`);
  }

  draft(context: readonly number[], max: number): number[] {
    const next = this.reference.slice(context.length, context.length + max);
    const good = Math.round(this.acceptShare * next.length);
    // a different id, still inside the vocabulary
    return next.map((id, i) => (i < good ? id : id === 0 ? 1 : id - 1));
  }
}
