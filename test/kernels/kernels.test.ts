// Fast kernels (WebAssembly SIMD + worker pool) against the reference kernels, byte for byte.

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import * as ref from '../../src/kernels/ref.js';
import type { WeightView, WeightFormat } from '../../src/formats/weight.js';
import { createKernels, type Kernels } from '../../src/kernels/fast.js';
import { relaxedSimdAvailable } from '../../src/kernels/wasm/loader.js';
import { generate, FMTS, TILE_CHUNK_COLS, TILE_CHUNK_FROM, MM1_WIDE_ROWS, MM1_WIDE_FROM } from '../../src/kernels/wasm/kernels.js';
import { writeMatmulOp } from '../../src/kernels/pool.js';
import { f32ToBf16, FP8_TABLE } from '../../src/formats/dtypes.js';
import { xorshift } from '../helpers.js';
import { KernelProfile } from '../../src/kernels/profile.js';
import { Chain } from '../../src/kernels/chain.js';
import { gatedActRef, type ActKind } from '../../src/kernels/wasm/act.js';
import { rmsNorm } from '../../src/model/ops.js';

// deterministic PRNG (xorshift32)
const rnd = xorshift(0x9e3779b9);
const byte = (): number => Math.floor(rnd() * 256);

function f32Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0]!;
}
function f16Bits(x: number): number {
  // round-to-nearest is not needed: any bits that are not inf/nan are valid test data
  const b = f32Bits(x);
  const s = (b >>> 16) & 0x8000;
  const e = ((b >>> 23) & 0xff) - 127 + 15;
  if (e <= 0) return s | ((b >>> 13) & 0x3ff) >> Math.min(10, 1 - e); // subnormal (truncated)
  if (e >= 31) return s | 0x7bff;
  return s | (e << 10) | ((b >>> 13) & 0x3ff);
}

/** Real-looking random weights of each format. */
function makeWeight(format: WeightFormat, rows: number, cols: number, scaleDtype: 'F32' | 'BF16' | 'F16' = 'F32'): WeightView {
  const gauss = (): number => (rnd() + rnd() + rnd() - 1.5) * 0.1;
  const scaleBytes = (n: number, gen: () => number): Uint8Array => {
    if (scaleDtype === 'F32') return new Uint8Array(new Float32Array(n).map(gen).buffer);
    const u = new Uint16Array(n).map(() => (scaleDtype === 'BF16' ? f32ToBf16(gen()) : f16Bits(gen())));
    return new Uint8Array(u.buffer);
  };
  let data: Uint8Array;
  let scale: Uint8Array | undefined;
  switch (format) {
    case 'f32':
      data = new Uint8Array(new Float32Array(rows * cols).map(gauss).buffer);
      break;
    case 'bf16':
      data = new Uint8Array(new Uint16Array(rows * cols).map(() => (rnd() < 0.02 ? 0 : f32ToBf16(gauss()))).buffer);
      break;
    case 'f16': // includes subnormals and zeros
      data = new Uint8Array(new Uint16Array(rows * cols).map(() => (rnd() < 0.05 ? byte() | (rnd() < 0.5 ? 0x8000 : 0) : f16Bits(gauss()))).buffer);
      break;
    case 'fp8': {
      data = new Uint8Array(rows * cols).map(() => {
        let b: number;
        do b = byte(); while ((b & 0x7f) === 0x7f); // no NaN codes
        return b;
      });
      scale = scaleBytes(Math.ceil(rows / 128) * Math.ceil(cols / 128), () => 1e-3 * (1 + rnd()));
      break;
    }
    case 'int4':
      data = new Uint8Array(rows * Math.ceil(cols / 8) * 4).map(byte);
      scale = scaleBytes(rows * Math.ceil(cols / 32), () => 0.01 * (0.5 + rnd()));
      break;
    case 'mxfp4':
      data = new Uint8Array((rows * cols) / 2).map(byte);
      scale = new Uint8Array((rows * cols) / 32).map(() => 118 + Math.floor(rnd() * 7));
      break;
  }
  return { name: `${format}[${rows}x${cols}]`, format, rows, cols, data, scale, scaleDtype: scale ? scaleDtype : undefined };
}

function randX(n: number): Float32Array {
  return new Float32Array(n).map(() => rnd() * 2 - 1);
}

