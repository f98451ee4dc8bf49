// The vocabulary as the grammar sees it: a trie of every ordinary id's bytes laid flat in
// preorder (each node knows where its subtree ends, so a dead prefix skips all the ids under it),
// each special id's symbol, and for string interiors the ids that are plain text there (complete
// UTF-8, no quote, backslash or control byte for JSON strings; complete UTF-8 for raw ones): in
// such a state they only add their character count (unless they start with one of the frame's
// exception bytes: a free key still on the declared keys' trie), so the walk needs only the others.

import type { Tokenizer } from '../../tokenizer/index.js';
import { CLOSE, END, OPEN, OTHER, SEP, utf8Next } from './symbols.js';

export const CONTROL_NAMES: ReadonlyArray<[string, number]> = [['<|open|>', OPEN], ['<|close|>', CLOSE], ['<|sep|>', SEP], ['<|end_of_msg|>', END]];

const latin1 = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1');

/** Where plain text keeps the state but for its length: inside a JSON string, inside a raw one. */
export type PlainClass = 'json' | 'raw';

/** A trie in preorder: node i's byte, depth (1 = a first byte), id ending there (-1: none), and the index just past its subtree. */
export interface FlatTrie {
  readonly byte: Uint8Array;
  readonly depth: Uint16Array;
  readonly token: Int32Array;
  readonly end: Int32Array;
  readonly maxDepth: number;
}

function flatTrie(ids: readonly number[], bytes: ReadonlyArray<Uint8Array | undefined>): FlatTrie {
  let n = 0;
  let maxDepth = 0;
  const lcps: number[] = [];
  for (let k = 0; k < ids.length; k++) {
    const b = bytes[ids[k]!]!;
    let l = 0;
    if (k > 0) {
      const a = bytes[ids[k - 1]!]!;
      while (l < a.length && l < b.length && a[l] === b[l]) l++;
    }
    lcps.push(l);
    n += b.length - l;
    maxDepth = Math.max(maxDepth, b.length);
  }
  const byte = new Uint8Array(n);
  const depth = new Uint16Array(n);
  const token = new Int32Array(n).fill(-1);
  const end = new Int32Array(n);
  const open: number[] = []; // open[d - 1] = node at depth d on the current path
  let i = 0;
  for (let k = 0; k < ids.length; k++) {
    const b = bytes[ids[k]!]!;
    const l = lcps[k]!;
    while (open.length > l) end[open.pop()!] = i;
    for (let d = l; d < b.length; d++) {
      byte[i] = b[d]!;
      depth[i] = d + 1;
      open.push(i);
      i++;
    }
    token[open[b.length - 1]!] = ids[k]!;
  }
  while (open.length > 0) end[open.pop()!] = i;
  return { byte, depth, token, end, maxDepth };
}

/** Character count of plain text of class `cls`, or -1 when `b` is not plain there. */
function plainChars(b: Uint8Array, cls: PlainClass): number {
  let u = 0;
  let chars = 0;
  for (const x of b) {
    if (u === 0) chars++;
    u = utf8Next(u, x);
    if (u < 0 || (cls === 'json' && (x < 0x20 || x === 0x22 || x === 0x5c))) return -1;
  }
  return u === 0 ? chars : -1;
}

/** Ids kept per character count to stand for the others (with different first bytes, so that one avoids a frame's exceptions). */
const REPS = 8;

export const NOT_PLAIN = 0xffff;

export interface PlainSet {
  /** Ids that are plain text in this class, and their character counts. */
  readonly ids: Int32Array;
  readonly chars: Uint16Array;
  /** By id: its character count if plain, else NOT_PLAIN. */
  readonly charsOf: Uint16Array;
  /** A few ids of each character count (index = count), with different first bytes. */
  readonly byChars: ReadonlyArray<readonly number[]>;
  /** The other ordinary ids. */
  readonly rest: FlatTrie;
}

export class VocabIndex {
  /** Every ordinary id. */
  readonly trie: FlatTrie;
  /** Ordinary ids (ascending). */
  readonly ordinary: Int32Array;
  private readonly bytes: Array<Uint8Array | undefined>;
  /** Special ids and their symbols (control symbols, else OTHER). */
  readonly specials: Array<[number, number]> = [];
  private readonly specialSym = new Map<number, number>();
  private readonly sorted: number[];
  private readonly plains = new Map<PlainClass, PlainSet>();

