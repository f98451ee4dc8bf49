// Column panels (src/formats/panels.ts): a resident wide bf16 matrix laid out in panels gives the
// bytes of the row-major matrix, in the kernels (single-token mm1p and the tiled path, any T, any
// thread count, relaxed SIMD on or off), in the TypeScript reference, and through a whole model
// at any budget (pinned pieces panelled, streamed ones not), chunk size and thread count.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { GOLDEN, sameBytes, xorshift } from '../helpers.js';
import { panelWidth, panelSliceOffset, toPanelsInPlace } from '../../src/formats/panels.js';
import { decodeRow } from '../../src/formats/decode.js';
import { createKernels } from '../../src/kernels/fast.js';
import * as ref from '../../src/kernels/ref.js';
import { Model } from '../../src/model/model.js';
import { packCheckpoint } from '../../src/store/pack.js';
import type { WeightView } from '../../src/formats/weight.js';

/** Deterministic bf16 bits of values in about [-0.1, 0.1]. */
function bf16Bits(n: number, seed: number): Uint16Array {
  const out = new Uint16Array(n);
  const f = new Float32Array(1), u = new Uint32Array(f.buffer);
  const rnd = xorshift(seed);
  for (let i = 0; i < n; i++) {
    f[0] = (rnd() - 0.5) * 0.2;
    out[i] = u[0]! >>> 16;
  }
  return out;
}

/** Rows in blocks of `block` rows, each block laid out in panels `width` wide (as the store does a piece). */
function panelled(bytes: Uint8Array, rows: number, cols: number, block: number, width: number): void {
  for (let b0 = 0; b0 < rows; b0 += block) {
    const n = Math.min(block, rows - b0);
    toPanelsInPlace(bytes.subarray(b0 * cols * 2, (b0 + n) * cols * 2), n, cols, width);
  }
}

test('panelWidth: the widest 16-column multiple dividing the row, near 2048, or none', () => {
  assert.equal(panelWidth(7168), 1792);
  assert.equal(panelWidth(12288), 2048);
  assert.equal(panelWidth(6144), 2048);
  assert.equal(panelWidth(3584), 1792);
  assert.equal(panelWidth(5120), 1280);
  assert.equal(panelWidth(3152), 0); // 16 * 197: only 16-column panels
  assert.equal(panelWidth(100), 0);
  assert.equal(panelWidth(96, 32), 32);
  assert.equal(panelWidth(48, 32), 16);
});

test('toPanelsInPlace puts every value where panelSliceOffset says; decodeRow reads the rows back', () => {
  for (const [rows, cols, block, width] of [[1, 64, 1, 16], [7, 96, 7, 32], [33, 64, 10, 16], [130, 96, 64, 32], [5, 48, 5, 48], [64, 4096, 25, 2048]] as const) {
    const bits = bf16Bits(rows * cols, rows * 7 + cols);
    const bytes = new Uint8Array(bits.slice().buffer);
    panelled(bytes, rows, cols, block, width);
    const u16 = new Uint16Array(bytes.buffer);
    const L = { rows: block, width };
    const v: WeightView = { name: 'p', format: 'bf16', rows, cols, data: bytes, panels: L };
    const row = new Float32Array(cols), want = new Float32Array(cols);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const p = Math.floor(c / width);
        assert.equal(u16[panelSliceOffset(rows, cols, L, r, p) / 2 + (c - p * width)], bits[r * cols + c], `${rows}x${cols} (${r}, ${c})`);
      }
      decodeRow(v, r, row);
      decodeRow({ name: 'a', format: 'bf16', rows, cols, data: new Uint8Array(bits.buffer) }, r, want);
      assert.ok(sameBytes(row, want), `${rows}x${cols}: row ${r}`);
    }
  }
});