function sameBytes(a: Float32Array, b: Float32Array, what: string): void {
  const ua = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const ub = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (Buffer.compare(Buffer.from(ua), Buffer.from(ub)) === 0) return;
  let i = 0;
  while (i < a.length && f32Bits(a[i]!) === f32Bits(b[i]!)) i++;
  assert.fail(`${what}: first difference at ${i}: fast ${a[i]} ref ${b[i]}`);
}

// 17, 33 and 70 rows: the single-token path walks stored rows in pairs far apart (rows j and
// j+q, q = rows/2 when at least MM1_MIN_DIST), then the rest one by one
const SHAPES: Record<WeightFormat, [number, number][]> = {
  // [20, 600]: T = 1 takes pairs of rows far apart (MM1_ROWS, MM1_MIN_DIST), their lane-group passes
  // in chunks of MM1_CHUNK_COLS columns (two whole ones and a part) and a tail of 8 columns
  f32: [[1, 16], [3, 100], [17, 48], [33, 96], [5, 7], [70, 64], [20, 600]],
  bf16: [[1, 16], [3, 32], [17, 48], [33, 100], [4, 5], [70, 64], [20, 600]],
  f16: [[1, 16], [3, 100], [17, 96], [33, 48], [70, 64]],
  // [7, 352], [130, 384]: T = 1 takes rows three at a time, decoded and dotted chunk by chunk
  // (addMm1Chunked), across 128-row and 128-column scale blocks
  fp8: [[3, 130], [17, 16], [33, 100], [130, 260], [7, 352], [130, 384]],
  int4: [[1, 32], [3, 64], [17, 96], [33, 128], [5, 40], [70, 64], [7, 352]],
  // [7, 352] (mxfp4, int4): T = 1 takes two rows of three (addMm1Chunked) and one alone; 11 column
  // groups are two chunks and three single groups
  mxfp4: [[1, 32], [3, 64], [17, 96], [33, 128], [70, 64], [7, 352]],
};
const FORMATS = Object.keys(SHAPES) as WeightFormat[];
// Below TILE_MIN_T[format] (2, 4 or 8) each token runs the single-token dot; from it on, tokens
// come in tiles of TILE_TOKENS with a smaller last tile (every tile size 1..TILE_TOKENS occurs
// below for every format: 8..11 for bf16).
const TS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 64];

let k1: Kernels; // 1 thread
let k2: Kernels; // 2 threads, every call split
let k2s: Kernels; // 2 threads, relaxed SIMD off

before(async () => {
  k1 = await createKernels({ threads: 1, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 8192 });
  k2 = await createKernels({ threads: 2, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 8192, minWorkPerThread: 1 });
  k2s = await createKernels({ threads: 2, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 8192, minWorkPerThread: 1, relaxed: false });
});
after(async () => {
  await Promise.all([k1.close(), k2.close(), k2s.close()]);
});

test('relaxed SIMD: available on this Node, and switchable', () => {
  assert.equal(relaxedSimdAvailable(), true);
  assert.equal(k1.relaxed, true);
  assert.equal(k2s.relaxed, false);
  const a = generate({ relaxed: true }).bytes, b = generate({ relaxed: false }).bytes;
  assert.notDeepEqual(a, b);
  assert.equal(k2.threads, 2);
});

/** y = W x for T tokens on 1 thread, 2 threads (every call split) and 2 without relaxed SIMD: the bytes of ref.ts. */
function matmulMatchesRef(w: WeightView, T: number, what: string): void {
  const x = randX(T * w.cols);
  const want = new Float32Array(T * w.rows);
  ref.matmul(w, x, T, want);
  for (const k of [k1, k2, k2s]) {
    const y = new Float32Array(T * w.rows);
    k.matmul(w, x, T, y);
    sameBytes(y, want, `${w.name} ${what} T=${T} threads=${k.threads} relaxed=${k.relaxed}`);
  }
}