  /** `V`: the model's vocabulary size (ids past the tokenizer's are never allowed). */
  constructor(tok: Tokenizer, readonly V: number) {
    this.bytes = new Array(V);
    const ids: number[] = [];
    for (let id = 0; id < Math.min(V, tok.numBase); id++) {
      const b = tok.rankBytesOf(id);
      if (!b) continue;
      this.bytes[id] = b;
      ids.push(id);
    }
    this.ordinary = Int32Array.from(ids);
    const bufs = this.bytes;
    // latin1 strings compare as their bytes do, and much faster than buffers
    const keys = new Map(ids.map((id) => [id, latin1(bufs[id]!)]));
    ids.sort((x, y) => {
      const a = keys.get(x)!;
      const b = keys.get(y)!;
      return a < b ? -1 : a > b ? 1 : 0;
    });
    this.sorted = ids;
    this.trie = flatTrie(ids, bufs);
    const controls = new Map<number, number>();
    for (const [name, sym] of CONTROL_NAMES) {
      const id = tok.specialId(name);
      if (id !== undefined) controls.set(id, sym);
    }
    for (let id = tok.numBase; id < V; id++) {
      if (!tok.isSpecial(id)) continue;
      const sym = controls.get(id) ?? OTHER;
      this.specials.push([id, sym]);
      this.specialSym.set(id, sym);
    }
    this.plain('json');
    this.plain('raw');
  }

  /** The plain-text split of the vocabulary for a string class (built on first use). */
  plain(cls: PlainClass): PlainSet {
    let p = this.plains.get(cls);
    if (p) return p;
    const ids: number[] = [];
    const chars: number[] = [];
    const rest: number[] = [];
    const byChars: number[][] = [];
    for (const id of this.sorted) {
      const b = this.bytes[id]!;
      const c = plainChars(b, cls);
      if (c < 0) rest.push(id);
      else {
        ids.push(id);
        chars.push(c);
        const reps = (byChars[c] ??= []);
        if (reps.length < REPS && !reps.some((r) => this.bytes[r]![0] === b[0])) reps.push(id);
      }
    }
    const charsOf = new Uint16Array(this.V).fill(NOT_PLAIN);
    ids.forEach((id, k) => (charsOf[id] = Math.min(chars[k]!, NOT_PLAIN - 1)));
    p = { ids: Int32Array.from(ids), chars: Uint16Array.from(chars), charsOf, byChars: Array.from(byChars, (x) => x ?? []), rest: flatTrie(rest, this.bytes) };
    this.plains.set(cls, p);
    return p;
  }

  private texts: Set<string> | null = null;

  /**
   * Fewest tokens that write each suffix of a symbol string (the last entry 0): control symbols
   * are one id each, byte runs split into ordinary ids at best (dynamic programming; every byte
   * is an id of its own in Kimi vocabularies). The budget rule counts literals this way, so a
   * tool call does not ask for a token per byte of its tags.
   */
  literalCost(syms: readonly number[]): number[] {
    const texts = (this.texts ??= new Set(this.sorted.map((id) => latin1(this.bytes[id]!))));
    const n = syms.length;
    const cost = new Array<number>(n + 1).fill(0);
    for (let i = n - 1; i >= 0; i--) {
      let best = 1 + cost[i + 1]!;
      if (syms[i]! < 256) {
        let piece = '';
        for (let j = i; j < n && syms[j]! < 256 && j - i < 64; j++) {
          piece += String.fromCharCode(syms[j]!);
          if (j > i && texts.has(piece)) best = Math.min(best, 1 + cost[j + 1]!);
        }
      }
      cost[i] = best;
    }
    return cost;
  }

  /** The bytes of an ordinary id, or undefined. */
  bytesOf(id: number): Uint8Array | undefined {
    return this.bytes[id];
  }

  /** The symbol of a special id, or undefined. */
  symbolOf(id: number): number | undefined {
    return this.specialSym.get(id);
  }

  /** The id of a control symbol, if the vocabulary has it. */
  controlId(sym: number): number | undefined {
    for (const [id, s] of this.specials) if (s === sym) return id;
    return undefined;
  }
}
