// JSON values held to a compiled schema, byte by byte: strings (escapes, UTF-8, length in code
// points), numbers, literals, enums, objects (declared keys once each, required keys before '}'),
// arrays (prefixItems, items, minItems / maxItems). Layout 'json' allows whitespace runs of up
// to WS_CAP bytes where JSON allows them; 'py' writes exactly Python's ", " and ": ".

import { Lit, LitFrame, popped, push, refeed, newId, type Frame, type G, type Stack } from './core.js';
import { keyLen, MinLengths, dumps, owedKeys, rawStringMin, sepLen, usedCount, type Layout } from './minlen.js';
import { EXP_DIGITS, FRAC_DIGITS, INT_DIGITS } from './numrange.js';
import { K_ARR, K_BOOL, K_INT, K_NULL, K_NUM, K_OBJ, K_STR, kindOf, type Atom, type Node } from './schema.js';
import { Dfa, type Component } from './dfa.js';
import { parseRegex } from './regex.js';
import { ESCAPES, numLang, shortestWithEnds, strLang, type StrLang } from './strlang.js';
import { bytesOf, utf8Next, utf8Pending } from './symbols.js';
import { ByteTrie } from './trie.js';
import type { PlainClass } from './vocab.js';

/** Whitespace allowed between JSON tokens: spaces only (see WS_CAP). */
const isWs = (b: number): boolean => b === 0x20;

/** Longest whitespace run between JSON tokens: one space. K3's response-format message asks for
 *  raw JSON "without any additional formatting", and Moonshot's API returns no newline or tab. */
export const WS_CAP = 1;

const Q = 0x22;
const BSL = 0x5c;
const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39;
const isHex = (b: number): boolean => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

const TRUE = new Lit(bytesOf('true'));
const FALSE = new Lit(bytesOf('false'));
const NULL = new Lit(bytesOf('null'));

/** Compiled schema nodes in one layout, with the caches their frames share. */
export class JsonCtx {
  readonly mins: MinLengths;
  private values = new Map<string, G>();
  private raws = new Map<number, G>();
  private enums = new Map<string, ByteTrie>();
  private keyTries = new Map<number, ByteTrie>();
  private keyLits = new Map<string, Lit>();
  private objMins = new Map<string, number>();
  private owed = new Map<string, { cost: number; count: number }>();
  private keyLangs = new Map<number, KeyLang>();

  constructor(nodes: readonly Node[], readonly layout: Layout) {
    this.mins = new MinLengths(nodes, layout);
  }

  get sep(): number {
    return sepLen(this.layout);
  }

  /** A JSON value of `node` whose kind is in `mask`. */
  value(node: Node, mask = 127): G {
    const k = `${node.id}.${mask}`;
    let g = this.values.get(k);
    if (!g) this.values.set(k, (g = new ValueG(this, node, mask)));
    return g;
  }

  /** A string value of `node` written raw (no quotes, no escapes), as K3 writes string arguments. */
  raw(node: Node): G {
    let g = this.raws.get(node.id);
    if (!g) this.raws.set(node.id, (g = new RawG(node)));
    return g;
  }

  enumTrie(a: Atom, mask: number, raw = false): ByteTrie {
    const k = `${a.id}.${mask}.${raw}`;
    let t = this.enums.get(k);
    if (!t) {
      const lits = a.lits!.filter((v) => (raw ? typeof v === 'string' : (kindOf(v) & mask) !== 0));
      t = new ByteTrie(lits.map((v) => bytesOf(raw ? (v as string) : dumps(v, this.layout))));
      this.enums.set(k, t);
    }
    return t;
  }

  /** Declared keys of `a` as written between the quotes. */
  keyTrie(a: Atom): ByteTrie {
    let t = this.keyTries.get(a.id);
    if (!t) this.keyTries.set(a.id, (t = new ByteTrie([...a.names, ...a.banned].map((n) => bytesOf(JSON.stringify(n).slice(1))))));
    return t;
  }

  /** The rest of declared key i after its opening quote. */
  keyLit(a: Atom, i: number): Lit {
    const k = `${a.id}.${i}`;
    let l = this.keyLits.get(k);
    if (!l) this.keyLits.set(k, (l = new Lit(bytesOf(JSON.stringify(a.names[i]!).slice(1)))));
    return l;
  }

