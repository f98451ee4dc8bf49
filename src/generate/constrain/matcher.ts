// States of a grammar as small integers: a state is the set of live stacks (deduplicated by key,
// sorted, so equal sets get one id), its transitions are memoized per symbol, and it knows the
// fewest symbols that complete the reply from it. Same grammar, same ids, same answers: the caches
// only save time.

import { ACCEPT, Stack, type Frame, type G } from './core.js';
import { NSYM } from './symbols.js';
import type { PlainClass } from './vocab.js';

export const DEAD = -1;
const UNKNOWN = -2;
/** A grammar with more states than this is not reused for new requests (k3.ts): its tables start over there. */
export const MAX_STATES = 100_000;

/** Why a state reads bytes freely: 'free' text (reasoning, content: bytes only), or 'lazy' (anything at all). */
export type FreeKind = 'reasoning' | 'content' | 'lazy';

/** A frame that reads every byte and stays itself. */
export interface FreeFrameLike extends Frame {
  readonly free?: FreeKind;
  readonly plain?: PlainClass;
  readonly plainExceptions?: ReadonlySet<number>;
}

export interface StateInfo {
  readonly stacks: readonly Stack[];
  readonly key: string;
  /** Fewest symbols to the end of the reply (0 when complete). */
  readonly min: number;
  readonly accepting: boolean;
  /** Set when the state is one free frame's: every byte leads back to it. */
  readonly free: FreeKind | null;
  /** Set when the state is inside a string, where plain text only adds its length (vocab.ts)... */
  readonly plain: PlainClass | null;
  /** ... except text starting with one of these bytes. */
  readonly plainExceptions: ReadonlySet<number> | null;
}

class Start implements Frame {
  readonly key = '^';
  constructor(readonly g: G) {}
  get min(): number {
    return this.g.min;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    this.g.enter(below, sym, out);
  }
}

export class Matcher {
  private states: StateInfo[] = [];
  private ids = new Map<string, number>();
  private trans: Int32Array[] = [];
  readonly start: number;

  constructor(readonly root: G) {
    this.start = this.intern([new Stack(new Start(root), null)]);
  }

  info(id: number): StateInfo {
    return this.states[id]!;
  }

  get size(): number {
    return this.states.length;
  }

  /** The state of one stack (a state's stacks are looked at one by one, masks.ts). */
  single(s: Stack): number {
    return this.intern([s]);
  }

  private intern(stacks: Stack[]): number {
    const byKey = new Map<string, Stack>();
    for (const s of stacks) if (s.min < Infinity && !byKey.has(s.key)) byKey.set(s.key, s);
    if (byKey.size === 0) return DEAD;
    const keys = [...byKey.keys()].sort();
    const key = keys.join('|');
    const have = this.ids.get(key);
    if (have !== undefined) return have;
    const list = keys.map((k) => byKey.get(k)!);
    let min = Infinity;
    for (const s of list) min = Math.min(min, s.min);
    const top = list.length === 1 ? (list[0]!.top as Partial<FreeFrameLike>) : null;
    const id = this.states.length;
    this.states.push({ stacks: list, key, min, accepting: list.includes(ACCEPT), free: top?.free ?? null, plain: top?.plain ?? null, plainExceptions: top?.plainExceptions ?? null });
    this.trans.push(new Int32Array(NSYM).fill(UNKNOWN));
    this.ids.set(key, id);
    return id;
  }

  /** The state after reading `sym` in state `id`, or DEAD. */
  next(id: number, sym: number): number {
    const row = this.trans[id]!;
    const t = row[sym]!;
    if (t !== UNKNOWN) return t;
    const out: Stack[] = [];
    for (const s of this.states[id]!.stacks) s.top.step(sym, s.below, out);
    const n = this.intern(out);
    row[sym] = n;
    return n;
  }

  /** Fewest symbols to finish from a state. */
  min(id: number): number {
    return this.states[id]!.min;
  }

  /** The state after a symbol string, or DEAD. */
  feed(id: number, symbols: Iterable<number>): number {
    for (const s of symbols) {
      if (id === DEAD) return DEAD;
      id = this.next(id, s);
    }
    return id;
  }

}
