// The fewest bytes of a value of each node, per kind and per layout, found as a fixpoint (a
// recursive schema's nodes start at Infinity and shrink). Exact minimums are what keeps the
// budget rule sound: from a state whose minimum fits, some next symbol lowers it by one.

import { numLang, strLang } from './strlang.js';
import { K_ARR, K_BOOL, K_INT, K_NULL, K_NUM, K_OBJ, K_STR, kindOf, type Atom, type Node } from './schema-atoms.js';

/** Layouts: JSON with optional whitespace (a response document), or Python json.dumps' default separators (tool arguments). */
export type Layout = 'json' | 'py';

export const KINDS = [K_NULL, K_BOOL, K_INT, K_NUM, K_STR, K_OBJ, K_ARR] as const;

const utf8Len = (s: string): number => Buffer.byteLength(s, 'utf8');

/** A value as this layout writes it (enum literals are matched in this exact form). */
export function dumps(v: unknown, layout: Layout): string {
  if (layout === 'json') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map((x) => dumps(x, layout)).join(', ')}]`;
  if (v !== null && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${dumps(x, layout)}`).join(', ')}}`;
  return JSON.stringify(v);
}

export const sepLen = (layout: Layout): number => (layout === 'json' ? 1 : 2);

/** Bytes of a key as written, quotes included. */
export const keyLen = (k: string): number => utf8Len(JSON.stringify(k));

/**
 * The declared keys an object still owes from `used` ('1' at a written key's index): every missing
 * required key, and the cheapest others until `minProps` declared keys are written. Their count
 * and summed cost (Infinity when too few keys can be written).
 */
export function owedKeys(cost: (i: number) => number, n: number, required: readonly number[], used: string, minProps: number): { cost: number; count: number } {
  let sum = 0;
  let count = 0;
  let written = 0;
  for (let i = 0; i < n; i++) if (used[i] === '1') written++;
  for (const r of required) {
    if (used[r] === '1') continue;
    sum += cost(r);
    count++;
  }
  const need = minProps - written - count;
  if (need > 0) {
    const req = new Set(required);
    const rest: number[] = [];
    for (let i = 0; i < n; i++) if (used[i] !== '1' && !req.has(i)) rest.push(cost(i));
    rest.sort((x, y) => x - y);
    if (rest.length < need) return { cost: Infinity, count: count + need };
    for (let k = 0; k < need; k++) sum += rest[k]!;
    count += need;
  }
  return { cost: sum, count };
}

/** Keys written ('1's) in a used-keys string. */
export const usedCount = (used: string): number => {
  let n = 0;
  for (let i = 0; i < used.length; i++) if (used[i] === '1') n++;
  return n;
};

export class MinLengths {
  private byAtom = new Map<number, Float64Array>();

  constructor(nodes: readonly Node[], readonly layout: Layout) {
    const atoms = nodes.flatMap((n) => n.atoms);
    for (const a of atoms) this.byAtom.set(a.id, new Float64Array(KINDS.length).fill(Infinity));
    for (let changed = true; changed;) {
      changed = false;
      for (const a of atoms) {
        const row = this.byAtom.get(a.id)!;
        for (let k = 0; k < KINDS.length; k++) {
          const v = this.compute(a, KINDS[k]!);
          if (v < row[k]!) {
            row[k] = v;
            changed = true;
          }
        }
      }
    }
  }

  /** Fewest bytes of a value of `a` of kind `kind` (one K_ bit). */
  atom(a: Atom, kind: number): number {
    return this.byAtom.get(a.id)?.[KINDS.indexOf(kind as (typeof KINDS)[number])] ?? Infinity;
  }

  /** Fewest bytes of a value of `n` whose kind is in `mask`. */
  node(n: Node, mask = 127): number {
    let m = Infinity;
    for (const a of n.atoms) for (const k of KINDS) if (k & mask) m = Math.min(m, this.atom(a, k));
    return m;
  }

  private compute(a: Atom, kind: number): number {
    if (a.lits) {
      let m = Infinity;
      for (const v of a.lits) if (kindOf(v) === kind) m = Math.min(m, utf8Len(dumps(v, this.layout)));
      return m;
    }
    if (!(a.kinds & kind)) return Infinity;
    const sep = sepLen(this.layout);
    switch (kind) {
      case K_NULL:
      case K_BOOL:
        return 4;
      case K_INT:
        return numLang(a, true)?.min(0, 0) ?? 1;
      case K_NUM: {
        const bounded = numLang(a, false);
        if (bounded) return bounded.min(0, 0);
        return a.kinds & K_INT ? Infinity : 3; // "1.5": only a schema without integers needs the fraction
      }
      case K_STR: {
        const lang = strLang(a, 'json');
        return 2 + (lang ? lang.min(0, 0) : a.minLength);
      }
      case K_OBJ: {
        const { cost, count } = owedKeys((i) => keyLen(a.names[i]!) + sep + this.node(a.props[i]!), a.names.length, a.required, '', a.minProps);
        return 2 + cost + Math.max(0, count - 1) * sep;
      }
      case K_ARR: {
        let sum = 2;
        for (let j = 0; j < a.minItems; j++) {
          const item = j < a.prefix.length ? a.prefix[j]! : a.items;
          if (!item) return Infinity;
          sum += this.node(item) + (j > 0 ? sep : 0);
        }
        return sum;
      }
      default:
        return Infinity;
    }
  }
}

/** Fewest bytes of a raw (unquoted, unescaped) string value of `n`, as tool arguments write strings. */
export function rawStringMin(n: Node): number {
  let m = Infinity;
  for (const a of n.atoms) {
    if (a.lits) {
      for (const v of a.lits) if (typeof v === 'string') m = Math.min(m, utf8Len(v));
    } else if (a.kinds & K_STR) m = Math.min(m, strLang(a, 'raw')?.min(0, 0) ?? a.minLength);
  }
  return m;
}
