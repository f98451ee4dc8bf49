// The fused KDA block kernel (wasm/kda-block.ts: conv, L2, decay, β, delta rule, gated norm in
// one dispatch) against its JavaScript reference (kdaBlockRef in src/graph/reference.ts), byte for
// byte: output, S and conv tails, over several calls (decode steps and chunks), bounded and
// softplus gates, odd sizes, threads 1/2, relaxed SIMD on/off, and a speculative sweep cut back.

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import { Compute, KernelGroup, REF_COMPUTE } from '../../src/graph/compute.js';
import { kdaForward, newKdaState, startKdaSweep, endKdaSweep, type KdaParams, type KdaState, type KdaWeights } from '../../src/model/kda.js';
import { residentMat } from '../../src/store/mat.js';
import { expRef, em1 } from '../../src/kernels/wasm/act.js';
import { xorshift } from '../helpers.js';

const rnd = xorshift(0x1234567);
const randArr = (n: number, lo = -1, hi = 1): Float32Array => new Float32Array(n).map(() => lo + (hi - lo) * rnd());

function sameBytes(got: Float32Array, want: Float32Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  const a = Buffer.from(got.buffer, got.byteOffset, got.byteLength), b = Buffer.from(want.buffer, want.byteOffset, want.byteLength);
  if (Buffer.compare(a, b) === 0) return;
  let i = 0;
  while (i < got.length && Object.is(got[i], want[i])) i++;
  assert.fail(`${what}: first difference at ${i} of ${got.length}: wasm ${got[i]} ref ${want[i]}`);
}

const mat = (name: string, rows: number, cols: number, scale = 0.3) =>
  residentMat({ name, format: 'f32', rows, cols, data: new Uint8Array(randArr(rows * cols, -scale, scale).buffer) });

function weights(H: number, d: number, W: number, D: number): KdaWeights {
  const P = H * d;
  return {
    q: mat('q', P, D), k: mat('k', P, D), v: mat('v', P, D),
    qConv: randArr(P * W), kConv: randArr(P * W), vConv: randArr(P * W),
    fa: mat('fa', d, D), fb: mat('fb', P, d), b: mat('b', H, D, 1),
    gate: { full: mat('g', P, D, 1) }, o: mat('o', D, P),
    aLog: randArr(H, -1, 1), dtBias: randArr(P), oNorm: randArr(d, 0.5, 1.5),
  };
}

let groups: KernelGroup[];
before(async () => {
  // room for state above the weights' 72 MiB and the kernels' 192 MiB headroom (KernelGroup.allocF32)
  const o = { maxMemoryBytes: 512 << 20, maxCols: 4096 };
  groups = [
    await KernelGroup.create(8 << 20, { ...o, threads: 1 }),
    await KernelGroup.create(8 << 20, { ...o, threads: 2, minWorkPerThread: 1 }),
    await KernelGroup.create(8 << 20, { ...o, threads: 2, minWorkPerThread: 1, relaxed: false }),
  ];
});
after(async () => {
  for (const g of groups) await g.close();
});

test('expRef: within 1e-12 relative of Math.exp over [-708, 708] (the degree-10 polynomial); em1 + 1 agrees near 0', () => {
  for (let i = 0; i <= 2000; i++) {
    const x = -708 + (1416 * i) / 2000;
    const e = Math.exp(x);
    assert.ok(Math.abs(expRef(x) - e) <= 1e-12 * e, `exp(${x})`);
    if (Math.abs(x) < 1) assert.ok(Math.abs(em1(x) + 1 - e) <= 1e-12 * e);
  }
  assert.equal(expRef(1e6), expRef(708));
  assert.ok(Number.isNaN(expRef(NaN)));
});

test('kdaBlock: wasm == reference bytes (y, S, conv tails) over decode steps and chunks, bounded and softplus gates, odd sizes, threads 1/2, relaxed on/off, sweep cut back', async () => {
  const shapes: [number, number, number][] = [[2, 16, 4], [3, 7, 4], [1, 33, 2], [2, 128, 4], [1, 5, 1]];
  for (const [H, d, W] of shapes) {
    for (const lower of [-5, null]) {
      const D = 24;
      const p: KdaParams = { heads: H, headDim: d, convSize: W, gateLowerBound: lower, eps: 1e-5 };
      const w = weights(H, d, W, D);
      const chunks = [1, 3, 1, 2];
      const xs = chunks.map((T) => randArr(T * D, -2, 2));
      // reference
      const sr = newKdaState(p);
      const want: Float32Array[] = [];
      for (let i = 0; i < chunks.length; i++) want.push(await kdaForward(REF_COMPUTE, p, w, xs[i]!, chunks[i]!, sr));
      for (const g of groups) {
        const c = new Compute(g);
        const st: KdaState = newKdaState(p, (n) => g.allocF32(n));
        assert.ok(st.work && g.ownerOf(st.S), 'state in kernel memory');
        for (let i = 0; i < chunks.length; i++) {
          const y = await kdaForward(c, p, w, xs[i]!, chunks[i]!, st);
          sameBytes(y, want[i]!, `y H=${H} d=${d} W=${W} gate=${lower} threads=${g.threads} chunk ${i}`);
        }
        sameBytes(st.S, sr.S, `S H=${H} d=${d} threads=${g.threads}`);
        sameBytes(st.conv, sr.conv, `conv H=${H} d=${d} threads=${g.threads}`);
      }
      // a sweep of 3 tokens cut back to 2, then one more token: as the reference's
      const ref2 = newKdaState(p);
      const x3 = randArr(3 * D, -2, 2), x1 = randArr(D, -2, 2);
      startKdaSweep(ref2);
      await kdaForward(REF_COMPUTE, p, w, x3, 3, ref2);
      endKdaSweep(REF_COMPUTE, p, ref2, 2);
      const yr = await kdaForward(REF_COMPUTE, p, w, x1, 1, ref2);
      for (const g of groups) {
        const c = new Compute(g);
        const st = newKdaState(p, (n) => g.allocF32(n));
        startKdaSweep(st);
        await kdaForward(c, p, w, x3, 3, st);
        endKdaSweep(c, p, st, 2);
        sameBytes(await kdaForward(c, p, w, x1, 1, st), yr, `sweep y H=${H} d=${d} threads=${g.threads}`);
        sameBytes(st.S, ref2.S, 'sweep S');
        sameBytes(st.conv, ref2.conv, 'sweep conv');
      }
    }
  }
});
