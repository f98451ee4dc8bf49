// JSON numbers byte by byte: plain ones (integer, fraction and exponent digits up to the
// numrange.ts caps) and bounded ones (the DFA of a number's text, numrange.ts).

import { push, refeed, type Frame, type Stack } from './core.js';
import { isDigit } from './json-lexical.js';
import { EXP_DIGITS, FRAC_DIGITS, INT_DIGITS } from './numrange.js';
import type { StrLang } from './strlang.js';

/** A bounded number: DFA state q of its text (numrange.ts); it ends where the next symbol cannot go on. */
export class PatNumFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly lang: StrLang, readonly q: number) {
    this.key = `N${lang.id}.${q}`;
    this.min = lang.min(q, 0);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { lang } = this;
    const q = sym < 256 ? lang.dfa.next(this.q, sym) : -1;
    if (q >= 0 && lang.min(q, 0) < Infinity) out.push(push(below, new PatNumFrame(lang, q)));
    if (this.q !== 0 && lang.done(this.q, 0)) refeed(below, sym, out);
  }
}

// Number phases: 0 after '-', 1 after a leading 0, 2 integer digits, 3 after '.', 4 fraction
// digits, 5 after 'e', 6 after the exponent's sign, 7 exponent digits.
const NUM_DONE = [false, true, true, false, true, false, false, true];

export class NumFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly intOnly: boolean, readonly phase: number, readonly n: number) {
    this.key = `n${intOnly ? 1 : 0}.${phase}.${n}`;
    this.min = NUM_DONE[phase] ? 0 : 1;
  }
  static start(intOnly: boolean, sym: number, below: Stack | null, out: Stack[]): void {
    if (sym === 0x2d) out.push(push(below, new NumFrame(intOnly, 0, 0)));
    else if (sym === 0x30) out.push(push(below, new NumFrame(intOnly, 1, 0)));
    else if (isDigit(sym)) out.push(push(below, new NumFrame(intOnly, 2, 1)));
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { intOnly, phase, n } = this;
    const go = (p: number, k: number): void => void out.push(push(below, new NumFrame(intOnly, p, k)));
    const d = isDigit(sym);
    const dot = sym === 0x2e && !intOnly;
    const e = (sym === 0x65 || sym === 0x45) && !intOnly;
    switch (phase) {
      case 0: if (sym === 0x30) go(1, 0); else if (d) go(2, 1); return;
      case 1: if (dot) go(3, 0); else if (e) go(5, 0); else refeed(below, sym, out); return;
      case 2: if (d && n < INT_DIGITS) go(2, n + 1); else if (dot) go(3, 0); else if (e) go(5, 0); else if (!d) refeed(below, sym, out); return;
      case 3: if (d) go(4, 1); return;
      case 4: if (d && n < FRAC_DIGITS) go(4, n + 1); else if (e) go(5, 0); else if (!d) refeed(below, sym, out); return;
      case 5: if (sym === 0x2b || sym === 0x2d) go(6, 0); else if (d) go(7, 1); return;
      case 6: if (d) go(7, 1); return;
      case 7: if (d && n < EXP_DIGITS) go(7, n + 1); else if (!d) refeed(below, sym, out); return;
    }
  }
}