test('kernels: panelled rows give the row-major bytes at T 1..20, 1-3 threads, relaxed on and off', async () => {
  // [rows, cols, block rows, panel width]: several blocks, sub-blocks of 128 rows, rows in pairs and alone
  const shapes = [[300, 96, 130, 32], [37, 64, 37, 16], [21, 64, 8, 32], [260, 4096, 200, 2048]] as const;
  for (const [threads, relaxed] of [[1, true], [2, true], [3, false]] as const) {
    const k = await createKernels({ threads, relaxed, maxCols: 4096, memoryBytes: 64 << 20, minWorkPerThread: 1 << 10 });
    try {
      for (const [rows, cols, block, width] of shapes) {
        const bits = bf16Bits(rows * cols, rows + cols);
        const a = k.alloc(rows * cols * 2).u8, p = k.alloc(rows * cols * 2).u8;
        a.set(new Uint8Array(bits.buffer));
        p.set(a);
        panelled(p, rows, cols, block, width);
        const rowMajor: WeightView = { name: 'a', format: 'bf16', rows, cols, data: a };
        const panels: WeightView = { name: 'p', format: 'bf16', rows, cols, data: p, panels: { rows: block, width } };
        for (const T of [1, 2, 3, 4, 7, 8, 9, 20]) {
          const x = Float32Array.from({ length: T * cols }, (_, i) => Math.sin(i * 0.37) * 2);
          const ya = new Float32Array(T * rows), yp = new Float32Array(T * rows);
          k.matmul(rowMajor, x, T, ya);
          k.matmul(panels, x, T, yp);
          assert.ok(sameBytes(yp, ya), `${threads} threads, relaxed ${relaxed}, ${rows}x${cols} in ${block}-row blocks of ${width}-column panels, T = ${T}`);
          if (threads === 1 && T <= 3) {
            const yr = new Float32Array(T * rows);
            ref.matmul(panels, x, T, yr);
            assert.ok(sameBytes(yr, ya), `reference, ${rows}x${cols}, T = ${T}`);
          }
        }
      }
      const p: WeightView = { name: 'p', format: 'bf16', rows: 4, cols: 64, data: k.alloc(512).u8, panels: { rows: 4, width: 32 } };
      k.matmul(p, new Float32Array(0), 0, new Float32Array(0)); // no tokens: nothing, no trap
      assert.throws(() => k.matvecT(p, 0, 4, new Float32Array(4), 0, new Float32Array(64)), /column panels/);
    } finally {
      await k.close();
    }
  }
});

const CASES = ['k2-yarn', 'k2-thinking-int4', 'kimi-linear', 'k3'];
const PANELS = { from: 16, width: 32 };
const SMALL_PIECE = 8 * 1024;

for (const name of CASES) {
  test(`${name}: panelled trunk, the same bytes at every budget, chunk and thread count`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 16);
    const base = Model.open(dir, { ctx: 64, panels: false });
    const want = await base.forward(base.newState(), ids, 'all');
    await base.close();
    const plan = Model.plan(dir, { budget: 0, ctx: 64, chunk: 64, maxPiece: SMALL_PIECE });
    // all pinned (split matrices in one buffer), about half pinned (the rest streamed, row-major)
    const budgets = [Number.MAX_SAFE_INTEGER, plan.floorBytes + Math.floor(plan.trunkBytes / 2) + 3 * plan.expertBytes];
    let sawPanels = false;
    for (const budget of budgets) {
      for (const chunk of [1, 7, 64]) {
        const m = Model.open(dir, { budget, chunk, ctx: 64, maxPiece: SMALL_PIECE, panels: PANELS });
        sawPanels ||= m.store.panelledBytes > 0;
        const got = await m.forward(m.newState(), ids, 'all', chunk);
        assert.ok(sameBytes(got, want), `budget ${budget}, chunk ${chunk}: logits differ`);
        await m.close();
      }
    }
    assert.ok(sawPanels, 'some trunk matrix went in panels');
    for (const threads of [1, 2]) {
      const m = await Model.load(dir, { threads, chunk: 7, ctx: 64, maxPiece: SMALL_PIECE, panels: PANELS });
      const got = await m.forward(m.newState(), ids, 'all', 7);
      assert.ok(sameBytes(got, want), `wasm, ${threads} threads: logits differ`);
      // a traced store lends each piece on its own (Mat.parts): the pieces' own panel views
      m.store.trace = () => {};
      const traced = await m.forward(m.newState(), ids, 'all', 7);
      assert.ok(sameBytes(traced, want), `wasm, ${threads} threads, piece by piece: logits differ`);
      await m.close();
    }
  });
}

test('k3 packed with --compress: coded pieces decoded, then laid out in panels: the same bytes', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-panels-test-'));
  try {
    await packCheckpoint({ model: dir, out: path.join(out, 'coded'), compress: true });
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 16);
    const base = Model.open(dir, { ctx: 64, panels: false });
    const want = await base.forward(base.newState(), ids, 'all');
    await base.close();
    const m = await Model.load(path.join(out, 'coded'), { threads: 2, ctx: 64, maxPiece: SMALL_PIECE, panels: PANELS });
    assert.ok(m.store.panelledBytes > 0, 'some coded matrix went in panels');
    assert.ok(sameBytes(await m.forward(m.newState(), ids, 'all', 5), want), 'logits differ');
    await m.close();
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});