for (const format of FORMATS) {
  test(`matmul ${format}: fast == ref, bytes, for T 1..64 (single-token and tiled paths), threads 1/2, relaxed on/off`, () => {
    for (const [rows, cols] of SHAPES[format]) {
      const dtypes = format === 'int4' || format === 'fp8' ? (['F32', 'BF16', 'F16'] as const) : (['F32'] as const);
      for (const sdt of dtypes) {
        const w = makeWeight(format, rows, cols, sdt);
        for (const T of TS) matmulMatchesRef(w, T, sdt);
      }
    }
  });

  test(`matvecT ${format}: fast == ref, bytes`, () => {
    for (const [rows, cols] of SHAPES[format]) {
      const w = makeWeight(format, rows, cols);
      for (const [r0, n] of [[0, rows], [rows >> 1, rows - (rows >> 1)], [rows - 1, 1], [0, 0]] as const) {
        const x = randX(n + 3);
        const want = new Float32Array(cols);
        ref.matvecT(w, r0, n, x, 3, want);
        for (const k of [k1, k2s]) {
          const y = new Float32Array(cols).fill(7);
          k.matvecT(w, r0, n, x, 3, y);
          sameBytes(y, want, `matvecT ${w.name} r0=${r0} n=${n} relaxed=${k.relaxed}`);
        }
      }
    }
  });
}

test(`tiled path, rows wider than TILE_CHUNK_FROM (${TILE_CHUNK_FROM}) columns: walked in column chunks, the same bytes as ref`, () => {
  // 4117 columns: 257 blocks of 16 in 5 chunks (52, 52, 52, 52, 49) and a tail of 5; 4128
  // (mxfp4, int4: whole groups): 258 blocks in chunks of 52 and 50; 8192: 8 chunks of exactly
  // TILE_CHUNK_COLS; 4096: one chunk
  const cases: [WeightFormat, number, number][] = [['bf16', 9, 4117], ['f32', 5, 4117], ['mxfp4', 7, 4128], ['int4', 3, 4128], ['fp8', 3, 4117], ['bf16', 3, 8192], ['bf16', 3, 4096]];
  assert.ok(TILE_CHUNK_FROM === 4096 && TILE_CHUNK_COLS === 1024);
  for (const [format, rows, cols] of cases) {
    const w = makeWeight(format, rows, cols);
    for (const T of [4, 5, 9, 11]) matmulMatchesRef(w, T, 'wide'); // bf16: tiled from 8 tokens on
  }
});

test(`single-token path, stored rows wider than MM1_WIDE_FROM (${MM1_WIDE_FROM}) columns: ${MM1_WIDE_ROWS} rows at a time, the same bytes as ref`, () => {
  // 37 rows: 4 groups of 9 (rows j, j+9, j+18, j+27) and one alone; 4117 columns: a tail of 5;
  // 3584, 4096: wide; 3072: not (two rows at a time); on 2 threads the pieces are narrower and
  // take either path
  assert.equal(MM1_WIDE_FROM, 3072);
  const cases: [WeightFormat, number, number][] = [['bf16', 37, 4117], ['f32', 33, 4112], ['bf16', 64, 8192], ['bf16', 40, 4096], ['bf16', 36, 3584], ['bf16', 40, 3072]];
  for (const [format, rows, cols] of cases) matmulMatchesRef(makeWeight(format, rows, cols), 1, 'wide');
});

test('mxfp4 edge scales (subnormal results, 255 = zero) and bf16 subnormals', () => {
  const rows = 9, cols = 64;
  const w = makeWeight('mxfp4', rows, cols);
  const edge = [0, 1, 2, 3, 127, 128, 135, 255];
  w.scale!.forEach((_, i) => (w.scale![i] = edge[i % edge.length]!));
  const wb = makeWeight('bf16', rows, cols);
  new Uint16Array(wb.data.buffer).forEach((_, i, a) => {
    if (i % 5 === 0) a[i] = (i & 0x7f) | (i & 8 ? 0x8000 : 0); // subnormals and +-0
  });
  for (const ww of [w, wb]) {
    for (const T of [1, 4, 6, 13]) {
      const x = randX(T * cols);
      const want = new Float32Array(T * rows);
      ref.matmul(ww, x, T, want);
      for (const k of [k1, k2, k2s]) {
        const y = new Float32Array(T * rows);
        k.matmul(ww, x, T, y);
        sameBytes(y, want, `edge ${ww.name} T=${T}`);
      }
    }
  }
});

