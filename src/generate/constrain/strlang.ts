// A string held to patterns and a length: the DFA of its bytes times its code point count, with
// the exact fewest bytes from every (state, count) to an accepted end, as a JSON string writes
// them (a quote, a backslash or \n \t \r \b \f cost two bytes; other control bytes cannot be
// written: no \u escapes here) or as a raw argument writes them (a byte each).

import { UserError } from '../../util/errors.js';
import { Dfa, dfaOf, multipleOfText } from './dfa.js';
import { numberRegexes } from './numrange.js';
import { RegexError, parseRegex } from './regex.js';
import type { Atom } from './schema-atoms.js';

export type Weights = 'json' | 'raw';

/** Product states (DFA states x counts) past this: the pattern and length together are refused (4 MB of distances). */
const PRODUCT_LIMIT = 1_000_000;

/** JSON escape letters and the byte each stands for. */
export const ESCAPES: ReadonlyArray<[number, number]> = [[0x6e, 0x0a], [0x74, 0x09], [0x72, 0x0d], [0x62, 0x08], [0x66, 0x0c], [0x22, 0x22], [0x5c, 0x5c], [0x2f, 0x2f]];

/** Bytes of a JSON string that writes byte `b` of the text. */
function jsonCost(b: number): number {
  if (b === 0x22 || b === 0x5c) return 2;
  if (b < 0x20) return b === 0x0a || b === 0x09 || b === 0x0d || b === 0x08 || b === 0x0c ? 2 : Infinity;
  return 1;
}

const isLead = (b: number): boolean => b < 0x80 || b >= 0xc0;

export class StrLang {
  private static count = 0;
  readonly id = StrLang.count++;
  /** Counts past this are kept as this (maxLength when finite, else minLength). */
  readonly cap: number;
  /** Fewest bytes per (count, state): small integers, exact in float32 (Infinity: no end). */
  private readonly dist: Float32Array;

  constructor(readonly dfa: Dfa, readonly minLength: number, readonly maxLength: number, readonly weights: Weights) {
    this.cap = Number.isFinite(maxLength) ? maxLength : minLength;
    const n = dfa.size;
    const layers = this.cap + 1;
    if (n * layers > PRODUCT_LIMIT) throw new RegexError(`the pattern (${n} automaton states) with a length limit of ${this.cap} is too large to hold`);
    this.dist = this.compute();
  }

  /** Count after byte `b` from count `c`; -1 past maxLength. */
  nextCount(c: number, b: number): number {
    if (!isLead(b)) return c;
    if (c + 1 > this.maxLength) return -1;
    return Math.min(c + 1, this.cap);
  }

  /** Fewest bytes (as written) from DFA state q with c code points to an accepted end (no quote). */
  min(q: number, c: number): number {
    return q < 0 ? Infinity : this.dist[c * this.dfa.size + q]!;
  }

  /** May the string end here? */
  done(q: number, c: number): boolean {
    return q >= 0 && this.dfa.accept[q] === 1 && this.dfa.phase[q] === 0 && c >= this.minLength;
  }

  cost(b: number): number {
    return this.weights === 'json' ? jsonCost(b) : 1;
  }

  /** Backward shortest paths over (state, count) from the accepted ends (edge weights 1 or 2). */
  private compute(): Float32Array {
    const { dfa, cap } = this;
    const n = dfa.size;
    const N = n * (cap + 1);
    const dist = new Float32Array(N).fill(Infinity);
    const { head, nxt, src, byt } = reverseEdges(dfa, (b) => this.cost(b) !== Infinity);
    for (let c = 0; c <= cap; c++) for (let q = 0; q < n; q++) if (this.done(q, c)) dist[c * n + q] = 0;
    dial(dist, (node, d, relax) => {
      const c2 = Math.floor(node / n);
      const t = node - c2 * n;
      for (let e = head[t]!; e >= 0; e = nxt[e]!) {
        const b = byt[e]!;
        const q = src[e]!;
        const w = d + this.cost(b);
        if (!isLead(b)) relax(c2 * n + q, w);
        else {
          if (c2 >= 1 && c2 - 1 + 1 <= this.maxLength) relax((c2 - 1) * n + q, w);
          if (c2 === cap && !Number.isFinite(this.maxLength)) relax(c2 * n + q, w);
        }
      }
    });
    return dist;
  }
}

const dfas = new WeakMap<Atom, Dfa | null>();
const langs = new WeakMap<Atom, Map<string, StrLang | null>>();

function cached(a: Atom, key: string, make: () => StrLang | null): StrLang | null {
  let m = langs.get(a);
  if (!m) langs.set(a, (m = new Map()));
  if (!m.has(key)) m.set(key, make());
  return m.get(key)!;
}

