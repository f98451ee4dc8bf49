// Gated activations (SwiGLU / SiTU): the WebAssembly kernels (src/kernels/wasm/act.ts) give the
// same bytes as the TypeScript reference on random and extreme inputs, and the shared exp / tanh /
// sigmoid numerics are accurate against Math.exp / Math.tanh.

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import { createKernels, type Kernels } from '../../src/kernels/fast.js';
import { em1, tanhRef, sigmoidRef, gatedActRef, type ActKind } from '../../src/kernels/wasm/act.js';

let seed = 0x1234567;
function rnd(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}

const f32 = Math.fround;
const EXTREME = [
  0, -0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-30, -1e-20, 1e-8, -1e-7, 0.5, -0.5, 0.34657, -0.34657, 1, -1, 2, -3,
  9.9, -10, 19.99, 20, -20.01, 40, 87, -88, 89, 103, -104, 200, -300, 700, -708, 709, -710, 745, -746, 1000, -1000,
  1e10, -1e10, 3.4e38, -3.4e38, Infinity, -Infinity, NaN,
].map(f32);

/** Random f32 values of every magnitude, plus the extremes. */
function inputs(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const r = rnd();
    if (r < 0.4) a[i] = (rnd() * 2 - 1) * 8;
    else if (r < 0.7) a[i] = (rnd() * 2 - 1) * 60;
    else if (r < 0.9) a[i] = (rnd() < 0.5 ? -1 : 1) * 2 ** (rnd() * 60 - 40);
    else a[i] = EXTREME[Math.floor(rnd() * EXTREME.length)]!;
  }
  return a;
}

/** Bytes equal, NaN positions aside (NaN payloads are not part of the contract: both must be NaN). */
function sameBytes(got: Float32Array, want: Float32Array, what: string): void {
  assert.equal(got.length, want.length);
  const gb = new Uint32Array(got.buffer, got.byteOffset, got.length), wb = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = 0; i < got.length; i++) {
    if (Number.isNaN(want[i]!)) assert.ok(Number.isNaN(got[i]!), `${what} @${i}: wasm ${got[i]}, ref NaN`);
    else if (gb[i] !== wb[i]) assert.fail(`${what} @${i}: wasm ${got[i]} (0x${gb[i]!.toString(16)}) ref ${want[i]} (0x${wb[i]!.toString(16)})`);
  }
}

let ks: Kernels[] = [];
before(async () => {
  const o = { memoryBytes: 16 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096 };
  ks = [await createKernels({ ...o, threads: 1 }), await createKernels({ ...o, threads: 2, relaxed: false }), await createKernels({ ...o, threads: 2, minWorkPerThread: 1 })];
});
after(async () => {
  await Promise.all(ks.map((k) => k.close()));
});

const CASES: { kind: ActKind; b: number; bl: number | null }[] = [
  { kind: 'silu', b: 0, bl: null },
  { kind: 'situ', b: 10, bl: null },
  { kind: 'situ', b: 10, bl: 10 },
  { kind: 'situ', b: 3.5, bl: 0.75 },
];

test('gatedAct: WebAssembly == reference, bytes (random, extreme, every length mod 4)', () => {
  for (const { kind, b, bl } of CASES) {
    for (const n of [0, 1, 2, 3, 4, 5, 7, 8, 13, 64, 1001, 4096]) {
      const g = inputs(n), u = inputs(n);
      const want = gatedActRef(g, u, new Float32Array(n), kind, b, bl);
      for (const k of ks) {
        const got = new Float32Array(n).fill(123);
        k.gatedAct(g, u, got, kind, b, bl);
        sameBytes(got, want, `${kind} b=${b} bl=${bl} n=${n} threads=${k.threads}`);
      }
    }
    // every extreme against every extreme
    const E = EXTREME.length;
    const g = new Float32Array(E * E), u = new Float32Array(E * E);
    for (let i = 0; i < E; i++) for (let j = 0; j < E; j++) (g[i * E + j] = EXTREME[i]!), (u[i * E + j] = EXTREME[j]!);
    const want = gatedActRef(g, u, new Float32Array(E * E), kind, b, bl);
    const got = new Float32Array(E * E);
    ks[0]!.gatedAct(g, u, got, kind, b, bl);
    sameBytes(got, want, `${kind} extremes`);
  }
});

test('gatedActBatch: several arrays (odd lengths, empty) in one dispatch, split across threads == gatedActRef of each', () => {
  for (const { kind, b, bl } of CASES) {
    const lens = [5, 0, 768, 1, 13, 1024, 3];
    const gs = lens.map(inputs), us = lens.map(inputs);
    const want = lens.map((n, i) => gatedActRef(gs[i]!, us[i]!, new Float32Array(n), kind, b, bl));
    for (const k of ks) {
      const items = lens.map((n, i) => ({ gate: gs[i]!, up: us[i]!, out: new Float32Array(n).fill(7) }));
      k.gatedActBatch(items, kind, b, bl);
      items.forEach((it, i) => sameBytes(it.out, want[i]!, `${kind} batch item ${i} threads=${k.threads}`));
    }
  }
});

