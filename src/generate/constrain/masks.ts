// Which ids a grammar state allows, and how short a reply can still be after each: one table per
// state (the fewest symbols to finish after the id, or NEVER), built by walking the vocabulary in
// byte order with the matcher's memoized transitions, and kept for the states met again (inside
// a string, after a comma, ...).

import { DEAD, Matcher } from './matcher.js';
import { NOT_PLAIN, type FlatTrie, type PlainClass, type VocabIndex } from './vocab.js';

export const NEVER = 0x7fffffff;
/** Bytes of mask tables kept per grammar. */
const CACHE_BYTES = 64 << 20;

/**
 * What most ids cost after a state, before the exceptions: nothing allowed; every ordinary id the
 * same (free text); or, inside a string, a cost by the id's character count when it is plain text
 * there (vocab.ts). Tables are stored as such a base and the ids that differ from it, so that
 * even the states that allow most of the vocabulary keep small tables.
 */
export type Base = { kind: 'none' } | { kind: 'all'; cost: number; ordinary: Uint8Array } | { kind: 'plain'; byChars: Int32Array; charsOf: Uint16Array };

function baseAt(b: Base, id: number): number {
  if (b.kind === 'none') return NEVER;
  if (b.kind === 'all') return b.ordinary[id] ? b.cost : NEVER;
  const c = b.charsOf[id]!;
  return c === NOT_PLAIN ? NEVER : b.byChars[c]!;
}

/** A base written out per id into `into`. */
function expandBase(b: Base, into: Int32Array): Int32Array {
  if (b.kind === 'none') into.fill(NEVER);
  else if (b.kind === 'all') {
    const { ordinary, cost } = b;
    for (let i = 0; i < into.length; i++) into[i] = ordinary[i] ? cost : NEVER;
  } else {
    const { charsOf, byChars } = b;
    for (let i = 0; i < into.length; i++) {
      const c = charsOf[i]!;
      into[i] = c === NOT_PLAIN ? NEVER : byChars[c]!;
    }
  }
  return into;
}

/** The fewest symbols after each id from one state (NEVER: not allowed): a base and the ids that differ from it, ascending, or one entry per id when too many differ. */
export class Table {
  private constructor(readonly base: Base, readonly dense: Int32Array | null, readonly ids: Int32Array, readonly costs: Int32Array) {}

  /** A table from a dense array (copied), stored against `base` (`scratch`: a buffer of the same length). */
  static of(d: Int32Array, base: Base = { kind: 'none' }, scratch?: Int32Array): Table {
    const b = scratch && base.kind !== 'none' ? expandBase(base, scratch) : null;
    let n = 0;
    if (b) {
      for (let i = 0; i < d.length; i++) if (d[i] !== b[i]) n++;
    } else for (let i = 0; i < d.length; i++) if (d[i] !== NEVER) n++;
    if (n * 4 > d.length) return new Table({ kind: 'none' }, d.slice(), new Int32Array(0), new Int32Array(0));
    const ids = new Int32Array(n);
    const costs = new Int32Array(n);
    for (let i = 0, k = 0; i < d.length; i++) {
      if (d[i] === (b ? b[i] : NEVER)) continue;
      ids[k] = i;
      costs[k++] = d[i]!;
    }
    return new Table(b ? base : { kind: 'none' }, null, ids, costs);
  }

  get bytes(): number {
    return this.dense ? this.dense.byteLength : this.ids.byteLength * 2 + 64;
  }

  get(id: number): number {
    if (this.dense) return this.dense[id] ?? NEVER;
    let lo = 0;
    let hi = this.ids.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const v = this.ids[mid]!;
      if (v === id) return this.costs[mid]!;
      if (v < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return baseAt(this.base, id);
  }

  /** Write the whole table into `into` (one entry per id). */
  expand(into: Int32Array): void {
    if (this.dense) into.set(this.dense);
    else if (this.base.kind === 'none') into.fill(NEVER);
    else expandBase(this.base, into);
    for (let k = 0; k < this.ids.length; k++) into[this.ids[k]!] = this.costs[k]!;
  }

  /** Lower `into` to this table's entries where they are smaller. */
  minInto(into: Int32Array, scratch: Int32Array): void {
    if (!this.dense && this.base.kind === 'none') {
      for (let k = 0; k < this.ids.length; k++) if (this.costs[k]! < into[this.ids[k]!]!) into[this.ids[k]!] = this.costs[k]!;
      return;
    }
    this.expand(scratch);
    for (let i = 0; i < into.length; i++) if (scratch[i]! < into[i]!) into[i] = scratch[i]!;
  }
}

export class TokenGrammar {
  private tables = new Map<number, Table>();
  private cachedBytes = 0;
  private readonly scratch: Int32Array;
  private readonly merged: Int32Array;
  private readonly spare: Int32Array;
  private readonly ordinary: Uint8Array;
  /** Counters for the bench and tests. */
  readonly stats = { built: 0, hits: 0, walkedNodes: 0 };

  constructor(readonly matcher: Matcher, readonly vocab: VocabIndex) {
    this.scratch = new Int32Array(vocab.V);
    this.merged = new Int32Array(vocab.V);
    this.spare = new Int32Array(vocab.V);
    this.ordinary = new Uint8Array(vocab.V);
    for (const id of vocab.ordinary) this.ordinary[id] = 1;
  }

