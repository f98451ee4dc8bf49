// The activation quantizer of the 8-bit paths (--fast, --fast-experts) in Wasm (q8_act, wasm/q8.ts)
// writes the bytes of its TypeScript reference quantizeBlocks, both layouts, relaxed SIMD on and
// off: random blocks over the whole f32 range plus NaN, ±Infinity, -0, subnormals, exact ties
// after scaling and their neighbours, all-zero / all-NaN / all-subnormal blocks. And the Kernels
// class quantizes activations that lie in its memory in place, with the same products.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { sameBytes, xorshift } from '../helpers.js';
import { createKernels } from '../../src/kernels/fast.js';
import { kernelModule, initConstants, instantiate } from '../../src/kernels/wasm/loader.js';
import { CONST_END } from '../../src/kernels/wasm/kernels.js';
import { quantizeBlocks, q8Bytes, matmulQ8Ref, groupWordsPos, Q8_LAYOUT, ORDER_CODE } from '../../src/kernels/wasm/q8.js';
import { Q8T_LAYOUT, Q7_OFF, matmulQ7Ref, requantizeQ7InPlace, q7View } from '../../src/kernels/wasm/q8-trunk.js';
import type { WeightView } from '../../src/formats/weight.js';

const rnd = xorshift(0x3c6ef372);
const fr = Math.fround;
const LAYOUTS = [Q8_LAYOUT, Q8T_LAYOUT] as const; // quantizeQ8 (--fast-experts), quantizeQ8T (--fast trunk)

/** The f32 next to x towards +Infinity (dir 1) or -Infinity (dir -1). */
function nextF32(x: number, dir: 1 | -1): number {
  const f = new Float32Array([x]);
  const u = new Int32Array(f.buffer);
  if (x === 0) u[0] = dir > 0 ? 1 : -2147483647;
  else u[0]! += (x > 0) === (dir > 0) ? 1 : -1;
  return f[0]!;
}

/** One block of 32 values of kind `kind` (random, or one of the special cases). */
function block(kind: number): number[] {
  const b = new Array<number>(32).fill(0);
  const e = Math.floor(rnd() * 277) - 149; // any f32 exponent, subnormal to near the maximum
  switch (kind % 12) {
    case 0: // plain random, one magnitude
      return b.map(() => (rnd() - 0.5) * 4);
    case 1: // random, a random magnitude (subnormal results of d and of 1/d overflowing to Infinity)
      return b.map(() => fr((rnd() - 0.5) * 2 ** e));
    case 2: { // exact ties: amax = 127 * 2^k, so d = 2^k, id = 2^-k and x = (j + 0.5) 2^k gives v = j + 0.5
      const k = Math.floor(rnd() * 40) - 20;
      return b.map((_, i) => (i === 0 ? 127 : i === 1 ? -126.5 : ((Math.floor(rnd() * 127) + 0.5) * (rnd() < 0.5 ? -1 : 1))) * 2 ** k);
    }
    case 3: // neighbours of ties (0.49999997 rounds down, 0.50000006 up) with d = 1
      return b.map((_, i) => (i === 0 ? 127 : nextF32((Math.floor(rnd() * 126) + 0.5) * (i & 2 ? -1 : 1), i & 1 ? 1 : -1)));
    case 4: // NaN, ±Infinity, -0 among finite values
      return b.map((_, i) => [NaN, Infinity, -Infinity, -0, 0][i % 7] ?? (rnd() - 0.5) * 10);
    case 5: // NaN and -0 but no infinity (amax skips the NaN)
      return b.map((_, i) => (i % 5 === 0 ? NaN : i % 5 === 1 ? -0 : (rnd() - 0.5) * 3));
    case 6: // all NaN (amax 0, d 0)
      return b.fill(NaN);
    case 7: // all zero, signs mixed (amax 0)
      return b.map((_, i) => (i & 1 ? -0 : 0));
    case 8: // subnormals only
      return b.map(() => fr((rnd() - 0.5) * 2 ** -130));
    case 9: // the largest f32 and tiny ones
      return b.map((_, i) => (i === 3 ? -3.4028234663852886e38 : i === 9 ? 3.4028234663852886e38 : (rnd() - 0.5) * 1e-3));
    case 10: // one infinity alone (d = Infinity, id = 0, the infinity itself NaN)
      return b.map((_, i) => (i === 17 ? -Infinity : 0));
    default: // the smallest subnormal and its multiples (1/d overflows)
      return b.map(() => Math.floor(rnd() * 300 - 150) * 2 ** -149);
  }
}

