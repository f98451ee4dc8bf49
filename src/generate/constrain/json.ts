// JSON values held to a compiled schema, byte by byte: the context the frames share (compiled
// nodes in one layout, their length tables and caches), a value's first byte choosing its kind,
// and the frames that recurse into values: objects (declared keys once each, required keys before
// '}', free keys by pattern) and arrays (prefixItems, items, minItems / maxItems). Layout 'json'
// allows whitespace runs of up to WS_CAP bytes where JSON allows them; 'py' writes exactly
// Python's ", " and ": ". The leaves are in json-lexical.ts (whitespace, enums), json-string.ts
// and json-number.ts.

import { Lit, LitFrame, popped, push, newId, type Frame, type G, type Stack } from './core.js';
import { keyLen, MinLengths, dumps, owedKeys, rawStringMin, sepLen, usedCount, type Layout } from './minlen.js';
import { BSL, EnumFrame, Q, WS_CAP, isDigit, isWs } from './json-lexical.js';
import { NumFrame, PatNumFrame } from './json-number.js';
import { RawPatFrame, RawStrFrame, strStart } from './json-string.js';
import { K_ARR, K_BOOL, K_INT, K_NULL, K_NUM, K_OBJ, K_STR, kindOf, type Atom, type Node } from './schema-atoms.js';
import { Dfa, type Component } from './dfa.js';
import { parseRegex } from './regex.js';
import { numLang, shortestWithEnds, strLang } from './strlang.js';
import { bytesOf, utf8Next, utf8Pending } from './symbols.js';
import { ByteTrie } from './trie.js';
import type { PlainClass } from './vocab.js';

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