  /** The state after id `id` in state `s`, or DEAD. */
  next(s: number, id: number): number {
    const m = this.matcher;
    const sym = this.vocab.symbolOf(id);
    if (sym !== undefined) return m.next(s, sym);
    const b = this.vocab.bytesOf(id);
    if (!b) return DEAD;
    for (let i = 0; i < b.length && s !== DEAD; i++) s = m.next(s, b[i]!);
    return s;
  }

  /** The fewest symbols that finish the reply after each id (NEVER: not allowed; 0 where the state after is free of the budget: lazy). */
  table(s: number): Table {
    const have = this.tables.get(s);
    if (have) {
      this.stats.hits++;
      this.tables.delete(s);
      this.tables.set(s, have);
      return have;
    }
    const t = this.build(s);
    this.stats.built++;
    this.tables.set(s, t);
    this.cachedBytes += t.bytes;
    while (this.cachedBytes > CACHE_BYTES && this.tables.size > 1) {
      const [k, old] = this.tables.entries().next().value!;
      this.tables.delete(k);
      this.cachedBytes -= old.bytes;
    }
    return t;
  }

  /** A table written out per id (into a buffer the next call reuses). */
  expanded(t: Table): Int32Array {
    t.expand(this.spare);
    return this.spare;
  }

  /** Fewest symbols after state `n`, as the tables count it. */
  cost(n: number): number {
    if (n === DEAD) return NEVER;
    const info = this.matcher.info(n);
    return info.free === 'lazy' ? 0 : info.min;
  }

  private build(s: number): Table {
    const { vocab, matcher } = this;
    const info = matcher.info(s);
    const singles = info.stacks.length > 1 ? info.stacks.map((st) => matcher.single(st)) : [];
    if (singles.some((one) => matcher.info(one).plain || matcher.info(one).free)) {
      // after an id the fewest symbols left is the least over the stacks: one table each, kept
      // (worth it when a stack is inside a string: its table is a base and a few exceptions)
      const ones = singles.map((one) => this.table(one));
      const t = this.merged.fill(NEVER);
      for (const one of ones) one.minInto(t, this.spare);
      return Table.of(t);
    }
    const t = this.scratch.fill(NEVER);
    for (const [id, sym] of vocab.specials) t[id] = this.cost(matcher.next(s, sym));
    if (info.free) {
      // every byte comes back to s
      const c = this.cost(s);
      for (const id of vocab.ordinary) t[id] = c;
      return Table.of(t, { kind: 'all', cost: c, ordinary: this.ordinary }, this.spare);
    }
    if (info.plain) {
      const base = this.plainFill(s, info.plain, info.plainExceptions, t);
      if (base) return Table.of(t, base, this.spare);
      t.fill(NEVER);
      for (const [id, sym] of vocab.specials) t[id] = this.cost(matcher.next(s, sym));
    }
    this.walk(s, vocab.trie, t, null);
    return Table.of(t);
  }

  /** Plain text only counts its characters: one id of each count (not starting with an exception byte) stands for all; the rest and the exceptions are walked. Null when no such id is found. */
  private plainFill(s: number, cls: PlainClass, except: ReadonlySet<number> | null, t: Int32Array): Base | null {
    const vocab = this.vocab;
    const p = vocab.plain(cls);
    const byChars = new Int32Array(p.byChars.length).fill(NEVER);
    for (let c = 0; c < p.byChars.length; c++) {
      const reps = p.byChars[c]!;
      if (reps.length === 0) continue;
      const rep = except ? reps.find((id) => !except.has(vocab.bytesOf(id)![0]!)) : reps[0];
      if (rep === undefined) return null;
      byChars[c] = this.cost(this.next(s, rep));
    }
    for (let k = 0; k < p.ids.length; k++) t[p.ids[k]!] = byChars[p.chars[k]!]!;
    this.walk(s, p.rest, t, null);
    if (except && except.size > 0) this.walk(s, vocab.trie, t, except);
    return { kind: 'plain', byChars, charsOf: p.charsOf };
  }

  /** Fill `t` for the ids of `trie` from state `s`, skipping every subtree under a dead prefix (and, with `first`, those whose first byte is not in it). */
  private walk(s: number, trie: FlatTrie, t: Int32Array, first: ReadonlySet<number> | null): void {
    const m = this.matcher;
    const { byte, depth, token, end } = trie;
    const states = new Int32Array(trie.maxDepth + 1);
    states[0] = s;
    const n = byte.length;
    let visited = 0;
    for (let i = 0; i < n;) {
      const d = depth[i]!;
      if (first && d === 1 && !first.has(byte[i]!)) {
        i = end[i]!;
        continue;
      }
      const st = m.next(states[d - 1]!, byte[i]!);
      visited++;
      if (st === DEAD) {
        i = end[i]!;
        continue;
      }
      states[d] = st;
      const id = token[i]!;
      if (id >= 0) t[id] = this.cost(st);
      i++;
    }
    this.stats.walkedNodes += visited;
  }
}