/** DFAs by their patterns' sources, shared by the requests that use the same schemas (16 MB of tables at most). */
const bySource = new Map<string, Dfa>();
const BY_SOURCE_BYTES = 16 << 20;
let sourceBytes = 0;

/** The DFA of an atom's string patterns (null: none), built once. */
function atomDfa(a: Atom): Dfa | null {
  if (dfas.has(a)) return dfas.get(a)!;
  let d: Dfa | null = null;
  if (a.patterns.length > 0) {
    const key = JSON.stringify(a.patterns.map((p) => p.key));
    try {
      const have = bySource.get(key);
      d = have ?? dfaOf(a.patterns.map((p) => p.re));
      if (have) bySource.delete(key);
      else sourceBytes += d.trans.byteLength;
      bySource.set(key, d);
      while (sourceBytes > BY_SOURCE_BYTES && bySource.size > 1) {
        const [k, old] = bySource.entries().next().value!;
        bySource.delete(k);
        sourceBytes -= old.trans.byteLength;
      }
    } catch (e) {
      if (!(e instanceof RegexError)) throw e;
      throw new UserError(`${a.patterns.map((p) => p.where).join(' with ')}: cannot hold ${e.message}`);
    }
  }
  dfas.set(a, d);
  return d;
}

/** The language of an atom's string values written this way, or null when no pattern applies (the plain string frames do). */
export function strLang(a: Atom, weights: Weights): StrLang | null {
  return cached(a, weights, () => {
    const d = atomDfa(a);
    if (!d) return null;
    try {
      return new StrLang(d, a.minLength, a.maxLength, weights);
    } catch (e) {
      if (!(e instanceof RegexError)) throw e;
      throw new UserError(`${a.patterns.map((p) => p.where).join(' with ')}: cannot hold ${e.message}`);
    }
  });
}

/** The language of an atom's numbers (integers only, or any), or null when unbounded. */
export function numLang(a: Atom, intOnly: boolean): StrLang | null {
  if (!a.lo && !a.hi && a.mults.length === 0) return null;
  if (a.mults.length > 0) intOnly = true;
  return cached(a, `n${intOnly}`, () => {
    try {
      return new StrLang(new Dfa(numberRegexes(a.lo, a.hi, intOnly).map(parseRegex), a.mults.map(multipleOfText)), 0, Infinity, 'raw');
    } catch (e) {
      if (!(e instanceof RegexError)) throw e;
      throw new UserError(`bounds ${JSON.stringify([a.lo?.value ?? null, a.hi?.value ?? null])} with multipleOf ${a.mults.join(', ')}: cannot hold ${e.message}`);
    }
  });
}

/** Fewest bytes (one a byte) from each DFA state to an end, where ending in q costs term[q] (Infinity: no end there). */
export function shortestWithEnds(dfa: Dfa, term: Float32Array): Float32Array {
  const dist = Float32Array.from(term);
  const { head, nxt, src } = reverseEdges(dfa, () => true);
  dial(dist, (t, d, relax) => {
    for (let e = head[t]!; e >= 0; e = nxt[e]!) relax(src[e]!, d + 1);
  });
  return dist;
}

/** The DFA's edges on the bytes `keep` allows, reversed: into state t come edges e = head[t], nxt[e], ... (-1 ends), from src[e] on byt[e]. */
function reverseEdges(dfa: Dfa, keep: (b: number) => boolean): { head: Int32Array; nxt: number[]; src: number[]; byt: number[] } {
  const n = dfa.size;
  const head = new Int32Array(n).fill(-1);
  const nxt: number[] = [];
  const src: number[] = [];
  const byt: number[] = [];
  for (let q = 0; q < n; q++) {
    for (let b = 0; b < 256; b++) {
      const t = dfa.trans[q * 256 + b]!;
      if (t < 0 || !keep(b)) continue;
      src.push(q);
      byt.push(b);
      nxt.push(head[t]!);
      head[t] = src.length - 1;
    }
  }
  return { head, nxt, src, byt };
}

/**
 * Shortest paths with small whole-number weights (Dial's buckets), in place: `dist` holds the
 * starting distances (Infinity elsewhere); `expand` relaxes the neighbours of a settled node.
 */
function dial(dist: Float32Array, expand: (node: number, d: number, relax: (to: number, d: number) => void) => void): void {
  const buckets: number[][] = [];
  for (let x = 0; x < dist.length; x++) if (dist[x]! < Infinity) (buckets[dist[x]!] ??= []).push(x);
  const relax = (to: number, d: number): void => {
    if (d >= dist[to]!) return;
    dist[to] = d;
    (buckets[d] ??= []).push(to);
  };
  for (let d = 0; d < buckets.length; d++) {
    const list = buckets[d];
    if (!list) continue;
    for (let k = 0; k < list.length; k++) if (dist[list[k]!] === d) expand(list[k]!, d, relax);
    buckets[d] = [];
  }
}
