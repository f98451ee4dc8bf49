// The `--fast` trunk path (bf16 trunk rows requantized to 7-bit blocks at load, 8-bit activations,
// integer block dots; off by default): the WebAssembly kernel gives the bytes of its TypeScript
// reference (odd sizes, T 1..9, threads 1/2, relaxed on/off, row ranges); the in-place
// requantization is what its definition says; on the golden checkpoints the path runs, is
// deterministic across threads, chunk sizes and budgets (streamed pieces are requantized too), and
// its next-token KL against the exact path stays under a bound.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN, sameBytes, xorshift } from '../helpers.js';
import { createKernels } from '../../src/kernels/fast.js';
import * as ref from '../../src/kernels/ref.js';
import { matmulQ7Ref, requantizeQ7InPlace, q7View, Q7_OFF } from '../../src/kernels/wasm/q8-trunk.js';
import { groupWordsPos } from '../../src/kernels/wasm/q8.js';
import type { WeightView } from '../../src/formats/weight.js';
import { Model } from '../../src/model/model.js';
import { viewNow, visitParts } from '../../src/store/mat.js';
import { nextTokenKL } from '../../src/cli/bench.js';

const rnd = xorshift(0x1b873593);
const fr = Math.fround;

/** bf16 bytes of rows x cols values (a few zero blocks, outliers, a negative zero). */
function bf16Bytes(rows: number, cols: number): Uint8Array {
  const f = new Float32Array(rows * cols).map(() => (rnd() - 0.5) * (rnd() < 0.03 ? 40 : 0.2));
  if (f.length >= 64) f.fill(0, 32, 64);
  if (f.length > 5) f[5] = -0;
  const u = new Uint32Array(f.buffer);
  const out = new Uint8Array(2 * f.length);
  for (let i = 0; i < f.length; i++) {
    const h = u[i]! >>> 16; // truncation is fine: any bf16 will do
    out[2 * i] = h & 255;
    out[2 * i + 1] = h >> 8;
  }
  return out;
}

/** A q7 view over requantized bf16 bytes (data then f32 scales, in the same buffer). */
function requantized(bytes: Uint8Array, rows: number, cols: number): WeightView {
  requantizeQ7InPlace(bytes, rows, cols);
  return q7View('q7', bytes, rows, cols);
}

function acts(n: number): Float32Array {
  const x = new Float32Array(n).map(() => (rnd() - 0.5) * (rnd() < 0.05 ? 100 : 2));
  for (let i = 0; i < n; i += 97) x[i] = 0;
  if (n >= 96) x.fill(0, 64, 96); // one all-zero block (d = 0)
  return x;
}

test('q7 requantization in place: per block of 32, d = f32(amax / 63), q = round(w / d) + 64', () => {
  const rows = 7, cols = 160;
  const bf = bf16Bytes(rows, cols);
  const orig = new Float32Array(rows * cols);
  const u = new Uint32Array(orig.buffer);
  for (let i = 0; i < orig.length; i++) u[i] = ((bf[2 * i]! | (bf[2 * i + 1]! << 8)) << 16) >>> 0;
  const w = requantized(bf, rows, cols);
  const sv = new DataView(w.scale!.buffer, w.scale!.byteOffset, w.scale!.byteLength);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < cols / 32; b++) {
      let amax = 0;
      for (let c = b * 32; c < b * 32 + 32; c++) amax = Math.max(amax, Math.abs(orig[r * cols + c]!));
      const d = sv.getFloat32(4 * (r * (cols / 32) + b), true);
      assert.equal(d, fr(amax / 63));
      for (let c = b * 32; c < b * 32 + 32; c++) {
        // column c lies at groupWordsPos (the words layout of the q7 kernel)
        const byte = w.data[r * cols + groupWordsPos(c, cols)]!;
        const q = byte - Q7_OFF;
        assert.ok(q >= -63 && q <= 63 && byte <= 127, 'the stored byte is 7-bit (the relaxed dot operand)');
        // within half a step of the bf16 value (plus the f32 rounding of w * id, < 64 ulp-of-64 steps)
        assert.ok(Math.abs(q * d - orig[r * cols + c]!) <= d * (0.5 + 1e-5), `row ${r} col ${c}: ${q} * ${d} vs ${orig[r * cols + c]}`);
      }
    }
  }
});

