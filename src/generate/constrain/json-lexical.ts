// The bytes of JSON between and inside its tokens: byte classes, the whitespace allowed between
// tokens (runs of at most WS_CAP spaces), and literals from a set (enum, const) walked on a trie.

import { push, refeed, newId, type Frame, type G, type Stack } from './core.js';
import type { ByteTrie } from './trie.js';

/** Whitespace allowed between JSON tokens: spaces only (see WS_CAP). */
export const isWs = (b: number): boolean => b === 0x20;

/** Longest whitespace run between JSON tokens: one space. K3's response-format message asks for
 *  raw JSON "without any additional formatting", and Moonshot's API returns no newline or tab. */
export const WS_CAP = 1;

export const Q = 0x22;
export const BSL = 0x5c;
export const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39;
export const isHex = (b: number): boolean => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

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
export class EnumFrame implements Frame {
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
