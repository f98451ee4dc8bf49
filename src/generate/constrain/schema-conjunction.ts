// A conjunction of JSON Schema constraints before its children become nodes (the compiler's
// working form, schema.ts): allOf merges two, anyOf / oneOf multiply the alternatives out, and a
// literal is checked against the patterns and bounds it must keep to.

import type { Bound } from './numrange.js';
import { K_ALL, type StrPattern } from './schema-atoms.js';

export type Schema = boolean | Record<string, unknown>;

export interface ObjPart {
  props: Map<string, Schema>;
  additional: Schema;
  /** patternProperties: a key matching one takes its schema (and not `additional`). */
  patProps: Array<{ pat: StrPattern; schema: Schema }>;
}

export interface ArrPart {
  prefix: Schema[];
  items: Schema;
}

/** A conjunction of constraints before its children become nodes. */
export interface Cons {
  kinds: number;
  lits: unknown[] | null;
  minLength: number;
  maxLength: number;
  required: Set<string>;
  obj: ObjPart[];
  arr: ArrPart[];
  minItems: number;
  maxItems: number;
  patterns: StrPattern[];
  lo: Bound | null;
  hi: Bound | null;
  minProps: number;
  maxProps: number;
  mults: number[];
  keyNames: StrPattern[];
}

export const any = (): Cons => ({
  kinds: K_ALL, lits: null, minLength: 0, maxLength: Infinity, required: new Set(), obj: [], arr: [], minItems: 0, maxItems: Infinity,
  patterns: [], lo: null, hi: null, minProps: 0, maxProps: Infinity, mults: [], keyNames: [],
});

export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as unknown[]).length && a.every((x, i) => sameJson(x, (b as unknown[])[i]));
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

function merge(a: Cons, b: Cons): Cons {
  let lits = a.lits;
  if (b.lits) lits = lits ? lits.filter((x) => b.lits!.some((y) => sameJson(x, y))) : b.lits;
  return {
    kinds: a.kinds & b.kinds,
    lits,
    minLength: Math.max(a.minLength, b.minLength),
    maxLength: Math.min(a.maxLength, b.maxLength),
    required: new Set([...a.required, ...b.required]),
    obj: [...a.obj, ...b.obj],
    arr: [...a.arr, ...b.arr],
    minItems: Math.max(a.minItems, b.minItems),
    maxItems: Math.min(a.maxItems, b.maxItems),
    patterns: [...a.patterns, ...b.patterns],
    lo: tighter(a.lo, b.lo, 1),
    hi: tighter(a.hi, b.hi, -1),
    minProps: Math.max(a.minProps, b.minProps),
    maxProps: Math.min(a.maxProps, b.maxProps),
    mults: [...new Set([...a.mults, ...b.mults])],
    keyNames: [...a.keyNames, ...b.keyNames],
  };
}

/** The stricter of two lower (dir 1) or upper (dir -1) bounds. */
export function tighter(a: Bound | null, b: Bound | null, dir: number): Bound | null {
  if (!a || !b) return a ?? b;
  if (a.value !== b.value) return (a.value - b.value) * dir > 0 ? a : b;
  return a.strict ? a : b;
}

/** Does a literal value keep to an atom's patterns and bounds? */
export function litFits(v: unknown, c: Cons): boolean {
  if (typeof v === 'string') return c.patterns.every((p) => jsRegex(p.src).test(v));
  if (typeof v === 'number') {
    if (c.mults.some((k) => !Number.isInteger(v) || v % k !== 0)) return false;
    if (c.lo && (c.lo.strict ? !(v > c.lo.value) : !(v >= c.lo.value))) return false;
    if (c.hi && (c.hi.strict ? !(v < c.hi.value) : !(v <= c.hi.value))) return false;
  }
  return true;
}

const regexCache = new Map<string, RegExp>();
export function jsRegex(src: string): RegExp {
  let r = regexCache.get(src);
  if (!r) {
    try {
      r = new RegExp(src, 'u');
    } catch {
      r = new RegExp(src);
    }
    if (regexCache.size > 256) regexCache.clear();
    regexCache.set(src, r);
  }
  return r;
}

export function product(xs: Cons[], ys: Cons[]): Cons[] {
  const out: Cons[] = [];
  for (const x of xs) for (const y of ys) out.push(merge(x, y));
  return out;
}