  /** The automaton of an atom's free keys told apart by patterns (patternProperties, propertyNames), or null. */
  keyLang(a: Atom): KeyLang | null {
    if (a.keyClasses.length === 0) return null;
    let k = this.keyLangs.get(a.id);
    if (!k) this.keyLangs.set(a.id, (k = new KeyLang(this, a)));
    return k;
  }

  /** The value node after a key: declared (prop >= 0), free (-1), or free of class -2 - prop. */
  valueNode(a: Atom, prop: number): Node {
    return prop >= 0 ? a.props[prop]! : prop === -1 ? a.additional! : a.keyClasses[-2 - prop]!;
  }

  /** May a free key be written at all? */
  freeKeyOk(a: Atom): boolean {
    const kl = this.keyLang(a);
    if (kl) return kl.min(0) < Infinity;
    return !!a.additional && this.mins.node(a.additional) < Infinity;
  }

  /** Fewest bytes of a free key, its separator and value (quotes included). */
  freeEntryMin(a: Atom): number {
    const kl = this.keyLang(a);
    if (kl) return 1 + kl.min(0);
    return a.additional ? this.freeKeyLen(a) + this.sep + this.mins.node(a.additional) : Infinity;
  }

  /** Fewest bytes of a key other than the declared ones (quotes included). */
  freeKeyLen(a: Atom): number {
    return a.names.includes('') || a.banned.includes('') ? 3 : 2;
  }

  /** Fewest bytes that close an object of `a` after a value, with `used` keys written. */
  objAfterValue(a: Atom, used: string): number {
    const k = `${a.id}:${used}`;
    let m = this.objMins.get(k);
    if (m === undefined) {
      const { cost, count } = this.missing(a, used);
      m = count === 0 ? 1 : count * this.sep + cost + 1;
      this.objMins.set(k, m);
    }
    return m;
  }

  /** The declared keys still owed (required ones, and enough for minProperties) and their fewest bytes. */
  missing(a: Atom, used: string): { cost: number; count: number } {
    const k = `${a.id}:${used}`;
    let m = this.owed.get(k);
    if (!m) this.owed.set(k, (m = this.owedOf(a, used)));
    return m;
  }

  private owedOf(a: Atom, used: string): { cost: number; count: number } {
    return owedKeys((i) => keyLen(a.names[i]!) + this.sep + this.mins.node(a.props[i]!), a.names.length, a.required, used, a.minProps);
  }

  /** May a key go in with `used` and `extra` free keys written, leaving `usedAfter`? (maxProperties) */
  keyFits(a: Atom, usedAfter: string, extraAfter: number): boolean {
    if (a.maxProps === Infinity) return true;
    return usedCount(usedAfter) + extraAfter + this.missing(a, usedAfter).count <= a.maxProps;
  }

  /** Fewest bytes from just before a key (after '{' or ', ') to the end of the object. */
  objBeforeKey(a: Atom, used: string, first: boolean): number {
    const { cost, count } = this.missing(a, used);
    if (count > 0) return cost + (count - 1) * this.sep + 1;
    if (first) return 1;
    let best = Infinity;
    for (let i = 0; i < a.names.length; i++) if (used[i] !== '1') best = Math.min(best, keyLen(a.names[i]!) + this.sep + this.mins.node(a.props[i]!));
    best = Math.min(best, this.freeEntryMin(a));
    return best + 1;
  }

  itemOf(a: Atom, j: number): Node | null {
    if (j < a.prefix.length) return a.prefix[j]!;
    return j < a.maxItems ? a.items : null;
  }

  /** Fewest bytes that close an array of `a` after `i` items. */
  arrAfterValue(a: Atom, i: number): number {
    let m = 1;
    for (let j = i; j < a.minItems; j++) {
      const item = this.itemOf(a, j);
      if (!item) return Infinity;
      m += this.sep + this.mins.node(item);
    }
    return m;
  }
}

