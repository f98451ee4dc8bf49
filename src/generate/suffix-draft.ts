// Suffix-automaton drafting (issue 46, item 5): the text so far (prompt, accepted tokens and, in a
// session, earlier turns) is indexed once, token by token, so the longest earlier match of any
// length is found in O(1) per sweep; agent loops that repeat tool-call scaffolding draft long runs.

import type { Taps } from '../model/taps.js';
import type { Drafter } from './draft.js';

// Transition keys are state * TOKEN_SPAN + token in one Map (a Map per state costs far more).
const TOKEN_SPAN = 2 ** 24;

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}

/**
 * Proposes the continuation of the longest suffix of the context that also ended earlier: token by
 * token, the next id most often seen after the matched text (ties: the latest seen), drafted only
 * while the match is at least `minMatch` tokens and that id followed at least `minShare` of the
 * matched text's earlier occurrences. The rule is `suffixDraftReference` (the tests check it); the
 * counts are exact while no position has more than `chainLimit` suffix states of >= minMatch tokens
 * (only long runs of a short repeated pattern do; there the shorter strings' counts fall short).
 * Keeps the indexed text: a context that extends it costs only its new tokens; any other rebuilds.
 */
export class SuffixDrafter implements Drafter {
  private text: number[] = [];
  /** Earlier text of the session (observe): indexed before every context. */
  private kept: number[] = [];
  /** Per proposal of the last draft: the share of the matched text's earlier occurrences it followed, smoothed (n / (total + 1)). */
  lastConfidence: number[] | null = null;
  /** Tokens of the longest earlier match the last draft continued (0: none). */
  lastMatch = 0;
  // per state: longest string length, suffix link, occurrences (endpos size), latest end, first edge
  private len: Int32Array = new Int32Array(64);
  private link: Int32Array = new Int32Array(64);
  private cnt: Int32Array = new Int32Array(64);
  private lastEnd: Int32Array = new Int32Array(64);
  private head: Int32Array = new Int32Array(64);
  // per edge: token, target state, next edge of the same state
  private eTok: Int32Array = new Int32Array(64);
  private eTo: Int32Array = new Int32Array(64);
  private eNext: Int32Array = new Int32Array(64);
  private edges = new Map<number, number>();
  private states = 0;
  private nEdges = 0;
  private last = 0;

  constructor(
    readonly minMatch = 2,
    readonly minShare = 0.5,
    readonly chainLimit = 1024,
    /** Most tokens observe() keeps; past it the older half is dropped (a rebuild). */
    readonly maxKept = 1 << 20,
  ) {
    if (!(Number.isInteger(minMatch) && minMatch >= 1)) throw new Error(`minMatch ${minMatch} is not an integer >= 1`);
    if (!(minShare > 0 && minShare <= 1)) throw new Error(`minShare ${minShare} is not in (0, 1]`);
    this.reset();
  }

  /** Bytes held by the index: O(tokens) (at most 2n states and 3n edges, plus the text). */
  get bytes(): number {
    const arrays = [this.len, this.link, this.cnt, this.lastEnd, this.head, this.eTok, this.eTo, this.eNext];
    // a Map entry: about 3 slots of 8 bytes in V8's ordered hash table, plus the text's 8-byte slots
    return arrays.reduce((a, x) => a + x.byteLength, 0) + this.edges.size * 24 + this.text.length * 8;
  }

  /** Tokens indexed so far. */
  get length(): number {
    return this.text.length;
  }

  draft(context: readonly number[], max: number): number[] {
    this.sync(context);
    return this.propose(max);
  }

  /**
   * Keep `ids` (a session's earlier turn: its prompt and reply) in front of every later context,
   * so a new turn drafts from what the session said before. Costs only their indexing when the
   * indexed text already ends with them (observe the context just drafted from).
   */
  observe(ids: readonly number[]): void {
    for (const id of ids) this.kept.push(id);
    if (this.kept.length > this.maxKept) this.kept = this.kept.slice(this.kept.length - (this.maxKept >> 1));
  }

  /** Index the kept text then `context`: append what extends the indexed text, or start over if it does not. */
  sync(context: readonly number[]): void {
    const K = this.kept.length;
    const at = (i: number): number => (i < K ? this.kept[i]! : context[i - K]!);
    const total = K + context.length;
    const n = this.text.length;
    let same = total >= n;
    for (let i = 0; i < n && same; i++) same = at(i) === this.text[i];
    if (!same) this.reset();
    for (let i = this.text.length; i < total; i++) this.append(at(i));
  }

