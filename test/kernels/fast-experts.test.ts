// The optional fast path for MXFP4 products (8-bit activations, integer block dots; off by
// default): the WebAssembly kernel gives the bytes of its TypeScript reference (odd sizes, T 1..8,
// threads 1/2, relaxed on/off), every product stays within the analytic error bound of its 8-bit
// activation rounding (random and the golden K3's own expert weights), and on the golden K3 the
// path runs and is deterministic across threads and chunk sizes.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, readTensorBytes, sameBytes, xorshift } from '../helpers.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { createKernels } from '../../src/kernels/fast.js';
import * as ref from '../../src/kernels/ref.js';
import { matmulQ8Ref } from '../../src/kernels/wasm/q8.js';
import type { WeightView } from '../../src/formats/weight.js';
import { Model } from '../../src/model/model.js';
import { nextTokenKL } from '../../src/cli/bench.js';

const rnd = xorshift(0x2545f491);

function mxWeight(rows: number, cols: number): WeightView {
  const data = new Uint8Array((rows * cols) / 2).map(() => Math.floor(rnd() * 256));
  const scale = new Uint8Array((rows * cols) / 32).map(() => {
    const u = rnd();
    return u < 0.02 ? 0 : u < 0.04 ? 255 : u < 0.06 ? 1 : 118 + Math.floor(rnd() * 12);
  });
  return { name: 'mx', format: 'mxfp4', rows, cols, data, scale };
}

function acts(n: number): Float32Array {
  const x = new Float32Array(n).map(() => (rnd() - 0.5) * (rnd() < 0.05 ? 100 : 2));
  for (let i = 0; i < n; i += 97) x[i] = 0;
  if (n >= 64) x.fill(0, 32, 64); // one all-zero block (d = 0)
  return x;
}

/**
 * The q8 path's error, bounded from the quantization alone (not from a measured run). Each block of
 * 32 activations is stored as d * q with d = max|x| / 127 and q = round(x / d), so every element
 * is off by at most d / 2 = max|x| / 254. The weight side is exact (MXFP4 codes times the E8M0
 * scale, both exact in f32) and the integer block dot is exact, so the product's error is at most
 *   sum over blocks b of (max_{c in b} |x_c|) / 254 * sum_{c in b} |w_c|,
 * plus f32 rounding of the scale products and of the sums on both paths, which is below
 * 1e-6 * sum |x_c w_c| for these lengths (<= 1024 terms: ~ cols * 2^-24 relative). Checked per
 * element against the exact path (ref.matmul: decoded weights, f32 activations).
 */
function checkQ8Bound(w: WeightView, x: Float32Array, T: number, got: Float32Array, what: string): void {
  const { rows, cols } = w;
  const exact = new Float32Array(T * rows);
  ref.matmul(w, x, T, exact);
  const wd = new Float32Array(cols);
  for (let r = 0; r < rows; r++) {
    ref.decodeRow(w, r, wd);
    for (let t = 0; t < T; t++) {
      const i = t * rows + r;
      assert.ok(Number.isFinite(got[i]!), `${what}: finite`);
      let mag = 0, bound = 0;
      for (let b = 0; b < cols; b += 32) {
        let amax = 0, sw = 0;
        for (let c = b; c < b + 32; c++) {
          amax = Math.max(amax, Math.abs(x[t * cols + c]!));
          sw += Math.abs(wd[c]!);
          mag += Math.abs(x[t * cols + c]! * wd[c]!);
        }
        bound += (sw * amax) / 254;
      }
      assert.ok(Math.abs(got[i]! - exact[i]!) <= bound * (1 + 1e-6) + 1e-6 * mag + 1e-35, `${what}: q8 ${got[i]} vs exact ${exact[i]} at row ${r} t ${t}, over the bound ${bound}`);
    }
  }
}

