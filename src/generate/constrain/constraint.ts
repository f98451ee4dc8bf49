// A token constraint: which ids may come next given what came before and the tokens left, and
// the reply so far advanced by the chosen id. Every allowed id leaves a state from which the
// reply can still be finished within the tokens left (each byte is a token of its own in Kimi
// vocabularies and each control symbol is one id, so the fewest symbols bound the fewest
// tokens): a reply always ends, on any weights. Free text takes a bounded share of the budget
// where something must follow it (the share is taken of the tokens left when the text starts,
// its closing control id included).

import type { FreeKind } from './matcher.js';
import { DEAD } from './matcher.js';
import { NEVER, type TokenGrammar } from './masks.js';
import { END } from './symbols.js';

export interface TokenConstraint {
  /** Fewest tokens of a whole reply (below it the reply is cut off, a valid prefix). */
  readonly minTokens: number;
  /** Ids that end the reply: generation stops after them (even where stop ids are ignored). */
  readonly stopIds: readonly number[];
  /** May `id` come next, with `left` tokens still to generate counting this one? */
  allows(id: number, left: number): boolean;
  /** Set the logit of every id not allowed to -Infinity (in place: give it a copy). */
  mask(logits: Float32Array, left: number): void;
  /** `id` was chosen (it must be allowed). */
  accept(id: number): void;
  /** The allowed ids, ascending, when they are few (else null): sampling can then look at them alone. */
  allowed?(left: number): Int32Array | null;
  /** The allowed id of the highest logit (the first on ties): greedy without a mask. */
  best?(logits: Float32Array, left: number): number;
}

/** Shares of the tokens left that free text may use before what must follow it. */
export interface FreeShares {
  reasoning: number;
  content: number;
}

export class GrammarConstraint implements TokenConstraint {
  private state: number;
  private count = 0;
  /** The free text being written: where it started (tokens before it) and its cap, once known. */
  private phase: { start: number; cap: number | null } | null = null;

  readonly stopIds: readonly number[];

  constructor(readonly g: TokenGrammar, readonly shares: FreeShares) {
    this.state = g.matcher.start;
    const end = g.vocab.controlId(END);
    this.stopIds = end === undefined ? [] : [end];
  }

  get minTokens(): number {
    return this.g.matcher.min(this.g.matcher.start);
  }

  /** The state's id (tests). */
  get current(): number {
    return this.state;
  }

  private freeKind(): FreeKind | null {
    return this.g.matcher.info(this.state).free;
  }

  /** True when free text has used its share: only the ids that end it remain. */
  private exhausted(left: number): boolean {
    const kind = this.freeKind();
    if (kind !== 'reasoning' && kind !== 'content') return false;
    const share = this.shares[kind];
    if (share >= 1 || !this.phase) return false;
    this.phase.cap ??= Math.max(1, Math.floor(share * (left + this.count - this.phase.start)));
    return this.count - this.phase.start + 2 > this.phase.cap;
  }

  /** The highest cost an id may leave: within the tokens left, or, when even the shortest finish
   *  no longer fits (a max_tokens below minTokens), strictly less than now: the reply then runs
   *  the shortest way towards its end and is cut off there, a valid prefix ("length"). */
  private limit(left: number): number {
    const now = this.g.cost(this.state);
    return now > left ? now - 1 : left - 1;
  }

  allows(id: number, left: number): boolean {
    const n = this.g.next(this.state, id);
    if (n === DEAD || this.g.cost(n) > this.limit(left)) return false;
    return !(n === this.state && this.exhausted(left));
  }

  mask(logits: Float32Array, left: number): void {
    const t = this.g.table(this.state);
    const lim = this.limit(left);
    const V = this.g.vocab.V;
    let any = false;
    if (this.exhausted(left)) {
      // free text past its share: only the ids that end it (control ids) remain
      const keep: Array<[number, number]> = [];
      for (const [id] of this.g.vocab.specials) if (t.get(id) <= lim && id < logits.length) keep.push([id, logits[id]!]);
      logits.fill(-Infinity);
      for (const [id, v] of keep) logits[id] = v;
      any = keep.length > 0;
    } else if (!t.dense && t.base.kind === 'none') {
      const keep: Array<[number, number]> = [];
      for (let k = 0; k < t.ids.length; k++) if (t.costs[k]! <= lim && t.ids[k]! < logits.length) keep.push([t.ids[k]!, logits[t.ids[k]!]!]);
      logits.fill(-Infinity);
      for (const [id, v] of keep) logits[id] = v;
      any = keep.length > 0;
    } else {
      const d = t.dense ?? this.g.expanded(t);
      for (let i = 0; i < logits.length; i++) {
        if (i >= V || d[i]! > lim) logits[i] = -Infinity;
        else any = true;
      }
    }
    if (!any) throw new Error(`constraint: no id is allowed with ${left} tokens left (the reply needs ${this.g.cost(this.state)})`);
  }

  allowed(left: number): Int32Array | null {
    const t = this.g.table(this.state);
    const lim = this.limit(left);
    let ids: number[];
    if (this.exhausted(left)) ids = this.g.vocab.specials.map(([id]) => id).filter((id) => t.get(id) <= lim);
    else if (!t.dense && t.base.kind === 'none') ids = Array.from(t.ids).filter((_, k) => t.costs[k]! <= lim);
    else return null;
    return ids.length > 0 ? Int32Array.from(ids.sort((a, b) => a - b)) : null;
  }

  best(logits: Float32Array, left: number): number {
    const few = this.allowed(left);
    const lim = this.limit(left);
    let best = -1;
    let bestV = -Infinity;
    if (few) {
      for (const id of few) if (logits[id]! > bestV || best < 0) [best, bestV] = [id, logits[id]!];
    } else {
      const t = this.g.table(this.state);
      const d = t.dense ?? this.g.expanded(t);
      const n = Math.min(d.length, logits.length);
      for (let i = 0; i < n; i++) if (d[i]! <= lim && (logits[i]! > bestV || best < 0)) [best, bestV] = [i, logits[i]!];
    }
    if (best < 0) throw new Error(`constraint: no id is allowed with ${left} tokens left`);
    return best;
  }

  accept(id: number): void {
    const m = this.g.matcher;
    const n = this.g.next(this.state, id);
    if (n === DEAD) throw new Error(`constraint: id ${id} is not allowed here`);
    const before = this.state;
    this.count++;
    this.state = n;
    const kind = m.info(this.state).free;
    if (kind !== 'reasoning' && kind !== 'content') this.phase = null;
    else if (this.state !== before || !this.phase) this.phase = { start: this.g.vocab.bytesOf(id) ? this.count - 1 : this.count, cap: null };
  }
}

export { NEVER };
