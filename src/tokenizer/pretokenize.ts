// Kimi's pre-tokenization (docs/spec/ARCHITECTURE.md §6.2-6.3): the reference's long-run split, the
// special-token cut, and the split regex, written for JavaScript's RegExp.
//
// The reference pattern (tokenization_kimi.py, Rust `fancy-regex` syntax) is
//   [\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Rewritten here, each change keeping Rust's meaning (all pinned by the golden pretokens):
// * `\p{Han}` is Script=Han (not Script_Extensions): `\p{sc=Han}` (bare `\p{Han}` is a JS SyntaxError).
// * `[A&&[^\p{Han}]]` (intersection) is the `v` flag's set subtraction `[[A]--\p{sc=Han}]`.
// * `(?i:'s|…)` (a scoped flag group JS lacks) is expanded by hand with Unicode simple case
//   folding: the only non-ASCII character folding to one of s,t,r,e,v,m,l,d is U+017F (ſ → s).
// * `\s` is Unicode White_Space in Rust; JS's `\s` adds U+FEFF and lacks U+0085, so
//   `\p{White_Space}` / `\P{White_Space}` are written instead.
// JS RegExp is a backtracking leftmost-first engine, as fancy-regex is for this pattern, so the
// alternation order means the same thing.

const HAN = String.raw`\p{sc=Han}`;
const UPPERISH = String.raw`[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]--${HAN}]`;
const LOWERISH = String.raw`[[\p{Ll}\p{Lm}\p{Lo}\p{M}]--${HAN}]`;
const CONTRACTION = String.raw`(?:'(?:[sS\u017F]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))?`;
const LEAD = String.raw`[^\r\n\p{L}\p{N}]?`;
const WS = String.raw`\p{White_Space}`;

/** The Kimi split pattern as JavaScript source (needs the `v` flag). */
export const KIMI_PATTERN_SOURCE = [
  String.raw`${HAN}+`,
  String.raw`${LEAD}${UPPERISH}*${LOWERISH}+${CONTRACTION}`,
  String.raw`${LEAD}${UPPERISH}+${LOWERISH}*${CONTRACTION}`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^${WS}\p{L}\p{N}]+[\r\n]*`,
  String.raw`${WS}*[\r\n]+`,
  String.raw`${WS}+(?!\P{White_Space})`,
  String.raw`${WS}+`,
].join('|');

// Built with the constructor: TypeScript's target (ES2022) would reject a `v`-flag literal;
// Node >= 20 supports the flag at run time.
const KIMI_REGEX = new RegExp(KIMI_PATTERN_SOURCE, 'gv');

/** The regex matches of `text` in order (tiktoken's `find_iter`; unmatched characters are skipped,
 *  though the pattern matches every character). */
export function splitPieces(text: string): string[] {
  const out: string[] = [];
  if (text.length === 0) return out;
  KIMI_REGEX.lastIndex = 0;
  for (;;) {
    const m = KIMI_REGEX.exec(text);
    if (m === null) break;
    out.push(m[0]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// docs/spec/ARCHITECTURE.md §6.3 step 1, the reference quirk (tokenization_kimi.py `encode`): the text is cut into
// 400,000-character chunks, and every run of more than 25,000 consecutive whitespace or
// non-whitespace characters (Python `str.isspace`) is cut, before special tokens and the regex
// see it. It changes ids (long_runs.jsonl), so it is reproduced. Python counts code points.

export const MAX_ENCODE_CHARS = 400_000;
export const MAX_RUN_CHARS = 25_000;

/** Python `str.isspace` for one code point: bidi class WS/B/S or category Zs. */
export function pyIsSpace(cp: number): boolean {
  if (cp <= 0x20) return cp === 0x20 || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
  if (cp < 0x85) return false;
  return (
    cp === 0x85 ||
    cp === 0xa0 ||
    cp === 0x1680 ||
    (cp >= 0x2000 && cp <= 0x200a) ||
    cp === 0x2028 ||
    cp === 0x2029 ||
    cp === 0x202f ||
    cp === 0x205f ||
    cp === 0x3000
  );
}

/** `_split_whitespaces_or_nonwhitespaces(s, maxRun)` of the reference, by code points. */
function splitRuns(s: string, maxRun: number, out: string[]): void {
  // A string of at most maxRun UTF-16 units has at most maxRun code points: nothing to cut.
  if (s.length <= maxRun) {
    out.push(s);
    return;
  }
  let runLen = 0;
  let runIsSpace = pyIsSpace(s.codePointAt(0)!);
  let sliceStart = 0;
  for (let i = 0; i < s.length; ) {
    const cp = s.codePointAt(i)!;
    const isSpace = pyIsSpace(cp);
    if (runIsSpace !== isSpace) {
      runLen = 1;
      runIsSpace = isSpace;
    } else {
      runLen += 1;
      if (runLen > maxRun) {
        out.push(s.slice(sliceStart, i));
        sliceStart = i;
        runLen = 1;
      }
    }
    i += cp > 0xffff ? 2 : 1;
  }
  out.push(s.slice(sliceStart));
}

/** The reference's chunks of `text` (docs/spec/ARCHITECTURE.md §6.3 step 1); each is encoded independently. */
export function referenceChunks(text: string, maxChars = MAX_ENCODE_CHARS, maxRun = MAX_RUN_CHARS): string[] {
  const out: string[] = [];
  if (text.length <= maxChars) {
    splitRuns(text, maxRun, out);
    return out;
  }
  // Cut every maxChars code points.
  let start = 0;
  let count = 0;
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i)!;
    i += cp > 0xffff ? 2 : 1;
    if (++count === maxChars) {
      splitRuns(text.slice(start, i), maxRun, out);
      start = i;
      count = 0;
    }
  }
  if (start < text.length) splitRuns(text.slice(start), maxRun, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Special tokens: cut out before the regex runs (the regex never sees across them).

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/** A matcher for a set of special strings: at each position the longest one wins (tiktoken
 *  uses an alternation whose order is unspecified; no Kimi special is a prefix of another). */
export function specialMatcher(strings: Iterable<string>): RegExp | null {
  const list = [...new Set(strings)].filter((s) => s.length > 0).sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
  if (list.length === 0) return null;
  return new RegExp(list.map(escapeRegex).join('|'), 'g');
}

export interface Segment {
  text: string;
  /** true when `text` is an allowed special string. */
  special: boolean;
}

/** Split `text` at the matches of `matcher` (null: no specials). Empty text segments are dropped. */
export function splitSpecials(text: string, matcher: RegExp | null): Segment[] {
  if (matcher === null) return text.length ? [{ text, special: false }] : [];
  const out: Segment[] = [];
  matcher.lastIndex = 0;
  let last = 0;
  for (;;) {
    const m = matcher.exec(text);
    if (m === null) break;
    if (m.index > last) out.push({ text: text.slice(last, m.index), special: false });
    out.push({ text: m[0], special: true });
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push({ text: text.slice(last), special: false });
  return out;
}