test('q8 x mxfp4: wasm == TypeScript reference bytes (odd sizes, T 1..8, threads 1/2, relaxed on/off, both integer dot forms)', async () => {
  // relaxed: the i32x4 dot-add accumulating (intDotAdd, Arm64's one instruction) and the i16x8 dot
  // widened by a dot with ones (x86); plain SIMD: extmul
  for (const [relaxed, intDotAdd] of [[true, false], [true, true], [false, false]] as const) {
    for (const threads of [1, 2]) {
      const k = await createKernels({ threads, relaxed, intDotAdd, minWorkPerThread: 1, maxCols: 2048 });
      try {
        k.fastMxfp4 = true;
        for (const [rows, cols] of [[1, 32], [3, 96], [37, 224], [5, 128], [19, 1024], [8, 160]] as const) {
          const w = k.upload(mxWeight(rows, cols));
          for (let T = 1; T <= 8; T++) {
            const x = acts(T * cols);
            const want = new Float32Array(T * rows);
            matmulQ8Ref(w, x, T, want);
            const got = new Float32Array(T * rows);
            k.matmul(w, x, T, got);
            assert.ok(sameBytes(got, want), `relaxed ${relaxed} intDotAdd ${intDotAdd} threads ${threads} ${rows}x${cols} T ${T}`);
            // a row range, as the pool splits it
            const part = new Float32Array(T * rows).fill(7);
            k.matmulBatch([{ w, x, T, y: part, r0: Math.floor(rows / 3), r1: rows }]);
            for (let t = 0; t < T; t++) for (let r = Math.floor(rows / 3); r < rows; r++) assert.equal(part[t * rows + r], want[t * rows + r]);
            // within the analytic bound of the 8-bit activation rounding (checkQ8Bound, above)
            checkQ8Bound(w, x, T, got, `${rows}x${cols} T ${T}`);
          }
        }
        // the default stays the exact path
        k.fastMxfp4 = false;
        const w = k.upload(mxWeight(9, 96));
        const x = acts(3 * 96);
        const a = new Float32Array(27), b = new Float32Array(27);
        k.matmul(w, x, 3, a);
        ref.matmul(w, x, 3, b);
        assert.ok(sameBytes(a, b), 'default path == exact reference');
      } finally {
        await k.close();
      }
    }
  }
});

test('k3 golden: every MXFP4 expert of the checkpoint, q8 path within the analytic bound of the exact one', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const index = indexCheckpointDir(dir);
  const k = await createKernels({ threads: 1, relaxed: false, minWorkPerThread: 1, maxCols: 2048 });
  try {
    k.fastMxfp4 = true;
    let n = 0;
    for (const [name, e] of index) {
      if (!name.endsWith('.weight_packed')) continue;
      const base = name.slice(0, -'.weight_packed'.length);
      const s = index.get(`${base}.weight_scale`);
      assert.ok(s, `${base}.weight_scale present`);
      const [rows, half] = e.shape as [number, number];
      const w = k.upload({ name: base, format: 'mxfp4', rows, cols: 2 * half, data: new Uint8Array(readTensorBytes(e)), scale: new Uint8Array(readTensorBytes(s)) });
      const T = 3;
      const x = acts(T * w.cols);
      const got = new Float32Array(T * rows);
      k.matmul(w, x, T, got);
      checkQ8Bound(w, x, T, got, base);
      n++;
    }
    assert.equal(n, 8 * 16 * 3, 'w1, w2, w3 of 16 experts in 8 MoE layers');
  } finally {
    await k.close();
  }
});

// Closeness of the whole model is not asserted as a KL number from a run: it follows from the
// per-product bound above (a rounding can still flip an expert choice, which no small bound
// covers). Here: the path runs, is deterministic, differs from the exact one, leaves the default
// path untouched; the KL is printed for information.
test('k3 golden: --fast-experts runs, is deterministic across threads/chunks, default path untouched', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const ids = JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[];
  const V = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')).text_config.vocab_size as number;
  assert.ok(Number.isInteger(V) && V > 0, `${dir}/config.json: text_config.vocab_size`);
  let base: Float32Array | null = null;
  let fast1: Float32Array | null = null;
  for (const [threads, chunk] of [[1, 64], [2, 64], [2, 7]] as const) {
    const m = await Model.load(dir, { ctx: 128, threads, fastExperts: true });
    try {
      assert.equal(m.config.vocabSize, V);
      assert.equal(m.kernels!.fastExperts, true);
      const got = await m.forward(m.newState(), ids, 'all', chunk);
      assert.ok(got.every((v) => Number.isFinite(v)), 'finite logits');
      if (!fast1) {
        fast1 = got;
        m.kernels!.fastExperts = false;
        base = await m.forward(m.newState(), ids, 'all', chunk);
        const { meanKL, top1 } = nextTokenKL(base, got, V);
        console.log(`k3 golden fast experts: mean KL ${meanKL.toExponential(3)}, top-1 agreement ${(100 * top1).toFixed(1)}% over ${ids.length} positions`);
        assert.ok(!sameBytes(base, got), 'the fast path is a different computation');
      } else assert.ok(sameBytes(got, fast1), `threads ${threads} chunk ${chunk}: fast-path logits differ`);
    } finally {
      await m.close();
    }
  }
  // the default path is untouched: same bytes as the reference
  const r = Model.open(dir, { ctx: 128 });
  const want = await r.forward(r.newState(), ids, 'all');
  await r.close();
  assert.ok(sameBytes(base!, want), 'default path == reference bytes');
});