test('q7 x q8: wasm == TypeScript reference bytes (odd sizes, T 1..9, threads 1/2, relaxed on/off, both integer dot forms)', async () => {
  // 19, 37 and 70 rows: at T = 1, rows in pairs far apart (j, j + rows/2), then the rest
  const shapes = [[1, 32], [3, 96], [37, 224], [5, 128], [19, 1024], [8, 160], [4, 2048], [70, 96]] as const;
  const views = shapes.map(([rows, cols]) => requantized(bf16Bytes(rows, cols), rows, cols));
  // relaxed: the i32x4 dot-add accumulating (intDotAdd, Arm64's one instruction) and the i16x8 dot
  // widened by a dot with ones (x86); plain SIMD: extmul
  for (const [relaxed, intDotAdd] of [[true, false], [true, true], [false, false]] as const) {
    for (const threads of [1, 2]) {
      const k = await createKernels({ threads, relaxed, intDotAdd, minWorkPerThread: 1, maxCols: 2048 });
      try {
        for (const v of views) {
          const w = k.upload(v);
          const { rows, cols } = w;
          for (let T = 1; T <= 9; T++) {
            const x = acts(T * cols);
            const want = new Float32Array(T * rows);
            matmulQ7Ref(v, x, T, want);
            const got = new Float32Array(T * rows);
            k.matmul(w, x, T, got);
            assert.ok(sameBytes(got, want), `relaxed ${relaxed} intDotAdd ${intDotAdd} threads ${threads} ${rows}x${cols} T ${T}`);
            // a view outside kernel memory (copied in), and a row range as the pool splits it
            const c = new Float32Array(T * rows);
            k.matmul(v, x, T, c);
            assert.ok(sameBytes(c, want), 'copied-in weight');
            const part = new Float32Array(T * rows).fill(7);
            k.matmulBatch([{ w, x, T, y: part, r0: Math.floor(rows / 3), r1: rows }]);
            for (let t = 0; t < T; t++) for (let r = Math.floor(rows / 3); r < rows; r++) assert.equal(part[t * rows + r], want[t * rows + r]);
            // the reference dispatches q7 views to the same product
            const viaRef = new Float32Array(T * rows);
            ref.matmul(v, x, T, viaRef);
            assert.ok(sameBytes(viaRef, want), 'ref.matmul of a q7 view');
          }
        }
        assert.throws(() => k.matvecT(views[1]!, 0, 1, new Float32Array(96), 0, new Float32Array(96)), /no transposed product/);
      } finally {
        await k.close();
      }
    }
  }
});

// The KL bound of the golden checkpoints: what --fast measured on them (tiny random models,
// whose next-token distributions move more under rounding than a trained model's), with room.
// A kernel or requantization bug (a wrong scale, a lost block) gives KL well above 1.
const KL_BOUND = 1.0;