test('fp8: every e4m3 code (subnormals, 448, NaN) decodes to its exact value times the scale', () => {
  // row r holds code r in column c and zeros elsewhere; x is one-hot at c, so y[r] = value(r) * scale
  // (the scale of its 128x128 block: one f32 rounding); 160 columns take the single-token path's
  // chunked kernel, 48 its row-by-row one
  for (const [cols, c] of [[48, 0], [48, 21], [48, 40], [160, 0], [160, 37], [160, 150]] as const) {
    const rows = 256;
    const data = new Uint8Array(rows * cols);
    for (let r = 0; r < rows; r++) data[r * cols + c] = r;
    const scales = new Float32Array([0.75, 3e-3, 1.5, 2 ** -20]); // [ceil(rows/128), ceil(cols/128)]
    const scale = new Uint8Array(scales.buffer);
    const w: WeightView = { name: `fp8 codes c=${c}`, format: 'fp8', rows, cols, data, scale, scaleDtype: 'F32' };
    const x = new Float32Array(cols);
    x[c] = 1;
    for (const k of [k1, k2, k2s]) {
      const y = new Float32Array(rows);
      k.matmul(w, x, 1, y);
      for (let r = 0; r < rows; r++) {
        const sc = scales[(r >> 7) * Math.ceil(cols / 128) + (c >> 7)]!;
        const want = Math.fround(FP8_TABLE[r]! * sc) + 0; // the dot starts from +0: -0 gives +0
        if (Number.isNaN(want)) assert.ok(Number.isNaN(y[r]), `code ${r}: NaN, got ${y[r]}`);
        else assert.equal(f32Bits(y[r]!), f32Bits(want), `code 0x${r.toString(16)} cols=${cols} c=${c} threads=${k.threads} relaxed=${k.relaxed}`);
      }
    }
  }
});

test('zero copy: weights, activations and outputs inside kernel memory', () => {
  for (const k of [k1, k2]) {
    const m = k.mark();
    const rows = 37, cols = 256, T = 5;
    const w0 = makeWeight('mxfp4', rows, cols);
    const w = k.upload(w0);
    assert.ok(k.contains(w.data) && k.contains(w.scale!));
    const x = k.allocF32(T * cols);
    x.set(randX(T * cols));
    const y = k.allocF32(T * rows);
    const want = new Float32Array(T * rows);
    ref.matmul(w0, x, T, want);
    k.matmul(w, x, T, y);
    sameBytes(y, want, 'resident mxfp4');
    // bytes read straight into alloc()'d regions, as the store will do
    const wb0 = makeWeight('bf16', rows, cols);
    const r = k.alloc(wb0.data.byteLength);
    r.u8.set(wb0.data);
    const wb: WeightView = { ...wb0, data: r.u8 };
    ref.matmul(wb0, x, T, want);
    k.matmul(wb, x, T, y);
    sameBytes(y, want, 'resident bf16');
    k.release(m);
  }
});

test('row ranges and batches: other outputs untouched, one dispatch for several ops', () => {
  const rows = 50, cols = 96, T = 3;
  const wa = makeWeight('bf16', rows, cols), wb = makeWeight('mxfp4', rows, cols), wc = makeWeight('f32', rows, cols);
  const x = randX(T * cols);
  for (const k of [k1, k2]) {
    const want = new Float32Array(T * rows).fill(-1);
    const full = new Float32Array(T * rows);
    ref.matmul(wa, x, T, full);
    for (let t = 0; t < T; t++) for (let r = 7; r < 31; r++) want[t * rows + r] = full[t * rows + r]!;
    const y = new Float32Array(T * rows).fill(-1);
    k.matmul(wa, x, T, y, 7, 31);
    sameBytes(y, want, 'row range');
    // a range long enough for the single-token path's row groups, off the matrix's ends
    for (let t = 0; t < T; t++) for (let r = 3; r < 47; r++) want[t * rows + r] = full[t * rows + r]!;
    k.matmul(wa, x, T, y, 3, 47);
    sameBytes(y, want, 'row range of groups');

    const outs = [wa, wb, wc].map(() => new Float32Array(T * rows));
    k.matmulBatch([wa, wb, wc].map((w, i) => ({ w, x, T, y: outs[i]! })));
    [wa, wb, wc].forEach((w, i) => {
      const ref1 = new Float32Array(T * rows);
      ref.matmul(w, x, T, ref1);
      sameBytes(outs[i]!, ref1, `batch ${w.name}`);
    });
  }
});