  /** Draft up to `max` ids after the indexed text. */
  propose(max: number): number[] {
    const out: number[] = [];
    const shares: number[] = [];
    this.lastConfidence = shares;
    this.lastMatch = 0;
    const end = this.text.length - 1;
    let u = this.link[this.last]!;
    if (this.states === 1 || this.len[u]! < this.minMatch) return out;
    this.lastMatch = this.len[u]!;
    while (out.length < max) {
      // occurrences of the matched text that have a next token (not the one ending the text)
      const total = this.cnt[u]! - (this.lastEnd[u] === end ? 1 : 0);
      if (total <= 0) break;
      let best = -1;
      for (let e = this.head[u]!; e >= 0; e = this.eNext[e]!) {
        const v = this.eTo[e]!;
        if (best < 0 || this.cnt[v]! > this.cnt[this.eTo[best]!]! || (this.cnt[v] === this.cnt[this.eTo[best]!] && this.lastEnd[v]! > this.lastEnd[this.eTo[best]!]!)) best = e;
      }
      if (best < 0 || this.cnt[this.eTo[best]!]! < this.minShare * total) break;
      out.push(this.eTok[best]!);
      shares.push(this.cnt[this.eTo[best]!]! / (total + 1));
      u = this.eTo[best]!;
    }
    return out;
  }

  private reset(): void {
    this.text = [];
    this.edges.clear();
    this.states = 0;
    this.nEdges = 0;
    this.last = this.newState(0, -1, -1);
  }

  private newState(len: number, link: number, lastEnd: number): number {
    if (this.states === this.len.length) {
      [this.len, this.link, this.cnt, this.lastEnd, this.head] = [this.len, this.link, this.cnt, this.lastEnd, this.head].map(grow) as [Int32Array, Int32Array, Int32Array, Int32Array, Int32Array];
    }
    const s = this.states++;
    this.len[s] = len;
    this.link[s] = link;
    this.cnt[s] = 0;
    this.lastEnd[s] = lastEnd;
    this.head[s] = -1;
    return s;
  }

  private addEdge(from: number, tok: number, to: number): void {
    if (this.nEdges === this.eTok.length) {
      [this.eTok, this.eTo, this.eNext] = [this.eTok, this.eTo, this.eNext].map(grow) as [Int32Array, Int32Array, Int32Array];
    }
    const e = this.nEdges++;
    this.eTok[e] = tok;
    this.eTo[e] = to;
    this.eNext[e] = this.head[from]!;
    this.head[from] = e;
    this.edges.set(from * TOKEN_SPAN + tok, e);
  }

  /** The standard online suffix-automaton extension, plus occurrence counts for long states. */
  private append(tok: number): void {
    if (!(Number.isInteger(tok) && tok >= 0 && tok < TOKEN_SPAN)) throw new Error(`token id ${tok} is outside [0, ${TOKEN_SPAN})`);
    const pos = this.text.length;
    this.text.push(tok);
    const cur = this.newState(this.len[this.last]! + 1, 0, pos);
    let p = this.last;
    while (p >= 0 && !this.edges.has(p * TOKEN_SPAN + tok)) {
      this.addEdge(p, tok, cur);
      p = this.link[p]!;
    }
    if (p >= 0) {
      const q = this.eTo[this.edges.get(p * TOKEN_SPAN + tok)!]!;
      if (this.len[p]! + 1 === this.len[q]) this.link[cur] = q;
      else {
        const clone = this.newState(this.len[p]! + 1, this.link[q]!, this.lastEnd[q]!);
        this.cnt[clone] = this.cnt[q]!;
        for (let e = this.head[q]!; e >= 0; e = this.eNext[e]!) this.addEdge(clone, this.eTok[e]!, this.eTo[e]!);
        for (; p >= 0; p = this.link[p]!) {
          const e = this.edges.get(p * TOKEN_SPAN + tok)!;
          if (this.eTo[e] !== q) break;
          this.eTo[e] = clone;
        }
        this.link[q] = clone;
        this.link[cur] = clone;
      }
    }
    this.last = cur;
    // Every state on cur's suffix chain gains this end position. Only states of at least minMatch
    // tokens are ever asked (propose), so the walk stops below that; it is short except in long
    // runs of a short repeated pattern, which would make indexing quadratic without chainLimit.
    for (let v = cur, k = 0; v > 0 && this.len[v]! >= this.minMatch && k < this.chainLimit; v = this.link[v]!, k++) {
      this.cnt[v]!++;
      this.lastEnd[v] = pos;
    }
  }
}

