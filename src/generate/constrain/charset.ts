// Sets of code points as sorted, disjoint, inclusive ranges, and their UTF-8 byte forms (a range
// of code points becomes a few sequences of byte ranges, so a class compiles to a small NFA).

/** [lo0, hi0, lo1, hi1, ...], sorted, disjoint, not adjacent. */
export type CharSet = readonly number[];

export const MAX_CP = 0x10ffff;

export function normalize(pairs: number[]): number[] {
  const rs: Array<[number, number]> = [];
  for (let i = 0; i < pairs.length; i += 2) if (pairs[i]! <= pairs[i + 1]!) rs.push([pairs[i]!, pairs[i + 1]!]);
  rs.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  for (const [lo, hi] of rs) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1]! + 1) out[n - 1] = Math.max(out[n - 1]!, hi);
    else out.push(lo, hi);
  }
  return out;
}

export const union = (...sets: CharSet[]): CharSet => normalize(sets.flatMap((s) => [...s]));

/** Every code point (surrogates included; utf8Seqs leaves them out) not in `s`. */
export function complement(s: CharSet): CharSet {
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < s.length; i += 2) {
    if (s[i]! > next) out.push(next, s[i]! - 1);
    next = s[i + 1]! + 1;
  }
  if (next <= MAX_CP) out.push(next, MAX_CP);
  return out;
}

export const intersect = (a: CharSet, b: CharSet): CharSet => complement(union(complement(a), complement(b)));

const r = (...cps: number[]): CharSet => normalize(cps);

export const DIGIT = r(0x30, 0x39);
export const WORD = r(0x30, 0x39, 0x41, 0x5a, 0x61, 0x7a, 0x5f, 0x5f);
/** Whitespace both ECMA-262 and Python's re agree on (a string of these matches \s in both). */
export const SPACE_NARROW = r(0x09, 0x0d, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000);
/** Whitespace in either (so a string with none of these matches \S in both). */
export const SPACE_WIDE = union(SPACE_NARROW, r(0x1c, 0x1f, 0x85, 0x85, 0xfeff, 0xfeff));
/** ECMA-262 line terminators: what '.' does not match. */
export const LINE_TERM = r(0x0a, 0x0a, 0x0d, 0x0d, 0x2028, 0x2029);
export const ANY = r(0, MAX_CP);

let unicodeCache: Map<string, CharSet> | null = null;

/** Code points of a Unicode property class (computed once: a scan of every code point). */
function unicodeClass(name: 'digit' | 'word'): CharSet {
  unicodeCache ??= new Map();
  let s = unicodeCache.get(name);
  if (s) return s;
  const re = name === 'digit' ? /\p{N}/u : /[\p{L}\p{N}\p{M}_]/u;
  const out: number[] = [];
  // planes 4-13 and 15-16 hold no letters, digits or marks (unassigned or private use)
  for (let cp = 0x80; cp <= 0xe0fff; cp = cp === 0x3ffff ? 0xe0000 : cp + 1) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    if (re.test(String.fromCodePoint(cp))) out.push(cp, cp);
  }
  s = normalize(out);
  unicodeCache.set(name, s);
  return s;
}

/**
 * Shorthand classes as a generated string may use them, so that it matches both ECMA-262 (ajv)
 * and Python's re (the jsonschema package: Unicode \d \w \s): `narrow` for a class that is used
 * as is, `wide` for one that is complemented ([^\d], \D).
 */
export function shorthand(c: 'd' | 'w' | 's', mode: 'narrow' | 'wide'): CharSet {
  if (c === 's') return mode === 'narrow' ? SPACE_NARROW : SPACE_WIDE;
  if (mode === 'narrow') return c === 'd' ? DIGIT : WORD;
  return union(c === 'd' ? DIGIT : WORD, unicodeClass(c === 'd' ? 'digit' : 'word'));
}

/** A sequence of byte ranges: [lo0, hi0, lo1, hi1, ...], one pair per byte. */
export type ByteSeq = number[];

const BOUNDS = [0x7f, 0x7ff, 0xffff, MAX_CP];

function utf8(cp: number): number[] {
  return Array.from(Buffer.from(String.fromCodePoint(cp), 'utf8'));
}

/** The UTF-8 encodings of a code point set (no surrogates) as byte-range sequences. */
export function utf8Seqs(s: CharSet): ByteSeq[] {
  const out: ByteSeq[] = [];
  for (let i = 0; i < s.length; i += 2) {
    let lo = s[i]!;
    const hi = s[i + 1]!;
    // cut out the surrogates, then split at the encoding-length bounds
    const parts: Array<[number, number]> = [];
    if (lo <= 0xd7ff) parts.push([lo, Math.min(hi, 0xd7ff)]);
    if (hi >= 0xe000) parts.push([Math.max(lo, 0xe000), hi]);
    for (const [a0, b] of parts) {
      lo = a0;
      for (const bound of BOUNDS) {
        if (lo > b) break;
        if (lo > bound) continue;
        split(lo, Math.min(b, bound), out);
        lo = bound + 1;
      }
    }
  }
  return out;
}

/** Same-length code points lo..hi into byte-range sequences (each byte independent in its range). */
function split(lo: number, hi: number, out: ByteSeq[]): void {
  const a = utf8(lo);
  const b = utf8(hi);
  const n = a.length;
  if (n === 1) {
    out.push([a[0]!, b[0]!]);
    return;
  }
  // Split until every trailing byte covers its whole range 0x80-0xbf below a shared prefix.
  for (let k = 1; k < n; k++) {
    const m = (1 << (6 * k)) - 1;
    if ((lo & ~m) !== (hi & ~m)) {
      if ((lo & m) !== 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) !== m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const seq: ByteSeq = [];
  for (let j = 0; j < n; j++) seq.push(a[j]!, b[j]!);
  out.push(seq);
}