test('a token gives the same bytes alone or in any chunk (T independence)', () => {
  const rows = 21, cols = 160;
  for (const format of ['bf16', 'mxfp4', 'int4', 'f32', 'fp8'] as const) {
    const w = makeWeight(format, rows, cols);
    const T = 17;
    const x = randX(T * cols);
    const all = new Float32Array(T * rows);
    k2.matmul(w, x, T, all);
    for (let t = 0; t < T; t++) {
      const one = new Float32Array(rows);
      k1.matmul(w, x.subarray(t * cols, (t + 1) * cols), 1, one);
      sameBytes(one, all.subarray(t * rows, (t + 1) * rows), `${format} token ${t}`);
    }
  }
});

test('matvecTHeads: the heads in one dispatch give the bytes of one matvecT per head (bf16, mxfp4)', () => {
  const H = 5, n = 24, rStride = 40, cols = 96, xStride = 30;
  for (const format of ['bf16', 'mxfp4'] as const) {
    const w = makeWeight(format, 3 + (H - 1) * rStride + n, cols);
    const x = randX(2 + (H - 1) * xStride + n);
    const want = new Float32Array(H * cols);
    for (let h = 0; h < H; h++) ref.matvecT(w, 3 + h * rStride, n, x, 2 + h * xStride, want.subarray(h * cols, (h + 1) * cols));
    for (const k of [k1, k2, k2s]) {
      const y = new Float32Array(H * cols).fill(7);
      k.matvecTHeads(w, 3, rStride, n, x, 2, xStride, y, H);
      sameBytes(y, want, `matvecTHeads ${format} threads=${k.threads} relaxed=${k.relaxed}`);
    }
  }
});

test('a profile attached (k3 bench --profile) times calls into its buckets and changes no byte', () => {
  const rows = 64, cols = 4096;
  const wa = makeWeight('bf16', rows, cols), wb = makeWeight('mxfp4', rows, cols);
  const x = randX(cols);
  for (const k of [k1, k2]) {
    const prof = new KernelProfile();
    const plain = [wa, wb].map((w) => {
      const y = new Float32Array(rows);
      k.matmul(w, x, 1, y);
      return y;
    });
    k.profile = prof;
    try {
      [wa, wb].forEach((w, i) => {
        const y = new Float32Array(rows);
        k.matmul(w, x, 1, y);
        sameBytes(y, plain[i]!, `profiled ${w.name}`);
      });
    } finally {
      k.profile = null;
    }
    assert.equal(prof.calls, 2);
    assert.ok(prof.ms.matmul > 0 && prof.ms.experts > 0 && prof.ms.dispatch >= 0 && prof.ms.wait >= 0);
    if (k.threads === 1) assert.equal(prof.ms.wait, 0);
  }
});

test('bad inputs are refused', () => {
  const w = makeWeight('bf16', 4, 32);
  assert.throws(() => k1.matmul({ ...w, data: w.data.subarray(0, 10) }, randX(32), 1, new Float32Array(4)), /data bytes/);
  assert.throws(() => k1.matmul(w, randX(16), 1, new Float32Array(4)), /activations/);
  assert.throws(() => k1.matmul(w, randX(32), 1, new Float32Array(4), 2, 9), /row range/);
  assert.throws(() => k1.matmul(makeWeight('f32', 2, 8200), randX(8200), 1, new Float32Array(2)), /maxCols/);
});

test('rows claimed at run time: 4 threads on 2 cores, batches of products, 12 repeats, the reference bytes every time', async () => {
  // More threads than cores: which thread claims which piece of an op changes from run to run.
  const k4 = await createKernels({ threads: 4, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096, minWorkPerThread: 1 });
  try {
    const ops = (['bf16', 'mxfp4', 'bf16', 'f32'] as const).map((format, i) => {
      const rows = 96 + 37 * i, cols = 256, T = i === 1 ? 5 : 1; // T = 5: the tiled path
      const w = makeWeight(format, rows, cols, 'F32');
      const x = randX(T * cols);
      const want = new Float32Array(T * rows);
      ref.matmul(w, x, T, want);
      return { w, x, T, want };
    });
    for (let rep = 0; rep < 12; rep++) {
      const ys = ops.map((o) => new Float32Array(o.want.length));
      k4.matmulBatch(ops.map((o, i) => ({ w: o.w, x: o.x, T: o.T, y: ys[i]! })));
      ops.forEach((o, i) => sameBytes(ys[i]!, o.want, `${o.w.name} T=${o.T} repeat ${rep}`));
    }
  } finally {
    await k4.close();
  }
});