/**
 * The rule SuffixDrafter implements, by brute force (for tests): the longest suffix s of `context`
 * that also ends before its last token; then while fewer than `max`: among the earlier occurrences
 * of s that have a next token, the most frequent next id (ties: the latest occurrence's), taken if it
 * followed at least minShare of them, and s grows by it.
 */
export function suffixDraftReference(context: readonly number[], max: number, minMatch: number, minShare: number): number[] {
  const L = context.length;
  const endsAt = (s: readonly number[], e: number): boolean => {
    if (e - s.length + 1 < 0) return false;
    for (let i = 0; i < s.length; i++) if (context[e - s.length + 1 + i] !== s[i]) return false;
    return true;
  };
  let m = 0;
  for (let k = L - 1; k >= 1 && m === 0; k--) {
    const s = context.slice(L - k);
    for (let e = L - 2; e >= k - 1; e--) if (endsAt(s, e)) {
      m = k;
      break;
    }
  }
  if (m < minMatch) return [];
  const s = context.slice(L - m) as number[];
  const out: number[] = [];
  while (out.length < max) {
    const seen = new Map<number, { n: number; latest: number }>();
    let total = 0;
    for (let e = s.length - 1; e <= L - 2; e++) {
      if (!endsAt(s, e)) continue;
      total++;
      const t = context[e + 1]!;
      const g = seen.get(t) ?? { n: 0, latest: -1 };
      g.n++;
      g.latest = e;
      seen.set(t, g);
    }
    let best: [number, { n: number; latest: number }] | null = null;
    for (const kv of seen) if (!best || kv[1].n > best[1].n || (kv[1].n === best[1].n && kv[1].latest > best[1].latest)) best = kv;
    if (!best || best[1].n < minShare * total) break;
    out.push(best[0]);
    s.push(best[0]);
  }
  return out;
}

// Suffix drafts combined with a model drafter (issue 46, item 5): where the text repeats itself
// (agent loops: tool-call scaffolding, quoted files, earlier turns) a suffix match drafts long runs
// for free; elsewhere the model drafter (DSpark) guesses from K3's hidden states.

export interface CombineOptions {
  /**
   * Use the suffix draft only when its earlier match is at least this many tokens (default 8):
   * a short match (a common word pair) predicts little, and DSpark reads the whole context.
   */
  minMatch?: number;
  /** ... and its first proposal followed at least this share of the match's earlier occurrences, smoothed n / (total + 1) (default 0.6: two of two). */
  minConfidence?: number;
  /** ... and it offers at least this many proposals, or as many as asked (default 2). */
  minDrafts?: number;
}

/**
 * Drafts with `suffix` when its match is long and confident (CombineOptions), else with `model`.
 * The model drafter's taps flow whichever drafts, so its table of K3's states stays complete.
 * `lastSource` says which drafted last: a sampled run verifies the model's drafts against its own
 * distribution and the suffix's as fixed tokens.
 */
export class CombinedDrafter implements Drafter {
  readonly taps?: Taps;
  lastConfidence: readonly number[] | null = null;
  lastSource: 'suffix' | 'model' | null = null;
  private readonly o: Required<CombineOptions>;

  constructor(
    readonly suffix: SuffixDrafter,
    readonly model: Drafter,
    opts: CombineOptions = {},
  ) {
    this.o = { minMatch: opts.minMatch ?? 8, minConfidence: opts.minConfidence ?? 0.6, minDrafts: opts.minDrafts ?? 2 };
    if (!(Number.isInteger(this.o.minMatch) && this.o.minMatch >= 1)) throw new Error(`combined drafter: minMatch ${this.o.minMatch} is not an integer >= 1`);
    if (!(this.o.minConfidence >= 0 && this.o.minConfidence <= 1)) throw new Error(`combined drafter: minConfidence ${this.o.minConfidence} is not in [0, 1]`);
    if (model.taps) this.taps = model.taps;
  }

  draft(context: readonly number[], max: number): number[] {
    const s = this.suffix.draft(context, max);
    const conf = this.suffix.lastConfidence ?? [];
    if (s.length >= Math.min(max, this.o.minDrafts) && s.length > 0 && this.suffix.lastMatch >= this.o.minMatch && conf[0]! >= this.o.minConfidence) {
      this.lastSource = 'suffix';
      this.lastConfidence = conf;
      return s;
    }
    const d = this.model.draft(context, max);
    this.lastSource = 'model';
    this.lastConfidence = this.model.lastConfidence ?? null;
    return d;
  }

  /** A session's earlier turn (its prompt and reply): kept by the suffix drafter for later turns. */
  observe(ids: readonly number[]): void {
    this.suffix.observe(ids);
  }
}
