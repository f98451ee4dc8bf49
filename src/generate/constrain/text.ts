// Free text: reasoning and content (ordinary bytes until a control token), and the lazy watcher
// of `tool_choice: auto`, which lets everything through until the model has written
// <|open|>tools<|sep|>, and then holds the calls to the grammar it was given.

import { newId, popped, push, refeed, type Frame, type G, type Stack } from './core.js';
import type { FreeKind } from './matcher.js';
import { END, OPEN, SEP, syms } from './symbols.js';

export class FreeG implements G {
  readonly id = newId();
  readonly min = 0;
  private frame: FreeFrame;
  constructor(kind: Exclude<FreeKind, 'lazy'>) {
    this.frame = new FreeFrame(kind);
  }
  enter(below: Stack | null, sym: number, out: Stack[]): void {
    this.frame.step(sym, below, out);
  }
}

class FreeFrame implements Frame {
  readonly key: string;
  readonly min = 0;
  constructor(readonly free: Exclude<FreeKind, 'lazy'>) {
    this.key = `F${free[0]}`;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (sym < 256) out.push(push(below, this));
    else if (sym <= END) refeed(below, sym, out);
  }
}

const TRIGGER = syms(OPEN, 'tools', SEP);

/** Anything goes; `p` symbols of the trigger seen. After the trigger, `tools` (the calls and the closers) is the grammar. */
export class LazyFrame implements Frame {
  readonly key: string;
  readonly min = 0;
  constructor(readonly tools: G, readonly p: number) {
    this.key = `z${p}`;
  }
  get free(): FreeKind | undefined {
    return this.p === 0 ? 'lazy' : undefined;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    if (this.p === TRIGGER.length - 1 && sym === SEP) {
      out.push(push(below, new Begin(this.tools)));
      return;
    }
    if (sym === END) {
      // the stop id: the reply ends here, as unconstrained
      popped(below, out);
      return;
    }
    const p = sym === TRIGGER[this.p] ? this.p + 1 : sym === OPEN ? 1 : 0;
    out.push(push(below, new LazyFrame(this.tools, p)));
  }
}

/** A grammar element not entered yet (the first symbol after it is its first). */
class Begin implements Frame {
  readonly key: string;
  constructor(readonly g: G) {
    this.key = `b${g.id}`;
  }
  get min(): number {
    return this.g.min;
  }
  step(sym: number, below: Stack | null, out: Stack[]): void {
    this.g.enter(below, sym, out);
  }
}
