// The `--fast` trunk requantizer in Wasm (requantizeQ7InPlace, q7_requant in wasm/q8-trunk.ts)
// writes the bytes of its TypeScript reference requantizeQ7Ref, in place, the whole buffer
// compared: random bf16 blocks over the whole range plus NaN, ±Infinity, -0, subnormals, exact
// ties after scaling and their neighbours, all-zero / all-NaN / all-subnormal blocks and the
// blocks whose 1/d overflows; rows 1..257 and columns 32..2048, pieces over several chunks and
// rows wider than a chunk, odd byte offsets, a buffer in a shared WebAssembly.Memory.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { xorshift } from '../helpers.js';
import { requantizeQ7InPlace, requantizeQ7Ref, q7Bytes, Q7_OFF } from '../../src/kernels/wasm/q8-trunk.js';

const rnd = xorshift(0x2545f491);
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The bf16 bits of x (x must be a bf16 value: its low 16 f32 bits zero). */
function bits(x: number): number {
  f32[0] = x;
  assert.equal(u32[0]! & 0xffff, 0, `${x} is not a bf16 value`);
  return u32[0]! >>> 16;
}

const randBits = (): number => Math.floor(rnd() * 65536);
const sign = (): number => (rnd() < 0.5 ? 0x8000 : 0);
/** A random bf16 of biased exponent e (0: subnormal or zero), random sign and mantissa. */
const ofExp = (e: number): number => sign() | (Math.max(0, Math.min(254, e)) << 7) | Math.floor(rnd() * 128);

/** One block of 32 bf16 bit patterns of kind `kind` (random, or one of the special cases). */
function block(kind: number): number[] {
  const b = new Array<number>(32).fill(0);
  const e = Math.floor(rnd() * 255); // any exponent, subnormal to the largest finite
  switch (kind % 13) {
    case 0: // any bit pattern (NaN and infinities now and then)
      return b.map(randBits);
    case 1: // one magnitude band at a random exponent (subnormal d, 1/d overflowing to Infinity)
      return b.map(() => ofExp(e - Math.floor(rnd() * 8)));
    case 2: // the band around amax = 2^-122, where f32(1/d) starts to overflow
      return b.map(() => ofExp(127 - 122 + Math.floor(rnd() * 6) - 3));
    case 3: { // exact ties: amax = 63 * 2^k, so d = 2^k, id = 2^-k, and (j + 0.5) 2^k gives v = j + 0.5
      const k = Math.floor(rnd() * 60) - 30;
      return b.map((_, i) => bits((i === 0 ? 63 : i === 1 ? -62.5 : (Math.floor(rnd() * 63) + 0.5) * (rnd() < 0.5 ? -1 : 1)) * 2 ** k));
    }
    case 4: // neighbours of ties with d = 1 (the bf16 next to j + 0.5, above or below)
      return b.map((_, i) => (i === 0 ? bits(63) : bits((Math.floor(rnd() * 62) + 0.5) * (i & 2 ? -1 : 1)) + (i & 1 ? 1 : -1)));
    case 5: // NaN, ±Infinity, -0 among finite values
      return b.map((_, i) => [0x7fc0, 0x7f80, 0xff80, 0x8000, 0, 0xffc1][i % 9] ?? ofExp(120 + Math.floor(rnd() * 10)));
    case 6: // NaN (both signs, quiet and signalling) and -0, no infinity (amax skips the NaN)
      return b.map((_, i) => (i % 5 === 0 ? 0x7fc0 : i % 5 === 1 ? 0xff81 : i % 5 === 2 ? 0x8000 : ofExp(127 + Math.floor(rnd() * 4))));
    case 7: // all NaN (amax 0, d 0)
      return b.map((_, i) => (i & 1 ? 0xffc0 : 0x7fa5));
    case 8: // all zero, signs mixed (amax 0)
      return b.map((_, i) => (i & 1 ? 0x8000 : 0));
    case 9: // subnormals only
      return b.map(() => ofExp(0));
    case 10: // the largest finite bf16 and small ones
      return b.map((_, i) => (i === 3 ? 0xff7f : i === 9 ? 0x7f7f : ofExp(100 + Math.floor(rnd() * 8))));
    case 11: // one infinity alone (d = Infinity, id = 0, the infinity itself NaN)
      return b.map((_, i) => (i === 17 ? 0xff80 : i & 1 ? ofExp(127) : 0));
    default: // realistic weights: one scale, a few outliers
      return b.map(() => ofExp(120 + Math.floor(rnd() * 5) + (rnd() < 0.05 ? 6 : 0)));
  }
}