test('a piece that fails (out-of-bounds weights) fails the dispatch on any thread, and the pool goes on working', async () => {
  const k = await createKernels({ threads: 2, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096, minWorkPerThread: 1 });
  try {
    const pool = (k as unknown as { pool: { ctrl: Int32Array; run(nops: number, nth: number): void } }).pool;
    const bytes = k.memory.buffer.byteLength;
    for (let rep = 0; rep < 5; rep++) {
      // 512 rows of 256 bf16 columns read from past the end of the memory: every piece traps
      writeMatmulOp(pool.ctrl, 0, FMTS.indexOf('bf16'), bytes - 4096, 0, 0, 512, 256, 64 << 10, 1, 128 << 10, 0, 512);
      assert.throws(() => pool.run(1, 2), /out of bounds|kernel worker failed/);
    }
    const w = makeWeight('bf16', 300, 256);
    const x = randX(256), want = new Float32Array(300), y = new Float32Array(300);
    ref.matmul(w, x, 1, want);
    k.matmul(w, x, 1, y);
    sameBytes(y, want, 'after the failures');
  } finally {
    await k.close();
  }
});

test('gatedMlpBatch: one chained dispatch (barriers between gate/up, activations, layout, down) == the products and activations one dispatch each, bytes', async () => {
  // 4 threads on 2 cores: the phases' pieces land on different threads from run to run
  const k4 = await createKernels({ threads: 4, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096, minWorkPerThread: 1 });
  try {
    // (gate/up format, down format, inner rows, cols, T): odd inner widths pad the activation units;
    // T = 1 rows (permuted for bf16 / mxfp4, in place for f32 / fp8), T = 5 and 64 token tiles
    const shapes: [WeightFormat, WeightFormat, number, number, number][] = [
      ['mxfp4', 'mxfp4', 64, 128, 1], ['bf16', 'bf16', 37, 96, 1], ['int4', 'int4', 33, 64, 5], ['f32', 'fp8', 19, 64, 3],
      ['mxfp4', 'mxfp4', 96, 64, 64], ['fp8', 'f32', 130, 128, 1], ['bf16', 'mxfp4', 64, 96, 2],
    ];
    const items = shapes.map(([gu, dn, I, D, T]) => ({ gate: makeWeight(gu, I, D), up: makeWeight(gu, I, D), down: makeWeight(dn, D, I), x: randX(T * D), T }));
    const acts: [ActKind, number, number | null][] = [['silu', 1, null], ['situ', 3, null], ['situ', 3, 8]];
    for (const k of [k1, k2, k2s, k4]) {
      for (const fast of [false, true]) {
        k.fastMxfp4 = fast;
        for (const [kind, b, bl] of acts) {
          // one dispatch per step, as ops.ts did before the chain
          const g = items.map((it) => new Float32Array(it.T * it.gate.rows)), u = items.map((it) => new Float32Array(it.T * it.up.rows));
          k.matmulBatch(items.flatMap((it, i) => [{ w: it.gate, x: it.x, T: it.T, y: g[i]! }, { w: it.up, x: it.x, T: it.T, y: u[i]! }]));
          const h = items.map((it) => new Float32Array(it.T * it.gate.rows));
          k.gatedActBatch(items.map((_, i) => ({ gate: g[i]!, up: u[i]!, out: h[i]! })), kind, b, bl);
          const want = items.map((it) => new Float32Array(it.T * it.down.rows));
          k.matmulBatch(items.map((it, i) => ({ w: it.down, x: h[i]!, T: it.T, y: want[i]! })));
          for (let rep = 0; rep < (k === k4 ? 4 : 1); rep++) {
            const ys = items.map((it) => new Float32Array(it.T * it.down.rows).fill(NaN));
            k.gatedMlpBatch(items.map((it, i) => ({ ...it, y: ys[i]! })), kind, b, bl);
            items.forEach((it, i) => sameBytes(ys[i]!, want[i]!, `${it.gate.name}/${it.down.name} T=${it.T} ${kind} fast=${fast} threads=${k.threads}`));
          }
        }
      }
      k.fastMxfp4 = false;
    }
    // the exact path is the reference's bytes too; the chain's arrays made while the memory grows
    const [kind, b, bl] = acts[2]!;
    const m = k2.mark();
    for (const it of items) {
      k2.alloc(k2.memory.buffer.byteLength - Math.ceil(k2.mark() / 64) * 64); // the arena full: the chain's first array grows the memory
      const g = new Float32Array(it.T * it.gate.rows), u = new Float32Array(g.length), h = new Float32Array(g.length), want = new Float32Array(it.T * it.down.rows);
      ref.matmul(it.gate, it.x, it.T, g);
      ref.matmul(it.up, it.x, it.T, u);
      gatedActRef(g, u, h, kind, b, bl);
      ref.matmul(it.down, h, it.T, want);
      const y = new Float32Array(want.length);
      k2.gatedMlpBatch([{ ...it, y }], kind, b, bl);
      sameBytes(y, want, `${it.gate.name} vs reference`);
    }
    k2.release(m);
  } finally {
    await k4.close();
  }
});