class ValueG implements G {
  readonly id = newId();
  constructor(readonly ctx: JsonCtx, readonly node: Node, readonly mask: number) {}
  get min(): number {
    return this.ctx.mins.node(this.node, this.mask);
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    const { ctx, mask } = this;
    const mins = ctx.mins;
    for (const a of this.node.atoms) {
      if (a.lits) {
        const t = ctx.enumTrie(a, mask);
        if (!t.empty) new EnumFrame(t, 0).step(sym, below, out);
        continue;
      }
      const k = a.kinds & mask;
      const ok = (kind: number): boolean => (k & kind) !== 0 && mins.atom(a, kind) < Infinity;
      if (sym === Q) {
        if (ok(K_STR)) out.push(push(below, strStart(a)));
      } else if (sym === 0x7b) {
        if (ok(K_OBJ)) out.push(push(below, new ObjFrame(ctx, a, OPEN_, '0'.repeat(a.names.length), -1, false, 0)));
      } else if (sym === 0x5b) {
        if (ok(K_ARR)) out.push(push(below, new ArrFrame(ctx, a, OPEN_, 0, false, 0)));
      } else if (sym === 0x2d || isDigit(sym)) {
        if (ok(K_INT) || ok(K_NUM)) {
          const lang = numLang(a, !(k & K_NUM));
          if (lang) new PatNumFrame(lang, 0).step(sym, below, out);
          else NumFrame.start(!(k & K_NUM), sym, below, out);
        }
      } else if (sym === 0x74) {
        if (ok(K_BOOL)) TRUE.enter(below, sym, out);
      } else if (sym === 0x66) {
        if (ok(K_BOOL)) FALSE.enter(below, sym, out);
      } else if (sym === 0x6e) {
        if (ok(K_NULL)) NULL.enter(below, sym, out);
      }
    }
  }
}

class RawG implements G {
  readonly id = newId();
  readonly min: number;
  constructor(readonly node: Node) {
    this.min = rawStringMin(node);
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    for (const a of this.node.atoms) {
      if (a.lits) {
        const t = new ByteTrie(a.lits.filter((v): v is string => typeof v === 'string').map(bytesOf));
        if (!t.empty) new EnumFrame(t, 0).step(sym, below, out);
      } else if (a.kinds & K_STR) {
        const lang = strLang(a, 'raw');
        if (lang && !lang.dfa.universal(0)) new RawPatFrame(lang, a, 0, 0).step(sym, below, out);
        else new RawStrFrame(a, 0, 0).step(sym, below, out);
      }
    }
  }
}

/** Whitespace between JSON tokens (before and after a document). */
export class WsG implements G {
  readonly id = newId();
  readonly min = 0;
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    new WsFrame(0).step(sym, below, out);
  }
}

class WsFrame implements Frame {
  readonly key: string;
  readonly min = 0;
  constructor(readonly n: number) {
    this.key = `w${n}`;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (isWs(sym) && this.n < WS_CAP) out.push(push(below, new WsFrame(this.n + 1)));
    else refeed(below, sym, out);
  }
}

/** Inside a literal from a set (enum, const), `node` bytes in. */
class EnumFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly t: ByteTrie, readonly node: number) {
    this.key = `e${t.id}.${node}`;
    this.min = t.minRest(node);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const c = sym < 256 ? this.t.next(this.node, sym) : -1;
    if (c >= 0 && this.t.minRest(c) < Infinity) out.push(push(below, new EnumFrame(this.t, c)));
    if (this.t.terminal[this.node]) refeed(below, sym, out);
  }
}

// Escape states: 0 none, 1 after '\', 2 first hex digit of \u, 7 second after a 'd' (no
// surrogate halves: their length would count differently), 3-5 the later hex digits.
const ESC_REST = [0, 1, 4, 3, 2, 1, 0, 3];