/** A buffer of rows x cols bf16 values, block kinds mixed, at byte offset `off` of its ArrayBuffer. */
function piece(rows: number, cols: number, off = 0, ab?: ArrayBufferLike): Uint8Array {
  const buf = new Uint8Array(ab ?? new ArrayBuffer(off + 2 * rows * cols + 7), off, 2 * rows * cols);
  const nb = cols / 32;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const blk = block(Math.floor(rnd() * 26)); // about half realistic, half the special kinds
      for (let i = 0; i < 32; i++) {
        const o = 2 * (r * cols + b * 32 + i);
        buf[o] = blk[i]! & 255;
        buf[o + 1] = blk[i]! >> 8;
      }
    }
  }
  return buf;
}

/** Requantize a copy with each function; the whole buffers (and the bytes around them) agree. */
function check(buf: Uint8Array, rows: number, cols: number, what: string): void {
  const full = new Uint8Array(buf.buffer);
  const want = full.slice();
  requantizeQ7Ref(new Uint8Array(want.buffer, buf.byteOffset, buf.length), rows, cols);
  requantizeQ7InPlace(buf, rows, cols);
  if (Buffer.compare(full, want) !== 0) {
    let i = 0;
    while (full[i] === want[i]) i++;
    assert.fail(`${what}: first differing byte at ${i - buf.byteOffset} of the piece: wasm ${full[i]}, reference ${want[i]}`);
  }
}

test('q7 requantizer: wasm == TypeScript reference bytes (rows 1..257, cols 32..2048, all block kinds)', () => {
  for (const rows of [1, 2, 3, 7, 64, 257]) {
    for (const cols of [32, 64, 96, 2048]) check(piece(rows, cols), rows, cols, `${rows}x${cols}`);
  }
});

test('q7 requantizer: pieces over several chunks, rows wider than a chunk, odd byte offsets, shared memory', () => {
  check(piece(5000, 32), 5000, 32, '5000x32 (several chunks of many rows)');
  check(piece(300, 7168), 300, 7168, '300x7168');
  check(piece(3, 98304), 3, 98304, '3x98304 (a row wider than a chunk)');
  for (const off of [1, 3, 2]) check(piece(37, 160, off), 37, 160, `37x160 at byte offset ${off}`);
  check(piece(65, 2048, 1), 65, 2048, '65x2048 at byte offset 1');
  const mem = new WebAssembly.Memory({ initial: 32, maximum: 64, shared: true });
  check(piece(100, 2048, 4096, mem.buffer), 100, 2048, '100x2048 in a shared memory');
  check(piece(0, 64), 0, 64, 'no rows');
});

test('q7 requantizer: what the reference does at the edges (ties away from zero, NaN, infinities, tiny blocks)', () => {
  const q7 = (vals: number[]): { q: number[]; d: number } => {
    const buf = new Uint8Array(64);
    vals.forEach((x, i) => {
      const h = bits(x);
      buf[2 * i] = h & 255;
      buf[2 * i + 1] = h >> 8;
    });
    const w = buf.slice();
    requantizeQ7InPlace(buf, 1, 32);
    requantizeQ7Ref(w, 1, 32);
    assert.deepEqual(buf, w);
    return { q: Array.from(buf.subarray(0, 32), (b) => b - Q7_OFF), d: new DataView(buf.buffer, 32, 4).getFloat32(0, true) };
  };
  const pad = (v: number[]): number[] => [...v, ...new Array<number>(32 - v.length).fill(0)];
  // d = 1: ties round away from zero, the bf16 neighbours of a tie to the nearest
  let r = q7(pad([63, 0.5, -0.5, 1.5, -2.5, 62.5, 0.5 - 2 ** -9, -(0.5 + 2 ** -8), -0]));
  assert.equal(r.d, 1);
  assert.deepEqual(r.q.slice(0, 9), [63, 1, -1, 2, -3, 63, 0, -1, 0]);
  // NaN -> 0 and skipped by amax; an infinity makes d = Infinity, every byte 64
  r = q7(pad([NaN, 31.5, -63]));
  assert.deepEqual([r.d, ...r.q.slice(0, 3)], [1, 0, 32, -63]);
  r = q7(pad([Infinity, 5, -5]));
  assert.equal(r.d, Infinity);
  assert.ok(r.q.every((q) => q === 0));
  // amax 2^-126: d is nonzero but f32(1 / d) overflows, every byte 64; amax 2^-120: it does not
  r = q7(pad([2 ** -126, -(2 ** -127)]));
  assert.ok(r.d > 0 && !Number.isFinite(Math.fround(1 / r.d)) && r.q.every((q) => q === 0));
  r = q7(pad([2 ** -120, -(2 ** -122)]));
  assert.deepEqual(r.q.slice(0, 2), [63, -16]);
  // the sizes are checked
  assert.throws(() => requantizeQ7InPlace(new Uint8Array(128), 1, 48), RangeError);
  assert.throws(() => requantizeQ7InPlace(new Uint8Array(q7Bytes(2, 32)), 2, 32), RangeError);
});