test('a launched chain (Chain.launch): its first steps read at once, the rest in the workers while the caller works, joined by the next dispatch or join(); bytes as run(); done() keeps what was allocated meanwhile', async () => {
  const k4 = await createKernels({ threads: 4, memoryBytes: 8 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096, minWorkPerThread: 1 });
  try {
    const D = 96, I = 64, E = 16;
    const router = makeWeight('f32', E, D), down = makeWeight('bf16', 48, D);
    const mlp = { gate: makeWeight('mxfp4', I, D), up: makeWeight('mxfp4', I, D), down: makeWeight('bf16', D, I) };
    const other = makeWeight('bf16', 40, D);
    for (const T of [1, 5]) {
      const x = randX(T * D), xo = randX(T * D);
      const want = { r: new Float32Array(T * E), z: new Float32Array(T * 48), y: new Float32Array(T * D), o: new Float32Array(T * 40) };
      k1.matmulBatch([{ w: router, x, T, y: want.r }, { w: down, x, T, y: want.z }]);
      k1.gatedMlpBatch([{ ...mlp, x, T, y: want.y }], 'situ', 3, 8);
      k1.matmul(other, xo, T, want.o);
      for (const k of [k1, k2, k4]) {
        for (let rep = 0; rep < (k === k4 ? 6 : 2); rep++) {
          const keptBefore = Chain.kept;
          const ch = k.chain();
          const r = ch.matmul(router, x, T), z = ch.matmul(down, x, T);
          const yOut = new Float32Array(T * D).fill(NaN); // outside kernel memory: filled at join
          const [y] = ch.next().gatedMlps([{ ...mlp, x, T, y: yOut }], 'situ', 3, 8);
          ch.launch(1);
          sameBytes(r, want.r, `router T=${T} threads=${k.threads}, read before join`);
          sameBytes(z, want.z, `latent T=${T} threads=${k.threads}, read before join`);
          if (rep % 2 === 0) {
            const o = new Float32Array(T * 40);
            k.matmul(other, xo, T, o); // another dispatch: joins the launched one first
            sameBytes(o, want.o, 'a dispatch made meanwhile');
          }
          const held = rep === 1 ? k.alloc(4096) : null; // made meanwhile and kept: done() must not free it
          ch.join();
          assert.equal(y, yOut);
          sameBytes(yOut, want.y, `shared MLP T=${T} threads=${k.threads}, after join`);
          const top = k.mark();
          ch.done();
          if (held) {
            assert.equal(k.mark(), top, 'done() left the arena as it was: something allocated after the run is still held');
            assert.equal(Chain.kept, keptBefore + 1);
          } else assert.ok(k.mark() < top, 'done() freed the chain');
        }
      }
    }
  } finally {
    await k4.close();
  }
});