for (const name of ['k3', 'kimi-linear']) {
  test(`${name} golden: --fast runs, is deterministic across threads, chunks and budgets, KL vs exact bounded`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[];
    const exact = Model.open(dir, { ctx: 128 });
    const base = await exact.forward(exact.newState(), ids, 'all');
    await exact.close();
    const V = exact.config.vocabSize;
    const floor = Model.plan(dir, { budget: 0, ctx: 128, chunk: 7, maxPiece: 8192 }).floorBytes;
    let first: Float32Array | null = null;
    const notices: string[] = [];
    // the last two in small pieces: all streamed at the floor; all pinned (each split matrix
    // requantized whole in one buffer: one q7 view, which the chained dispatches take)
    for (const [threads, chunk, budget] of [[1, 64, undefined], [2, 64, undefined], [2, 7, undefined], [1, 7, floor], [2, 7, Number.MAX_SAFE_INTEGER]] as const) {
      const m = await Model.load(dir, { ctx: 128, threads, chunk, fast: true, notice: (s) => notices.push(s), ...(budget ? { budget, maxPiece: 8192 } : {}) });
      try {
        if (budget === floor) assert.ok(m.store.plan.streamedBytes > 0, 'the small budget streams trunk pieces');
        if (budget === Number.MAX_SAFE_INTEGER) await m.store.preload();
        assert.ok(m.store.requantized.matrices > 0 && m.kernels!.fastExperts);
        const got = await m.forward(m.newState(), ids, 'all', chunk);
        assert.ok(got.every((v) => Number.isFinite(v)), 'finite logits');
        if (!first) {
          first = got;
          const { meanKL, top1 } = nextTokenKL(base, got, V);
          console.log(`${name} golden --fast: mean KL ${meanKL.toExponential(3)}, top-1 agreement ${(100 * top1).toFixed(1)}% over ${ids.length} positions`);
          assert.ok(meanKL < KL_BOUND, `mean KL ${meanKL} over ${KL_BOUND}`);
          assert.ok(!sameBytes(base, got), 'the fast path is a different computation');
        } else assert.ok(sameBytes(got, first), `threads ${threads} chunk ${chunk} budget ${budget ?? 'max'}: --fast logits differ`);
        if (budget === Number.MAX_SAFE_INTEGER) {
          const st = m.store;
          const split = [...st.layout.matrices.values()].filter((sm) => sm.pieces.length > 1 && st.isRequantized(sm.base));
          assert.ok(split.length > 0, 'some requantized matrix split into pieces');
          for (const sm of split) {
            const whole = viewNow(st.mat(sm.base, sm.rows, sm.cols));
            assert.ok(whole && whole.format === 'q7' && whole.rows === sm.rows && whole.data.length === sm.rows * sm.cols, `${sm.base}: one q7 view`);
            assert.equal(whole.scale!.length, sm.rows * (sm.cols / 32) * 4);
            // each piece's view: its rows of the whole (bytes and scales)
            st.trace = () => {}; // a traced store lends piece by piece
            await visitParts(st.mat(sm.base, sm.rows, sm.cols), (v, r0) => {
              assert.ok(v.format === 'q7' && v.data.byteOffset === whole.data.byteOffset + r0 * sm.cols && v.scale!.byteOffset === whole.scale!.byteOffset + r0 * (sm.cols / 32) * 4, `${sm.base}: piece at row ${r0}`);
            });
            st.trace = null;
          }
        }
      } finally {
        await m.close();
      }
    }
    assert.match(notices[0]!, /REQUANTIZED to 7-bit blocks/, 'said at load');
  });
}

test('k3 run --fast and k3 bench --fast through the CLI: said on stderr, cost reported', () => {
  const dir = path.join(GOLDEN, 'k3');
  const run = spawnSync(process.execPath, [CLI, 'run', dir, '--ids', '5,6,7', '--gen', '3', '--fast', '-t', '1'], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stderr, /--fast: \d+ bf16 trunk matrices .* REQUANTIZED to 7-bit blocks/);
  const ref = spawnSync(process.execPath, [CLI, 'run', dir, '--ids', '5,6,7', '--fast', '--kernels', 'ref'], { encoding: 'utf8' });
  assert.equal(ref.status, 2, 'a user error');
  assert.match(ref.stderr, /--fast needs the WebAssembly kernels/);
  const b = spawnSync(process.execPath, [CLI, 'bench', dir, '-p', '4', '-n', '2', '-r', '1', '--threads-list', '1', '--fast', '--json'], { encoding: 'utf8' });
  assert.equal(b.status, 0, b.stderr);
  const j = JSON.parse(b.stdout);
  assert.deepEqual(j.rows.map((r: { test: string; path: string }) => `${r.test}:${r.path}`), ['pp4:exact', 'tg2:exact', 'pp4:fast', 'tg2:fast']);
  assert.ok(j.fast_cost.mean_kl > 0 && j.fast_cost.mean_kl < KL_BOUND && j.fast_cost.positions === 32);
  assert.ok(j.kernels.some((k: { kind: string }) => k.kind.startsWith('q7')));
});