/** Inside a JSON string of `a`, `count` code points written. */
class StrFrame implements Frame {
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
function strStart(a: Atom): Frame {
  const lang = strLang(a, 'json');
  return lang && !lang.dfa.universal(0) ? new PatStrFrame(lang, a, 0, 0, false) : new StrFrame(a, 0, 0, 0);
}

/** Inside a JSON string held to patterns: DFA state q of the text so far, `count` code points; `esc` after a backslash. */
class PatStrFrame implements Frame {
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
class RawPatFrame implements Frame {
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

/** A bounded number: DFA state q of its text (numrange.ts); it ends where the next symbol cannot go on. */
class PatNumFrame implements Frame {
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

/** A raw string value (K3 string arguments): any UTF-8 text, ended by the next control symbol. */
class RawStrFrame implements Frame {
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

// Number phases: 0 after '-', 1 after a leading 0, 2 integer digits, 3 after '.', 4 fraction
// digits, 5 after 'e', 6 after the exponent's sign, 7 exponent digits.
const NUM_DONE = [false, true, true, false, true, false, false, true];

class NumFrame implements Frame {
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

const OPEN_ = 0;
const KEYED = 1;
const BEFORE_VAL = 2;
const AFTER_VAL = 3;
const BEFORE_KEY = 4;

/** Inside an object of `a`: `used` marks the declared keys written ('1' at their index). */
class ObjFrame implements Frame {
  readonly key: string;
  readonly min: number;
  /** `extra`: free keys written (counted only under maxProperties). */
  constructor(readonly ctx: JsonCtx, readonly a: Atom, readonly phase: number, readonly used: string, readonly prop: number, readonly sp: boolean, readonly ws: number, readonly extra = 0) {
    this.key = `o${ctx.layout[0]}${a.id}.${phase}.${used}.${prop}.${sp ? 1 : 0}.${ws}.${extra}`;
    const sp1 = sp ? 1 : 0;
    const value = (): number => ctx.mins.node(ctx.valueNode(a, prop));
    switch (phase) {
      case OPEN_: this.min = ctx.objBeforeKey(a, used, true); break;
      case KEYED: this.min = ctx.sep + value() + ctx.objAfterValue(a, used); break;
      case BEFORE_VAL: this.min = sp1 + value() + ctx.objAfterValue(a, used); break;
      case AFTER_VAL: this.min = ctx.objAfterValue(a, used); break;
      default: this.min = sp1 + ctx.objBeforeKey(a, used, false);
    }
  }
  private go(phase: number, used: string, prop: number, sp: boolean, ws: number, extra = this.extra): ObjFrame {
    return new ObjFrame(this.ctx, this.a, phase, used, prop, sp, ws, extra);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { ctx, a, phase, used, prop } = this;
    const py = ctx.layout === 'py';
    if (this.sp) {
      if (sym === 0x20) out.push(push(below, this.go(phase, used, prop, false, 0)));
      return;
    }
    if (!py && isWs(sym)) {
      if (this.ws < WS_CAP) out.push(push(below, this.go(phase, used, prop, false, this.ws + 1)));
      return;
    }
    switch (phase) {
      case OPEN_:
        if (sym === 0x7d && ctx.missing(a, used).count === 0) popped(below, out);
        else if (sym === Q) this.keys(below, out);
        return;
      case KEYED:
        if (sym === 0x3a) out.push(push(below, this.go(BEFORE_VAL, used, prop, py, 0)));
        return;
      case BEFORE_VAL: {
        const node = ctx.valueNode(a, prop);
        ctx.value(node).enter(push(below, this.go(AFTER_VAL, used, -1, false, 0)), sym, out);
        return;
      }
      case AFTER_VAL:
        if (sym === 0x2c && this.canAdd()) out.push(push(below, this.go(BEFORE_KEY, used, -1, py, 0)));
        else if (sym === 0x7d && ctx.missing(a, used).count === 0) popped(below, out);
        return;
      default:
        if (sym === Q) this.keys(below, out);
    }
  }
  private canAdd(): boolean {
    return ctx_canAdd(this.ctx, this.a, this.used, this.extra);
  }
  /** The opening quote of a key is read: one branch per declared key not yet used, and one for any other key. */
  private keys(below: Stack | null, out: Stack[]): void {
    const { ctx, a, used } = this;
    for (let i = 0; i < a.names.length; i++) {
      if (used[i] === '1' || ctx.mins.node(a.props[i]!) === Infinity) continue;
      const u = used.slice(0, i) + '1' + used.slice(i + 1);
      if (!ctx.keyFits(a, u, this.extra)) continue;
      out.push(push(push(below, this.go(KEYED, u, i, false, 0)), new LitFrame(ctx.keyLit(a, i), 0)));
    }
    const extra = a.maxProps === Infinity ? 0 : this.extra + 1;
    if (!ctx.freeKeyOk(a) || !ctx.keyFits(a, used, extra)) return;
    if (ctx.keyLang(a)) out.push(push(below, new PatKeyFrame(ctx, a, 0, used, extra)));
    else out.push(push(push(below, this.go(KEYED, used, -1, false, 0, extra)), new FreeKeyFrame(ctx.keyTrie(a), a, 0, 0)));
  }
}

function ctx_canAdd(ctx: JsonCtx, a: Atom, used: string, extra: number): boolean {
  if (ctx.freeKeyOk(a) && ctx.keyFits(a, used, a.maxProps === Infinity ? 0 : extra + 1)) return true;
  for (let i = 0; i < a.names.length; i++) if (used[i] !== '1' && ctx.mins.node(a.props[i]!) < Infinity && ctx.keyFits(a, used.slice(0, i) + '1' + used.slice(i + 1), extra)) return true;
  return false;
}

/** Free keys in printable ASCII without quote or backslash: there ECMA-262 and Python's re agree on every class. */
const ASCII_KEY = parseRegex('^[ !#-\\[\\]-~]*$');

/** Is the key read so far (at `node` of the declared keys' trie, whose strings end with their closing quote) a declared one? */
function isName(t: ByteTrie, node: number): boolean {
  const end = node >= 0 ? t.next(node, Q) : -1;
  return end >= 0 && t.terminal[end] === true;
}

/** Not one of the declared keys (a trie walk: state = node + 1, 0 = off the trie). */
function notDeclared(t: ByteTrie): Component {
  return {
    start: 1,
    next: (s, b) => (s === 0 ? 0 : t.next(s - 1, b) + 1),
    accept: (s) => !isName(t, s - 1),
  };
}

/** Free keys of an atom with patternProperties / propertyNames: the DFA (ASCII, propertyNames, then each patternProperties pattern) and the fewest bytes from each state through the closing quote, separator and value. */
class KeyLang {
  private static count = 0;
  readonly id = KeyLang.count++;
  readonly dfa: Dfa;
  private readonly dist: Float32Array;
  private readonly need: number;
  private readonly nNames: number;

