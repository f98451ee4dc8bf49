// The recogniser's machinery: a configuration is an immutable stack of frames (a linked list, so a
// step shares everything below the top); a frame reads one symbol and says what replaces it. A
// grammar element (G) is static: it knows the fewest symbols that complete it and how to enter it
// on a first symbol. Nondeterminism (alternatives, keys not yet told apart) is a set of stacks,
// kept by the matcher (matcher.ts). Every frame knows the fewest symbols that finish it, so a
// stack knows the fewest that finish the whole reply: the sum down the stack.

export interface Frame {
  /** Identifies the frame's behaviour from here on (equal keys, equal futures). */
  readonly key: string;
  /** Fewest symbols that finish this frame (what waits below is counted by the frames below). */
  readonly min: number;
  /** Read `sym` with `below` under this frame; push every resulting stack to `out`. */
  step(sym: number, below: Stack | null, out: Stack[]): void;
}

export class Stack {
  readonly key: string;
  readonly min: number;
  constructor(readonly top: Frame, readonly below: Stack | null) {
    this.key = below ? `${top.key}/${below.key}` : top.key;
    this.min = top.min + (below ? below.min : 0);
  }
}

/** What remains once the reply is complete: reads nothing more. */
const doneFrame: Frame = { key: '$', min: 0, step() {} };
export const ACCEPT = new Stack(doneFrame, null);

/** A frame finished on the symbol it just read: what was below goes on. */
export function popped(below: Stack | null, out: Stack[]): void {
  out.push(below ?? ACCEPT);
}

/** A frame finished without reading `sym`: the frame below reads it (nothing may follow the end). */
export function refeed(below: Stack | null, sym: number, out: Stack[]): void {
  if (below) below.top.step(sym, below.below, out);
}

export const push = (below: Stack | null, f: Frame): Stack => new Stack(f, below);

let nextId = 0;
export const newId = (): number => nextId++;

/** A static grammar element. */
export interface G {
  readonly id: number;
  /** Fewest symbols of a complete match (Infinity: none). */
  readonly min: number;
  /** Start matching with `sym` as the first symbol. */
  enter(below: Stack | null, sym: number, out: Stack[]): void;
}

/** A fixed symbol string. `cost[i]`, when given, is the fewest tokens that write syms[i..] (cost[length] = 0), else one a symbol. */
export class Lit implements G {
  readonly id = newId();
  readonly min: number;
  constructor(readonly syms: readonly number[], readonly cost?: readonly number[]) {
    if (syms.length === 0) throw new Error('empty literal');
    if (cost && cost.length !== syms.length + 1) throw new Error('literal cost of the wrong length');
    this.min = cost ? cost[0]! : syms.length;
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    new LitFrame(this, 0).step(sym, below, out);
  }
}

/** Inside a literal, `pos` symbols matched. */
export class LitFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly g: Lit, readonly pos: number) {
    this.key = `L${g.id}.${pos}`;
    this.min = g.cost ? g.cost[pos]! : g.syms.length - pos;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (sym !== this.g.syms[this.pos]) return;
    if (this.pos + 1 < this.g.syms.length) out.push(push(below, new LitFrame(this.g, this.pos + 1)));
    else popped(below, out);
  }
}

/** Elements one after another. */
export class Seq implements G {
  readonly id = newId();
  readonly items: readonly G[];
  /** suffix[i] = fewest symbols of items i.. */
  private suffix: number[] | null = null;
  constructor(items: readonly G[]) {
    if (items.length === 0) throw new Error('empty sequence');
    this.items = items;
  }
  suffixMin(i: number): number {
    if (!this.suffix) {
      const s = new Array<number>(this.items.length + 1).fill(0);
      for (let j = this.items.length - 1; j >= 0; j--) s[j] = s[j + 1]! + this.items[j]!.min;
      this.suffix = s;
    }
    return this.suffix[i]!;
  }
  get min(): number {
    return this.suffixMin(0);
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    new SeqFrame(this, 0).step(sym, below, out);
  }
}

/** Before item `i` of a sequence (the items before it are matched). */
export class SeqFrame implements Frame {
  readonly key: string;
  readonly min: number;
  constructor(readonly g: Seq, readonly i: number) {
    this.key = `S${g.id}.${i}`;
    this.min = g.suffixMin(i);
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    const rest = this.i + 1 < this.g.items.length ? push(below, new SeqFrame(this.g, this.i + 1)) : below;
    this.g.items[this.i]!.enter(rest, sym, out);
  }
}

/** One of several elements. */
export class Alt implements G {
  readonly id = newId();
  constructor(readonly options: readonly G[]) {}
  get min(): number {
    let m = Infinity;
    for (const o of this.options) m = Math.min(m, o.min);
    return m;
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    for (const o of this.options) if (o.min < Infinity) o.enter(below, sym, out);
  }
}

/** Nothing (an optional part's other branch). */
export const EMPTY: G = { id: newId(), min: 0, enter: (below, sym, out) => refeed(below, sym, out) };

/** A G made from a function (for elements built on first use, e.g. the k-th tool call). */
export function lazyG(min: () => number, make: () => G): G {
  let g: G | null = null;
  let m: number | null = null;
  return {
    id: newId(),
    get min() {
      return (m ??= min());
    },
    enter(below, sym, out) {
      (g ??= make()).enter(below, sym, out);
    },
  };
}
