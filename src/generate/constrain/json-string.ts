// JSON strings held to a compiled schema, byte by byte: escapes, UTF-8, length in code points,
// patterns (a DFA of the text so far); and raw string arguments (K3's, no quotes or escapes),
// ended by the next control symbol.

import { popped, push, refeed, type Frame, type Stack } from './core.js';
import { BSL, Q, isHex } from './json-lexical.js';
import type { Atom } from './schema-atoms.js';
import { ESCAPES, strLang, type StrLang } from './strlang.js';
import { utf8Next, utf8Pending } from './symbols.js';
import type { PlainClass } from './vocab.js';

// Escape states: 0 none, 1 after '\', 2 first hex digit of \u, 7 second after a 'd' (no
// surrogate halves: their length would count differently), 3-5 the later hex digits.
const ESC_REST = [0, 1, 4, 3, 2, 1, 0, 3];

/** Inside a JSON string of `a`, `count` code points written. */
export class StrFrame implements Frame {
  readonly key: string;
  readonly min: number;
  readonly plain: PlainClass | undefined;
  constructor(readonly a: Atom, readonly count: number, readonly esc: number, readonly u8: number) {
    this.key = `s${a.id}.${count}.${esc}.${u8}`;
    this.plain = esc === 0 && u8 === 0 ? 'json' : undefined;
    this.min = ESC_REST[esc]! + utf8Pending(u8) + Math.max(0, a.minLength - count) + 1;
  }
  private next(count: number, esc: number, u8: number, below: Stack | null, out: Stack[]): void {
    // Past both limits the count changes nothing: cap it so the states stay few.
    const cap = Number.isFinite(this.a.maxLength) ? this.a.maxLength : this.a.minLength;
    out.push(push(below, new StrFrame(this.a, Math.min(count, cap), esc, u8)));
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (sym > 255) return;
    const { a, count, esc, u8 } = this;
    if (esc === 1) {
      if (sym === 0x75) this.next(count, 2, 0, below, out);
      else if ('"\\/bfnrt'.includes(String.fromCharCode(sym))) this.next(count, 0, 0, below, out);
    } else if (esc === 2) {
      if (sym === 0x64 || sym === 0x44) this.next(count, 7, 0, below, out);
      else if (isHex(sym)) this.next(count, 3, 0, below, out);
    } else if (esc === 7) {
      if (sym >= 0x30 && sym <= 0x37) this.next(count, 4, 0, below, out);
    } else if (esc >= 3) {
      if (isHex(sym)) this.next(count, esc === 5 ? 0 : esc + 1, 0, below, out);
    } else if (u8 !== 0) {
      const s = utf8Next(u8, sym);
      if (s >= 0) this.next(count, 0, s, below, out);
    } else if (sym === Q) {
      if (count >= a.minLength) popped(below, out);
    } else if (sym === BSL) {
      if (count < a.maxLength) this.next(count + 1, 1, 0, below, out);
    } else if (sym >= 0x20 && count < a.maxLength) {
      const s = utf8Next(0, sym);
      if (s >= 0) this.next(count + 1, 0, s, below, out);
    }
  }
}

/** The frame just after a string's opening quote. */
export function strStart(a: Atom): Frame {
  const lang = strLang(a, 'json');
  return lang && !lang.dfa.universal(0) ? new PatStrFrame(lang, a, 0, 0, false) : new StrFrame(a, 0, 0, 0);
}

/** Inside a JSON string held to patterns: DFA state q of the text so far, `count` code points; `esc` after a backslash. */
export class PatStrFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly lang: StrLang, readonly a: Atom, readonly q: number, readonly count: number, readonly esc: boolean) {
    this.key = `p${lang.id}.${q}.${count}.${esc ? 1 : 0}`;
    let m = Infinity;
    if (!esc) m = lang.min(q, count);
    else {
      for (const [, b] of ESCAPES) {
        const c = lang.nextCount(count, b);
        if (c >= 0) m = Math.min(m, 1 + lang.min(lang.dfa.next(q, b), c));
      }
    }
    this.min = m + 1;
  }
  /** The text gains byte `b`. */
  private feed(b: number, below: Stack | null, out: Stack[]): void {
    const { lang, a } = this;
    const q = lang.dfa.next(this.q, b);
    const c = lang.nextCount(this.count, b);
    if (q < 0 || c < 0 || lang.min(q, c) === Infinity) return;
    // once the patterns hold whatever follows, the plain string frame goes on (escapes, plain-text masks)
    if (lang.dfa.universal(q)) out.push(push(below, new StrFrame(a, c, 0, lang.dfa.phase[q]!)));
    else out.push(push(below, new PatStrFrame(lang, a, q, c, false)));
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (sym > 255) return;
    if (this.esc) {
      for (const [e, b] of ESCAPES) if (e === sym) this.feed(b, below, out);
    } else if (sym === Q) {
      if (this.lang.done(this.q, this.count)) popped(below, out);
    } else if (sym === BSL) {
      const f = new PatStrFrame(this.lang, this.a, this.q, this.count, true);
      if (f.min < Infinity) out.push(push(below, f));
    } else if (sym >= 0x20) this.feed(sym, below, out);
  }
}

/** A raw string argument held to patterns (see PatStrFrame), ended by the next control symbol. */
export class RawPatFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly lang: StrLang, readonly a: Atom, readonly q: number, readonly count: number) {
    this.key = `P${lang.id}.${q}.${count}`;
    this.min = lang.min(q, count);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { lang, a } = this;
    if (sym > 255) {
      if (lang.done(this.q, this.count)) refeed(below, sym, out);
      return;
    }
    const q = lang.dfa.next(this.q, sym);
    const c = lang.nextCount(this.count, sym);
    if (q < 0 || c < 0 || lang.min(q, c) === Infinity) return;
    if (lang.dfa.universal(q)) out.push(push(below, new RawStrFrame(a, c, lang.dfa.phase[q]!)));
    else out.push(push(below, new RawPatFrame(lang, a, q, c)));
  }
}

/** A raw string value (K3 string arguments): any UTF-8 text, ended by the next control symbol. */
export class RawStrFrame implements Frame {
  readonly key: string;
  readonly min: number;
  readonly plain: PlainClass | undefined;
  constructor(readonly a: Atom, readonly count: number, readonly u8: number) {
    this.key = `r${a.id}.${count}.${u8}`;
    this.plain = u8 === 0 ? 'raw' : undefined;
    this.min = utf8Pending(u8) + Math.max(0, a.minLength - count);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { a, count, u8 } = this;
    if (sym > 255) {
      if (u8 === 0 && count >= a.minLength) refeed(below, sym, out);
      return;
    }
    const s = utf8Next(u8, sym);
    if (s < 0) return;
    const n = u8 === 0 ? count + 1 : count;
    if (n > a.maxLength) return;
    const cap = Number.isFinite(a.maxLength) ? a.maxLength : a.minLength;
    out.push(push(below, new RawStrFrame(a, Math.min(n, cap), s)));
  }
}