/** T * cols values, blocks of random kinds (`finite`: only the kinds of finite, normal-sized values). */
function activations(T: number, cols: number, finite = false): Float32Array {
  const x = new Float32Array(T * cols);
  for (let i = 0; i < T * cols; i += 32) x.set(block(finite ? [0, 2, 3, 7][Math.floor(rnd() * 4)]! : Math.floor(rnd() * 1e6)), i);
  return x;
}

test('the two layouts are what the kernels expect', () => {
  assert.deepEqual(Q8_LAYOUT, { order: 'evenOdd', scaleMul: 0.5, offset: 12 });
  assert.deepEqual(Q8T_LAYOUT, { order: 'words', scaleMul: 1, offset: Q7_OFF });
});

test('the words layout: each group of four blocks by 4-byte words, the tail blocks in column order', () => {
  for (const cols of [32, 96, 128, 160, 224, 2048]) {
    const nb = cols / 32, G = nb & ~3;
    const pos = Array.from({ length: cols }, (_, c) => groupWordsPos(c, cols));
    assert.deepEqual([...pos].sort((a, b) => a - b), Array.from({ length: cols }, (_, c) => c), `cols ${cols}: a permutation`);
    for (let c = 0; c < cols; c++) {
      const b = c >> 5, k = c & 31;
      // a 16-byte vector of a group holds word k >> 2 of its four blocks, block b & 3 in lane b & 3
      if (b < G) assert.deepEqual([pos[c]! >> 7, (pos[c]! >> 4) & 7, (pos[c]! >> 2) & 3, pos[c]! & 3], [b >> 2, k >> 2, b & 3, k & 3]);
      else assert.equal(pos[c], c);
    }
  }
  // quantizeBlocks writes column c of each token there
  const T = 2, cols = 160;
  const x = Float32Array.from({ length: T * cols }, (_, i) => (i % 32 === 0 ? 127 : (i % 101) - 50));
  const out = new Uint8Array(q8Bytes(T, cols));
  quantizeBlocks(x, T, cols, out, Q8T_LAYOUT);
  const q = new Int8Array(out.buffer, 0, T * cols);
  for (let t = 0; t < T; t++) for (let c = 0; c < cols; c++) assert.equal(q[t * cols + groupWordsPos(c, cols)], x[t * cols + c]);
});

test('q8_act (Wasm) == quantizeBlocks bytes: both layouts, T 1..9, cols 32..2048, special values, relaxed on/off', () => {
  for (const relaxed of [true, false]) {
    const compiled = kernelModule({ relaxed });
    const memory = new WebAssembly.Memory({ initial: 8, maximum: 64, shared: true });
    initConstants(memory, compiled);
    const ex = instantiate(compiled.module, memory);
    const xo = CONST_END, oo = CONST_END + 4 * 9 * 2048 + 48; // any 4-byte alignment will do
    const scaleBits = new Int32Array(1), scaleF = new Float32Array(scaleBits.buffer);
    let n = 0;
    for (const cols of [32, 64, 96, 160, 2048]) {
      for (let T = 1; T <= 9; T++) {
        for (const o of LAYOUTS) {
          for (let rep = 0; rep < (cols < 2048 ? 6 : 1); rep++) {
            const x = activations(T, cols);
            // every block kind at least once in the small cases
            if (cols === 32 && T === 9) for (let t = 0; t < T; t++) x.set(block(rep * 9 + t), t * 32);
            const bytes = q8Bytes(T, cols);
            const want = new Uint8Array(bytes).fill(0xa5);
            quantizeBlocks(x, T, cols, want, o);
            const mem = new Uint8Array(memory.buffer);
            mem.fill(0xa5, oo, oo + bytes + 64);
            new Float32Array(memory.buffer, xo, T * cols).set(x);
            scaleF[0] = o.scaleMul;
            ex.q8_act!(xo, oo, T, cols, ORDER_CODE[o.order], scaleBits[0]!, o.offset);
            const got = new Uint8Array(memory.buffer, oo, bytes + 64);
            assert.equal(Buffer.compare(got.subarray(0, bytes), want), 0, `relaxed ${relaxed} cols ${cols} T ${T} order ${o.order}`);
            assert.ok(got.subarray(bytes).every((b) => b === 0xa5), 'nothing written past the end');
            n++;
          }
        }
      }
    }
    assert.ok(n > 400);
  }
});

