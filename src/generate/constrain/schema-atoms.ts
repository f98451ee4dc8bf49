// What a compiled JSON Schema is: a node is the list of its alternatives ("atoms"), each atom a
// plain record of constraints (kinds, literals, lengths, keys, items, patterns, bounds). The
// compiler (schema.ts) makes them; the grammars (json.ts, xtml.ts) and their length tables
// (minlen.ts, strlang.ts) read them.

import type { Bound } from './numrange.js';
import type { Re } from './regex.js';

export const K_NULL = 1;
export const K_BOOL = 2;
export const K_INT = 4;
/** Numbers that are not integers ("number" = K_INT | K_NUM). */
export const K_NUM = 8;
export const K_STR = 16;
export const K_OBJ = 32;
export const K_ARR = 64;
export const K_ALL = 127;

export function kindOf(v: unknown): number {
  if (v === null) return K_NULL;
  if (typeof v === 'boolean') return K_BOOL;
  if (typeof v === 'number') return Number.isInteger(v) ? K_INT : K_NUM;
  if (typeof v === 'string') return K_STR;
  if (Array.isArray(v)) return K_ARR;
  return K_OBJ;
}

/** Code points, as JSON Schema counts string length. */
export const codePoints = (s: string): number => [...s].length;

export interface Atom {
  readonly id: number;
  kinds: number;
  /** enum / const: only these values (already filtered by kind and string length). */
  lits: unknown[] | null;
  minLength: number;
  maxLength: number;
  /** Declared keys in order and their value nodes; `required` lists indices into `names`. */
  names: string[];
  /** Declared keys no value may follow (a false schema): never written, not even as free keys. */
  banned: string[];
  props: Node[];
  required: number[];
  /** Schema of other keys; null: no other keys. */
  additional: Node | null;
  prefix: Node[];
  /** Items past `prefix`; null: none. */
  items: Node | null;
  minItems: number;
  maxItems: number;
  /** pattern / format: whole-string regexes every string value matches (empty: none). */
  patterns: StrPattern[];
  /** minimum / maximum and their exclusive forms (null: unbounded). */
  lo: Bound | null;
  hi: Bound | null;
  /** Free keys (when any are allowed): the patterns they are told apart by (patternProperties, as
   *  searches), the value node of each subset matched (index = bit mask; null: no such key), and
   *  the patterns every key matches (propertyNames). Empty: every free key takes `additional`. */
  keyPats: StrPattern[];
  keyClasses: Array<Node | null>;
  keyNames: StrPattern[];
  /** minProperties (counted on declared keys only) / maxProperties (every key). */
  minProps: number;
  maxProps: number;
  /** multipleOf (positive integers): integers only, multiples of each. */
  mults: number[];
}

/** A string regex (already a search for `pattern`) and where the schema says it, for errors. */
export interface StrPattern {
  re: Re;
  /** The source, for the JS RegExp that filters enum values (u flag). */
  src: string;
  /** Identifies the language (`pattern` sources are searches, `format` ones are whole-string). */
  key: string;
  where: string;
}

export class Node {
  atoms: Atom[] = [];
  constructor(readonly id: number) {}
}
