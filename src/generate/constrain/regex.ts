// An ECMA-262 regular expression subset (what JSON Schema's `pattern` uses) parsed to a small
// tree: literals and classes as code point sets, groups, alternation, greedy or lazy quantifiers
// (the same language), ^ and $ (whole-string anchors: no multiline flag). Lookaround, back
// references and \b are refused: they are not regular over this automaton, or rarely worth it.

import { ANY, LINE_TERM, complement, normalize, shorthand, type CharSet } from './charset.js';

export type Re =
  | { t: 'set'; s: CharSet }
  | { t: 'seq'; items: Re[] }
  | { t: 'alt'; opts: Re[] }
  | { t: 'rep'; r: Re; min: number; max: number }
  | { t: 'bol' }
  | { t: 'eol' };

/** Quantifier bounds past this are refused (the automaton copies the repeated part). */
export const MAX_REPEAT = 1000;

export class RegexError extends Error {}

const SYNTAX = new Set('^$\\.*+?()[]{}|/'.split('').map((c) => c.codePointAt(0)!));

class Parser {
  private i = 0;
  private readonly cps: number[];
  constructor(readonly src: string) {
    this.cps = [...src].map((c) => c.codePointAt(0)!);
  }

  private fail(what: string): never {
    throw new RegexError(`${what} at offset ${this.i} of /${this.src}/`);
  }
  private peek(k = 0): number | undefined {
    return this.cps[this.i + k];
  }
  private eat(c: string): boolean {
    if (this.peek() === c.codePointAt(0)) {
      this.i++;
      return true;
    }
    return false;
  }

  parse(): Re {
    const r = this.alt();
    if (this.i < this.cps.length) this.fail(`unexpected ${String.fromCodePoint(this.peek()!)}`);
    return r;
  }

  private alt(): Re {
    const opts = [this.seq()];
    while (this.eat('|')) opts.push(this.seq());
    return opts.length === 1 ? opts[0]! : { t: 'alt', opts };
  }

  private seq(): Re {
    const items: Re[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === 0x7c || c === 0x29) break;
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return items.length === 1 ? items[0]! : { t: 'seq', items };
  }

  private quantified(atom: Re): Re {
    let r = atom;
    for (;;) {
      let min: number;
      let max: number;
      const c = this.peek();
      if (c === 0x2a) [min, max] = [0, Infinity];
      else if (c === 0x2b) [min, max] = [1, Infinity];
      else if (c === 0x3f) [min, max] = [0, 1];
      else if (c === 0x7b) {
        const b = this.braces();
        if (!b) return r;
        [min, max] = b;
      } else return r;
      if (c !== 0x7b) this.i++;
      if (r.t === 'bol' || r.t === 'eol') this.fail('a quantified anchor');
      if (r.t === 'rep') this.fail('a quantifier after a quantifier');
      this.eat('?'); // lazy: the same strings
      if (min > MAX_REPEAT || (max !== Infinity && max > MAX_REPEAT)) this.fail(`a repeat count over ${MAX_REPEAT}`);
      if (max < min) this.fail('a quantifier {n,m} with m < n');
      r = { t: 'rep', r, min, max };
    }
  }

  /** {n}, {n,}, {n,m} at the cursor (consumed), or null when the brace is a literal. */
  private braces(): [number, number] | null {
    const m = /^\{(\d+)(,(\d*))?\}/.exec(String.fromCodePoint(...this.cps.slice(this.i, this.i + 24)));
    if (!m) return null;
    this.i += [...m[0]].length;
    const min = Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
    return [min, max];
  }

  private atom(): Re {
    const c = this.peek()!;
    this.i++;
    switch (c) {
      case 0x5e: return { t: 'bol' };
      case 0x24: return { t: 'eol' };
      case 0x2e: return { t: 'set', s: complement(LINE_TERM) };
      case 0x28: {
        if (this.eat('?')) {
          if (this.eat(':')) {
            /* non-capturing */
          } else if (this.peek() === 0x3c && this.peek(1) !== 0x3d && this.peek(1) !== 0x21) {
            this.i++;
            while (this.peek() !== undefined && this.peek() !== 0x3e) this.i++;
            if (!this.eat('>')) this.fail('an unterminated group name');
          } else this.fail('lookaround or an inline flag');
        }
        const r = this.alt();
        if (!this.eat(')')) this.fail('a missing )');
        return r;
      }
      case 0x5b: return { t: 'set', s: this.cls() };
      case 0x5c: return this.escape(false);
      case 0x29: this.fail('an unmatched )');
      // eslint-disable-next-line no-fallthrough
      case 0x2a: case 0x2b: case 0x3f: this.fail('a quantifier with nothing before it');
      // eslint-disable-next-line no-fallthrough
      default:
        if (c === 0x7b && this.braces()) this.fail('a quantifier with nothing before it');
        return { t: 'set', s: [c, c] };
    }
  }