test('q8_act: ties and their neighbours, one value at a time, as quantizeBlocks rounds them', () => {
  // d = 1 (amax 127): v = x exactly, so every tie k + 0.5 and the f32 on either side
  const compiled = kernelModule({ relaxed: true });
  const memory = new WebAssembly.Memory({ initial: 8, maximum: 8, shared: true });
  initConstants(memory, compiled);
  const ex = instantiate(compiled.module, memory);
  const vals: number[] = [];
  for (let k = -128; k <= 127; k++) for (const v of [k + 0.5, nextF32(k + 0.5, 1), nextF32(k + 0.5, -1)]) vals.push(v);
  vals.push(0.49999997, -0.49999997, 2 ** -30, -(2 ** -149), 127.49999, 127.5, -127.5);
  const cols = 32 * Math.ceil(vals.length / 31);
  const x = new Float32Array(cols);
  for (let b = 0, i = 0; b < cols; b += 32) {
    x[b] = 127;
    for (let j = 1; j < 32; j++) x[b + j] = i < vals.length ? vals[i++]! : 0;
  }
  for (const o of LAYOUTS) {
    const want = new Uint8Array(q8Bytes(1, cols));
    quantizeBlocks(x, 1, cols, want, o);
    new Float32Array(memory.buffer, CONST_END, cols).set(x);
    const oo = CONST_END + 4 * cols;
    ex.q8_act!(CONST_END, oo, 1, cols, ORDER_CODE[o.order], new Int32Array(new Float32Array([o.scaleMul]).buffer)[0]!, o.offset);
    assert.equal(Buffer.compare(new Uint8Array(memory.buffer, oo, want.length), want), 0, `order ${o.order}`);
  }
  // and the reference does round half away from zero there (in double, as written)
  const q = new Uint8Array(q8Bytes(1, 32));
  quantizeBlocks(Float32Array.from({ length: 32 }, (_, i) => [127, 0.5, -0.5, 1.5, -2.5, 0.49999997, 126.5][i] ?? 0), 1, 32, q, LAYOUTS[1]);
  assert.deepEqual(Array.from(new Int8Array(q.buffer, 0, 7)), [127, 1, -1, 2, -3, 0, 127]);
});

test('Kernels: activations in kernel memory are quantized in place; the products match the references (q8 and q7)', async () => {
  for (const relaxed of [true, false]) {
    const k = await createKernels({ threads: 2, relaxed, minWorkPerThread: 1, maxCols: 2048 });
    try {
      k.fastMxfp4 = true;
      for (const [rows, cols] of [[7, 96], [5, 2048]] as const) {
        const mx: WeightView = {
          name: 'mx', format: 'mxfp4', rows, cols,
          data: new Uint8Array((rows * cols) / 2).map(() => Math.floor(rnd() * 256)),
          scale: new Uint8Array((rows * cols) / 32).map(() => 118 + Math.floor(rnd() * 12)),
        };
        const bf = new Uint8Array(2 * rows * cols).map((_, i) => (i & 1 ? 0x3c + Math.floor(rnd() * 8) : Math.floor(rnd() * 256)));
        requantizeQ7InPlace(bf, rows, cols);
        const q7 = q7View('q7', bf, rows, cols);
        const wm = k.upload(mx), wq = k.upload(q7);
        for (const T of [1, 3, 9]) {
          const x = activations(T, cols, true); // no NaN outputs, whose bits need not agree
          const inMem = new Float32Array(k.memory.buffer, k.alloc(4 * T * cols).offset, T * cols);
          inMem.set(x);
          for (const [w, refFn] of [[wm, matmulQ8Ref], [wq, matmulQ7Ref]] as const) {
            const want = new Float32Array(T * rows);
            refFn(w, x, T, want);
            const a = new Float32Array(T * rows), b = new Float32Array(T * rows);
            k.matmul(w, inMem, T, a);
            k.matmul(w, x, T, b);
            assert.ok(sameBytes(a, want), `${w.format} in place, relaxed ${relaxed} ${rows}x${cols} T ${T}`);
            assert.ok(sameBytes(b, want), `${w.format} copied in, relaxed ${relaxed} ${rows}x${cols} T ${T}`);
            assert.ok(sameBytes(inMem, x), 'the activations are left as they were');
          }
        }
      }
    } finally {
      await k.close();
    }
  }
});