/** Relative error of got against want (absolute below `floor`). */
const relErr = (got: number, want: number, floor = 1e-300): number => Math.abs(got - want) / Math.max(Math.abs(want), floor);

test('exp, tanh, sigmoid: max relative error < 1e-6 (measured ~1e-12) over wide ranges', () => {
  let eExp = 0, eTanh = 0, eSig = 0;
  const xs: number[] = [];
  for (let i = 0; i <= 200000; i++) xs.push(-50 + i * 5e-4);
  for (let i = 0; i <= 20000; i++) xs.push(-1000 + i * 0.1);
  for (let e = -45; e <= 2; e += 0.01) xs.push(10 ** e, -(10 ** e));
  xs.push(...EXTREME.filter((x) => !Number.isNaN(x)));
  for (const x of xs) {
    if (Math.abs(x) <= 700) {
      // expm1, relative (accurate near 0 too); exp = em1 + 1 where that keeps the digits
      eExp = Math.max(eExp, relErr(em1(x), Math.expm1(x)));
      if (x > -1) eExp = Math.max(eExp, relErr(em1(x) + 1, Math.exp(x)));
    }
    eTanh = Math.max(eTanh, relErr(tanhRef(x), Math.tanh(x)));
    const s = 1 / (1 + Math.exp(-x));
    if (s > 1e-290) eSig = Math.max(eSig, relErr(sigmoidRef(x), s));
    else assert.ok(sigmoidRef(x) < 1e-290 && sigmoidRef(x) >= 0);
  }
  assert.ok(eExp < 1e-11, `exp rel err ${eExp}`);
  assert.ok(eTanh < 1e-12, `tanh rel err ${eTanh}`);
  assert.ok(eSig < 1e-12, `sigmoid rel err ${eSig}`);
  // exact values at the ends
  assert.equal(tanhRef(1000), 1);
  assert.equal(tanhRef(-1000), -1);
  assert.equal(tanhRef(Infinity), 1);
  assert.equal(tanhRef(-Infinity), -1);
  assert.equal(sigmoidRef(Infinity), 1);
  assert.ok(sigmoidRef(-Infinity) >= 0 && sigmoidRef(-Infinity) < 1e-300);
  assert.equal(sigmoidRef(0), 0.5);
  assert.equal(tanhRef(0), 0);
  assert.equal(tanhRef(1e-300), 1e-300);
  console.log(`max rel err: exp ${eExp.toExponential(2)}, tanh ${eTanh.toExponential(2)}, sigmoid ${eSig.toExponential(2)}`);
});

test('gatedAct outputs vs the Math-based formulas (f32 rel err < 1e-6), SiTU saturation bounds', () => {
  const n = 200000;
  const g = inputs(n), u = inputs(n);
  for (const { kind, b, bl } of CASES) {
    const out = gatedActRef(g, u, new Float32Array(n), kind, b, bl);
    let worst = 0;
    for (let i = 0; i < n; i++) {
      const gi = g[i]!, ui = u[i]!;
      if (!Number.isFinite(gi) || !Number.isFinite(ui)) continue;
      const sig = 1 / (1 + Math.exp(-gi));
      const want = kind === 'silu' ? (gi / (1 + Math.exp(-gi))) * ui : b * Math.tanh(gi / b) * sig * (bl === null ? ui : bl * Math.tanh(ui / bl));
      const w32 = f32(want);
      if (Math.abs(want) < 1e-30 || !Number.isFinite(w32)) continue; // f32 underflow / overflow of the product
      worst = Math.max(worst, relErr(out[i]!, want));
      if (kind === 'situ') {
        const cap = bl === null ? f32(b * Math.abs(ui)) : f32(b * bl);
        assert.ok(Math.abs(out[i]!) <= cap, `SiTU |${out[i]}| > ${cap} at g=${gi} u=${ui}`);
      }
    }
    assert.ok(worst < 1e-6, `${kind} b=${b} bl=${bl}: rel err ${worst}`);
    console.log(`${kind} b=${b} bl=${bl}: max f32 rel err vs Math ${worst.toExponential(2)}`);
  }
  // saturation: |SiTU| <= β·βl for every input, infinities included
  const out = gatedActRef(g, u, new Float32Array(n), 'situ', 3.5, 0.75);
  for (let i = 0; i < n; i++) if (!Number.isNaN(out[i]!)) assert.ok(Math.abs(out[i]!) <= f32(3.5 * 0.75));
});
