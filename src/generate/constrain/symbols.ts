// The alphabet the reply grammar reads: the 256 byte values of ordinary tokens, then one symbol
// per K3 control token, and OTHER for every other special id (only a lazy, free phase takes it).

export const OPEN = 256;
export const CLOSE = 257;
export const SEP = 258;
export const END = 259;
export const OTHER = 260;
/** Number of symbols (transition tables are this wide). */
export const NSYM = 261;

const enc = new TextEncoder();

/** UTF-8 bytes of a text, as symbols. */
export function bytesOf(text: string): number[] {
  return Array.from(enc.encode(text));
}

/** A symbol string from pieces: numbers are symbols, strings their UTF-8 bytes. */
export function syms(...parts: Array<string | number>): number[] {
  const out: number[] = [];
  for (const p of parts) {
    if (typeof p === 'number') out.push(p);
    else out.push(...bytesOf(p));
  }
  return out;
}

export const isWs = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x09 || b === 0x0d;

// A small UTF-8 validator: state 0 = between characters; other states wait for continuation
// bytes (4..7 restrict the first one: no overlong forms, surrogates or code points past U+10FFFF).
const PENDING = [0, 1, 2, 3, 2, 2, 3, 3];

/** Next UTF-8 state after byte `b`, or -1 when the byte is invalid there. */
export function utf8Next(state: number, b: number): number {
  switch (state) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xc2 && b <= 0xdf) return 1;
      if (b === 0xe0) return 4;
      if (b === 0xed) return 5;
      if (b >= 0xe1 && b <= 0xef) return 2;
      if (b === 0xf0) return 6;
      if (b >= 0xf1 && b <= 0xf3) return 3;
      if (b === 0xf4) return 7;
      return -1;
    case 1: return b >= 0x80 && b <= 0xbf ? 0 : -1;
    case 2: return b >= 0x80 && b <= 0xbf ? 1 : -1;
    case 3: return b >= 0x80 && b <= 0xbf ? 2 : -1;
    case 4: return b >= 0xa0 && b <= 0xbf ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9f ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xbf ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8f ? 2 : -1;
    default: return -1;
  }
}

/** Continuation bytes still owed in UTF-8 state `s`. */
export const utf8Pending = (s: number): number => PENDING[s]!;