  /** After a backslash: a class escape, a character escape, or (outside a class) a refusal. */
  private escape(inClass: boolean, negated = false): Re & { t: 'set' } {
    const c = this.peek();
    if (c === undefined) this.fail('a trailing backslash');
    this.i++;
    const ch = String.fromCodePoint(c);
    const mode = inClass && negated ? 'wide' : 'narrow';
    const flip = mode === 'wide' ? 'narrow' : 'wide';
    switch (ch) {
      case 'd': case 'w': case 's': return { t: 'set', s: shorthand(ch, mode) };
      case 'D': case 'W': case 'S': return { t: 'set', s: complement(shorthand(ch.toLowerCase() as 'd', flip)) };
      case 'n': return set1(0x0a);
      case 'r': return set1(0x0d);
      case 't': return set1(0x09);
      case 'f': return set1(0x0c);
      case 'v': return set1(0x0b);
      case '0':
        if (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) this.fail('an octal escape');
        return set1(0);
      case 'c': {
        const l = this.peek();
        if (l !== undefined && ((l >= 0x41 && l <= 0x5a) || (l >= 0x61 && l <= 0x7a))) {
          this.i++;
          return set1(l % 32);
        }
        this.fail('a bad \\c escape');
      }
      // eslint-disable-next-line no-fallthrough
      case 'x': return set1(this.hex(2));
      case 'u': {
        if (this.eat('{')) {
          let v = 0;
          let n = 0;
          while (this.peek() !== undefined && this.peek() !== 0x7d) {
            v = v * 16 + this.hexDigit();
            n++;
          }
          if (!this.eat('}') || n === 0 || v > 0x10ffff) this.fail('a bad \\u{...} escape');
          return set1(v);
        }
        const v = this.hex(4);
        if (v >= 0xd800 && v <= 0xdbff && this.peek() === 0x5c && this.peek(1) === 0x75) {
          const save = this.i;
          this.i += 2;
          const lo = this.hex(4);
          if (lo >= 0xdc00 && lo <= 0xdfff) return set1(0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00));
          this.i = save;
        }
        return set1(v);
      }
      case 'b':
        if (inClass) return set1(0x08);
        this.fail('a word boundary (\\b)');
      // eslint-disable-next-line no-fallthrough
      case 'B': this.fail('a word boundary (\\B)');
      // eslint-disable-next-line no-fallthrough
      case 'p': case 'P': this.fail('a Unicode property escape');
      // eslint-disable-next-line no-fallthrough
      case 'k': this.fail('a named back reference');
      // eslint-disable-next-line no-fallthrough
      default:
        if (c >= 0x31 && c <= 0x39) this.fail('a back reference');
        if (inClass && c === 0x2d) return set1(c);
        if (SYNTAX.has(c) || !/[A-Za-z0-9]/.test(ch)) return set1(c);
        this.fail(`an unknown escape \\${ch}`);
    }
  }

  private hexDigit(): number {
    const c = this.peek();
    const v = c === undefined ? NaN : parseInt(String.fromCodePoint(c), 16);
    if (Number.isNaN(v)) this.fail('a bad hex escape');
    this.i++;
    return v;
  }
  private hex(n: number): number {
    let v = 0;
    for (let k = 0; k < n; k++) v = v * 16 + this.hexDigit();
    return v;
  }

  /** A bracket class after '['. */
  private cls(): CharSet {
    const negated = this.eat('^');
    const parts: number[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined) this.fail('an unterminated [');
      if (c === 0x5d) {
        this.i++;
        break;
      }
      const lo = this.classAtom(negated);
      if (this.peek() === 0x2d && this.peek(1) !== 0x5d && this.peek(1) !== undefined) {
        this.i++;
        const hi = this.classAtom(negated);
        if (lo.length !== 2 || hi.length !== 2 || lo[0] !== lo[1] || hi[0] !== hi[1]) this.fail('a range with a class at one end');
        if (hi[0]! < lo[0]!) this.fail('a range out of order');
        parts.push(lo[0]!, hi[0]!);
      } else parts.push(...lo);
    }
    const s = normalize(parts);
    return negated ? complement(s) : s;
  }

  private classAtom(negated: boolean): CharSet {
    const c = this.peek()!;
    this.i++;
    if (c === 0x5c) return this.escape(true, negated).s;
    return [c, c];
  }
}

const set1 = (c: number): Re & { t: 'set' } => ({ t: 'set', s: [c, c] });

/** Parse a pattern; throws RegexError on what it cannot hold. */
export function parseRegex(src: string): Re {
  return new Parser(src).parse();
}

/** Any string: the unanchored search's context on either side. */
export const ANY_STRING: Re = { t: 'rep', r: { t: 'set', s: ANY }, min: 0, max: Infinity };