test('chain gatherRows: rows by index, back to back (the threads copy them) == moe.ts gatherRows, bytes', () => {
  for (const k of [k1, k2]) {
    for (const cols of [1, 4, 37, 1024]) {
      const m = k.mark();
      const ch = k.chain();
      const n = 23, src = ch.alloc(n * cols);
      for (let i = 0; i < src.length; i++) src[i] = rnd() * 2 - 1;
      const rows = [5, 0, 22, 5, 13, 1, 21];
      const out = ch.gatherRows(src, rows, cols);
      ch.run();
      const want = new Float32Array(rows.length * cols);
      rows.forEach((r, i) => want.set(src.subarray(r * cols, (r + 1) * cols), i * cols));
      sameBytes(out, want, `gatherRows cols=${cols} threads=${k.threads}`);
      assert.throws(() => ch.gatherRows(src, [n], cols), /outside/);
      assert.throws(() => ch.gatherRows(new Float32Array(cols), [0], cols), /kernel memory/);
      ch.done();
      k.release(m);
    }
  }
});

test('chain moeCombine: the routed sum in router order and the latent RMSNorm == moe.ts / ops.ts in JavaScript, bytes', () => {
  const T = 5, K = 3, zw = 37, eps = 1e-6;
  const normW = new Float32Array(zw).map(() => rnd() * 2 - 1);
  for (const k of [k1, k2]) {
    for (const withNorm of [true, false]) {
      const m = k.mark();
      const norm = k.allocF32(zw);
      norm.set(normW);
      const ch = k.chain();
      const ys = Array.from({ length: T * K }, () => {
        const y = ch.alloc(zw); // (in the arena, as the expert outputs of earlier steps are)
        for (let i = 0; i < zw; i++) y[i] = (rnd() * 2 - 1) * 10 ** Math.floor(rnd() * 6 - 3);
        return y;
      });
      const w = new Float32Array(T * K).map(() => rnd());
      const out = ch.moeCombine(new Uint32Array(ys.map((y) => y.byteOffset)), w, T, K, zw, withNorm ? norm : null, eps);
      // the same rows as parts of one arena array, reversed (as moe.ts addresses an expert's rows)
      const packed = ch.alloc(T * K * zw);
      ys.forEach((y, i) => packed.set(y, (T * K - 1 - i) * zw));
      const offs = new Uint32Array(T * K).map((_, i) => packed.byteOffset + 4 * (T * K - 1 - i) * zw);
      const out2 = ch.moeCombine(offs, w, T, K, zw, withNorm ? norm : null, eps);
      ch.run();
      const want = new Float32Array(T * zw);
      for (let t = 0; t < T; t++) for (let j = 0; j < K; j++) for (let i = 0; i < zw; i++) want[t * zw + i] = want[t * zw + i]! + Math.fround(w[t * K + j]! * ys[t * K + j]![i]!);
      sameBytes(out, withNorm ? rmsNorm(want, T, zw, normW, eps) : want, `moeCombine norm=${withNorm} threads=${k.threads}`);
      sameBytes(out2, out, `moeCombine rows in one array norm=${withNorm} threads=${k.threads}`);
      assert.throws(() => ch.moeCombine(new Uint32Array(T * K).fill(2), w, T, K, zw, null, eps), /kernel memory/);
      ch.done();
      k.release(m);
    }
  }
});

test('chain moeCombine takes expert rows past 2 GiB of kernel memory (offsets unsigned)', async () => {
  // A kernel memory holds up to 3.75 GiB of weights, so a chain's arena can start past 2^31: an
  // expert row's byte offset there is negative as an Int32 (it was refused as outside the memory).
  const big = await createKernels({ threads: 1, memoryBytes: 2200 * 2 ** 20 });
  try {
    big.alloc(2100 * 2 ** 20, 4096); // (pages nobody writes cost no RSS)
    const ch = big.chain();
    const y = ch.alloc(8).fill(1.5);
    assert.ok(y.byteOffset >= 2 ** 31);
    const out = ch.moeCombine(new Uint32Array([y.byteOffset]), new Float32Array([2]), 1, 1, 8, null, 1e-6);
    ch.run();
    sameBytes(out, new Float32Array(8).fill(3), 'moeCombine past 2 GiB');
    ch.done();
  } finally {
    await big.close();
  }
});