  constructor(ctx: JsonCtx, readonly a: Atom) {
    this.nNames = 1 + a.keyNames.length;
    this.need = (1 << this.nNames) - 1;
    this.dfa = new Dfa([ASCII_KEY, ...a.keyNames.map((p) => p.re), ...a.keyPats.map((p) => p.re)], [notDeclared(ctx.keyTrie(a))]);
    const term = new Float32Array(this.dfa.size).fill(Infinity);
    for (let q = 0; q < this.dfa.size; q++) {
      const node = this.classNode(q);
      if (node) term[q] = 1 + ctx.sep + ctx.mins.node(node);
    }
    this.dist = shortestWithEnds(this.dfa, term);
  }

  /** The value node of a key ending in q, or null when no key may end there. */
  classNode(q: number): Node | null {
    const bits = this.dfa.bits[q]!;
    if ((bits & this.need) !== this.need || !this.dfa.compOk[q] || this.dfa.phase[q] !== 0) return null;
    return this.a.keyClasses[bits >>> this.nNames] ?? null;
  }

  classOf(q: number): number {
    return this.dfa.bits[q]! >>> this.nNames;
  }

  min(q: number): number {
    return q < 0 ? Infinity : this.dist[q]!;
  }
}

/** A free key told apart by patterns, DFA state q after its opening quote; on the closing quote the object goes on with the value of the key's class. */
class PatKeyFrame implements Frame {
  readonly key: string;
  readonly min: number;
  private readonly kl: KeyLang;
  constructor(readonly ctx: JsonCtx, readonly a: Atom, readonly q: number, readonly used: string, readonly extra: number) {
    this.kl = ctx.keyLang(a)!;
    this.key = `K${ctx.layout[0]}${this.kl.id}.${q}.${used}.${extra}`;
    this.min = this.kl.min(q) + ctx.objAfterValue(a, used);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { ctx, a, q, used, extra, kl } = this;
    if (sym === Q) {
      const node = kl.classNode(q);
      if (node && ctx.mins.node(node) < Infinity) out.push(push(below, new ObjFrame(ctx, a, KEYED, used, -2 - kl.classOf(q), false, 0, extra)));
      return;
    }
    if (sym > 255) return;
    const n = kl.dfa.next(q, sym);
    if (n >= 0 && kl.min(n) < Infinity) out.push(push(below, new PatKeyFrame(ctx, a, n, used, extra)));
  }
}

/** A key that is none of the declared ones (no escapes, so its bytes are its name). `node` -1: off the declared keys' trie. */
class FreeKeyFrame implements Frame {
  readonly key: string;
  readonly min: number;
  readonly plain: PlainClass | undefined;
  readonly plainExceptions: ReadonlySet<number> | undefined;
  constructor(readonly t: ByteTrie, readonly a: Atom, readonly node: number, readonly u8: number) {
    this.key = `k${a.id}.${node}.${u8}`;
    this.plain = u8 === 0 ? 'json' : undefined;
    if (node >= 0) this.plainExceptions = t.childBytes(node);
    this.min = utf8Pending(u8) + 1 + (u8 === 0 && isName(t, node) ? 1 : 0);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (sym > 255 || sym === BSL || (sym < 0x20 && this.u8 === 0)) return;
    if (sym === Q && this.u8 === 0) {
      if (!isName(this.t, this.node)) popped(below, out);
      return;
    }
    const s = utf8Next(this.u8, sym);
    if (s < 0) return;
    const n = this.node < 0 ? -1 : this.t.next(this.node, sym);
    out.push(push(below, new FreeKeyFrame(this.t, this.a, n, s)));
  }
}

/** Inside an array of `a`, `i` items written. */
class ArrFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly ctx: JsonCtx, readonly a: Atom, readonly phase: number, readonly i: number, readonly sp: boolean, readonly ws: number) {
    const cap = Number.isFinite(a.maxItems) ? a.maxItems : Math.max(a.prefix.length, a.minItems);
    this.key = `a${ctx.layout[0]}${a.id}.${phase}.${Math.min(i, cap)}.${sp ? 1 : 0}.${ws}`;
    const item = (j: number): number => {
      const n = ctx.itemOf(a, j);
      return n ? ctx.mins.node(n) : Infinity;
    };
    if (phase === OPEN_) this.min = a.minItems === 0 ? 1 : item(0) + ctx.arrAfterValue(a, 1);
    else if (phase === AFTER_VAL) this.min = ctx.arrAfterValue(a, i);
    else this.min = (sp ? 1 : 0) + item(i) + ctx.arrAfterValue(a, i + 1);
  }
  private go(phase: number, i: number, sp: boolean, ws: number): ArrFrame {
    return new ArrFrame(this.ctx, this.a, phase, i, sp, ws);
  }
  private itemOk(j: number): Node | null {
    const n = this.ctx.itemOf(this.a, j);
    return n && this.ctx.mins.node(n) < Infinity ? n : null;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const { ctx, a, phase, i } = this;
    const py = ctx.layout === 'py';
    if (this.sp) {
      if (sym === 0x20) out.push(push(below, this.go(phase, i, false, 0)));
      return;
    }
    if (!py && isWs(sym)) {
      if (this.ws < WS_CAP) out.push(push(below, this.go(phase, i, false, this.ws + 1)));
      return;
    }
    if (phase === AFTER_VAL) {
      if (sym === 0x2c && this.itemOk(i)) out.push(push(below, this.go(BEFORE_VAL, i, py, 0)));
      else if (sym === 0x5d && i >= a.minItems) popped(below, out);
      return;
    }
    if (phase === OPEN_ && sym === 0x5d) {
      if (a.minItems === 0) popped(below, out);
      return;
    }
    const item = this.itemOk(i);
    if (item) ctx.value(item).enter(push(below, this.go(AFTER_VAL, i + 1, false, 0)), sym, out);
  }
}
