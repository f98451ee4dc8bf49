// The fused WebAssembly pieces (KDA delta rule, MLA scores and weighted latent sum) against their
// JavaScript references, byte for byte; sequence state placed in kernel memory; whole-model
// logits and final state of Model.load (kernels, threads 1/2) == Model.open (reference).

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { createKernels, type Kernels } from '../../src/kernels/fast.js';
import * as ref from '../../src/kernels/ref.js';
import { kdaRecurStep, mlaScoresRef, mlaWeightedSumRef } from '../../src/graph/reference.js';
import { MlaCache, mlaSoftmaxRef, sigmoidGateRef } from '../../src/model/mla.js';
import { rmsNorm } from '../../src/model/ops.js';
import { SequenceState } from '../../src/model/state.js';
import { attnResMix } from '../../src/model/attnres.js';
import { blockInput, type BlockInput } from '../../src/model/block-input.js';
import { REF_COMPUTE } from '../../src/graph/compute.js';
import { Model } from '../../src/model/model.js';
import { GOLDEN, xorshift } from '../helpers.js';

const rnd = xorshift(0x2545f491);
const randArr = (n: number, lo = -1, hi = 1): Float32Array => new Float32Array(n).map(() => lo + (hi - lo) * rnd());

function bits(a: Float32Array): Buffer {
  return Buffer.from(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
}
function sameBytes(got: Float32Array, want: Float32Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  if (Buffer.compare(bits(got), bits(want)) === 0) return;
  let i = 0;
  while (i < got.length && Object.is(got[i], want[i])) i++;
  assert.fail(`${what}: first difference at ${i} of ${got.length}: wasm ${got[i]} ref ${want[i]}`);
}

let k1: Kernels; // 1 thread
let k2: Kernels; // 2 threads, every call split
let k2s: Kernels; // 2 threads, relaxed SIMD off
let all: Kernels[];

before(async () => {
  const o = { memoryBytes: 16 << 20, maxMemoryBytes: 256 << 20, maxCols: 4096 };
  k1 = await createKernels({ ...o, threads: 1 });
  k2 = await createKernels({ ...o, threads: 2, minWorkPerThread: 1 });
  k2s = await createKernels({ ...o, threads: 2, minWorkPerThread: 1, relaxed: false });
  all = [k1, k2, k2s];
});
after(async () => {
  await Promise.all(all.map((k) => k.close()));
});

/** A copy of a in kernel memory (or a plain copy). */
function place(k: Kernels | null, a: Float32Array): Float32Array {
  const c = k ? k.allocF32(a.length) : new Float32Array(a.length);
  c.set(a);
  return c;
}

test('kdaStep: wasm == kdaRecurStep bytes (d 16/32/128 and odd sizes, 1-3 heads, several steps, threads 1/2, S in or out of kernel memory)', () => {
  for (const d of [16, 32, 128, 1, 3, 7, 20, 33, 50]) {
    for (const H of [1, 3]) {
      const P = H * d;
      // a non-trivial state: run a few steps from a random start
      const S0 = randArr(P * d, -0.5, 0.5);
      const steps = Array.from({ length: 3 }, () => ({
        q: randArr(P), k: randArr(P), v: randArr(P, -2, 2), alpha: randArr(P, 0.5, 1), beta: randArr(H, 0, 1),
      }));
      // reference
      const Sr = Float32Array.from(S0);
      const want: Float32Array[] = [];
      const u = new Float32Array(d);
      for (const s of steps) {
        const o = new Float32Array(P);
        for (let h = 0; h < H; h++) kdaRecurStep(Sr, h * d * d, d, s.q, s.k, s.v, s.alpha, s.beta[h]!, o, h * d, u);
        want.push(o);
      }
      for (const k of all) {
        for (const inMem of [true, false]) {
          const S = place(inMem ? k : null, S0);
          steps.forEach((s, i) => {
            const o = inMem ? k.allocF32(P) : new Float32Array(P);
            const arg = (a: Float32Array): Float32Array => (inMem ? place(k, a) : a);
            k.kdaStep(S, arg(s.q), arg(s.k), arg(s.v), arg(s.alpha), arg(s.beta), o, H, d);
            sameBytes(o, want[i]!, `o d=${d} H=${H} step ${i} threads=${k.threads} relaxed=${k.relaxed} inMem=${inMem}`);
          });
          sameBytes(S, Sr, `S d=${d} H=${H} threads=${k.threads} relaxed=${k.relaxed} inMem=${inMem}`);
        }
      }
    }
  }
});

test('MLA scores and weighted latent sum: wasm == reference bytes (n 1/5/100, Lk 256 and odd, dr 64 and odd, 1-3 heads, threads 1/2)', () => {
  const tau = (1 / Math.sqrt(192)) * 1.3; // a double that is not an f32
  for (const [Lk, dr] of [[256, 64], [16, 0], [37, 5], [3, 17], [512, 64]] as const) {
    for (const n of [1, 5, 100]) {
      for (const H of [1, 3]) {
        const dq = 128 + dr;
        const qLat = randArr(H * Lk);
        const q = randArr(2 * H * dq); // second token's heads at t*H*dq; rope part at +128
        const qo = H * dq + 128;
        const lat = randArr(n * Lk), rope = randArr(n * dr);
        const wantS = new Float32Array(H * n);
        mlaScoresRef(qLat, q, qo, dq, lat, rope, n, Lk, dr, tau, H, wantS);
        // a softmax-like weight row per head
        const Pw = randArr(H * n, 0, 1);
        const wantO = new Float32Array(H * Lk);
        mlaWeightedSumRef(Pw, lat, n, Lk, H, wantO);
        for (const k of all) {
          for (const inMem of [true, false]) {
            const L = inMem ? place(k, lat) : lat, R = inMem ? place(k, rope) : rope;
            const sc = inMem ? k.allocF32(H * n) : new Float32Array(H * n);
            k.mlaScores(qLat, q, qo, dq, L, R, n, Lk, dr, tau, H, sc);
            const what = `Lk=${Lk} dr=${dr} n=${n} H=${H} threads=${k.threads} relaxed=${k.relaxed} inMem=${inMem}`;
            sameBytes(sc, wantS, `scores ${what}`);
            const o = inMem ? k.allocF32(H * Lk) : new Float32Array(H * Lk).fill(7);
            k.mlaWeightedSum(inMem ? place(k, Pw) : Pw, L, n, Lk, H, o);
            sameBytes(o, wantO, `weighted sum ${what}`);
          }
        }
      }
    }
  }
});

test('pool: a batch of many ops (past the first 64 control words) == reference bytes', () => {
  const ops = Array.from({ length: 40 }, (_, i) => {
    const rows = 3 + (i % 5), cols = 16 + i;
    const w = { name: `w${i}`, format: 'f32' as const, rows, cols, data: new Uint8Array(randArr(rows * cols).buffer) };
    return { w, x: randArr(2 * cols), T: 2, y: new Float32Array(2 * rows) };
  });
  for (const k of all) {
    for (const op of ops) op.y.fill(0);
    k.matmulBatch(ops);
    for (const op of ops) {
      const want = new Float32Array(op.y.length);
      ref.matmul(op.w, op.x, op.T, want);
      sameBytes(op.y, want, `${op.w.name} threads=${k.threads}`);
    }
  }
});

test('SequenceState: plain arrays without kernels or with alloc null; kernel memory with an allocator; MlaCache growth keeps its contents', () => {
  const c = new MlaCache(8, 3, 2, (n) => k1.allocF32(n).fill(0));
  assert.ok(k1.contains(c.lat) && k1.contains(c.rope));
  c.reserve(2);
  c.lat.set(randArr(16));
  c.rope.set(randArr(6));
  c.length = 2;
  const lat = Float32Array.from(c.lat), rope = Float32Array.from(c.rope);
  c.reserve(5);
  assert.equal(c.lat.length, 8 * 8);
  assert.equal(c.rope.length, 8 * 3);
  assert.ok(k1.contains(c.lat) && k1.contains(c.rope) && c.lat.buffer === c.rope.buffer);
  sameBytes(c.lat.subarray(0, 16), lat, 'lat after growth');
  sameBytes(c.rope.subarray(0, 6), rope, 'rope after growth');
  const plain = new MlaCache(8, 3, 2);
  assert.ok(plain.lat.buffer instanceof ArrayBuffer);
});

// Whole model: logits and the final state of the kernels path (state in kernel memory) equal the
// reference. ctx 8 < tokens makes the MLA caches grow in kernel memory mid-prompt.
const CASES = ['k3', 'kimi-linear', 'k2-yarn', 'k2-thinking-int4'];
for (const name of CASES) {
  test(`${name}: Model.load (threads 1/2, chunks 1/5/64, state in kernel memory) == Model.open: logits and final state bytes`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 20);
    const ref = Model.open(dir, { ctx: 8 });
    const rs = ref.newState();
    const want = await ref.forward(rs, ids, 'all');
    await ref.close();
    for (const rs0 of rs.kda) if (rs0) assert.ok(rs0.S.buffer instanceof ArrayBuffer, 'reference state is plain');
    for (const [threads, chunk] of [[1, 64], [2, 5], [2, 1]] as const) {
      const m = await Model.load(dir, { ctx: 8, threads, chunk });
      try {
        const st = m.newState();
        const g = m.kernels!;
        for (const k of st.kda) if (k) assert.ok(g.ownerOf(k.S) && g.ownerOf(k.conv), 'KDA state in kernel memory');
        for (const c of st.mla) if (c) assert.ok(g.ownerOf(c.lat) && g.ownerOf(c.rope), 'MLA cache in kernel memory');
        const got = await m.forward(st, ids, 'all', chunk);
        sameBytes(got, want, `${name} threads=${threads} chunk=${chunk} logits`);
        const compared = { kda: 0, mla: 0 };
        assert.equal(st.kda.length, rs.kda.length);
        for (let l = 0; l < st.kda.length; l++) {
          // Each layer has exactly one kind of state, present on both sides (never skipped when missing).
          const a = st.kda[l], b = rs.kda[l];
          const c = st.mla[l], e = rs.mla[l];
          assert.equal(Boolean(a), Boolean(b), `layer ${l}: KDA state on one side only`);
          assert.equal(Boolean(c), Boolean(e), `layer ${l}: MLA cache on one side only`);
          assert.ok(Boolean(a) !== Boolean(c), `layer ${l}: expected exactly one of KDA state / MLA cache`);
          if (a) {
            sameBytes(a.S, b!.S, `layer ${l} S`);
            sameBytes(a.conv, b!.conv, `layer ${l} conv`);
            compared.kda++;
          } else {
            assert.ok(g.ownerOf(c!.lat) && g.ownerOf(c!.rope), 'grown MLA cache still in kernel memory');
            sameBytes(c!.lat.subarray(0, ids.length * c!.Lk), e!.lat.subarray(0, ids.length * e!.Lk), `layer ${l} latents`);
            sameBytes(c!.rope.subarray(0, ids.length * c!.dr), e!.rope.subarray(0, ids.length * e!.dr), `layer ${l} rope keys`);
            compared.mla++;
          }
        }
        assert.equal(compared.kda + compared.mla, m.config.layers.length, 'every layer compared');
        assert.ok(compared.mla > 0, 'some MLA layer compared');
        if (name === 'k3' || name === 'kimi-linear') assert.ok(compared.kda > 0, 'some KDA layer compared');
        // without an allocator (or with null) a state is plain arrays even with a model's kernels loaded
        for (const plain of [new SequenceState(m.config, 8, null), new SequenceState(m.config, 8)]) {
          for (const k of plain.kda) if (k) assert.ok(!g.ownerOf(k.S));
          for (const c of plain.mla) if (c) assert.ok(!g.ownerOf(c.lat));
        }
      } finally {
        await m.close();
      }
    }
  });
}

test('Attention Residuals mix: WebAssembly (tokens split over 1 and 2 threads) == the reference attnResMix, bytes', async () => {
  const rnd = xorshift(0x5eed);
  const ks = [await createKernels({ threads: 1 }), await createKernels({ threads: 2, minWorkPerThread: 1 })];
  try {
    for (const [T, D, m] of [[1, 64, 1], [1, 2048, 4], [3, 96, 2], [5, 33, 7], [64, 256, 3]] as const) {
      // candidates of very different scales, so the softmax weights are far from uniform
      const cands = Array.from({ length: m }, (_, i) => Float32Array.from({ length: T * D }, () => (rnd() - 0.5) * 4 ** (i - 1)));
      const fold = Float32Array.from({ length: D }, () => rnd() - 0.5);
      const want = attnResMix(cands.slice(0, -1), cands[m - 1]!, T, D, fold, 1e-6);
      for (const k of ks) {
        const got = k.attnResMix(cands, T, D, fold, 1e-6);
        assert.deepEqual(new Uint32Array(got.buffer, got.byteOffset, got.length), new Uint32Array(want.buffer), `T=${T} D=${D} m=${m} threads=${k.threads}`);
      }
    }
  } finally {
    await Promise.all(ks.map((k) => k.close()));
  }
});

test('a block input in a chain (attnres_norm: AttnRes mix with Math.exp, then RMSNorm) == blockInput (attnResMix, rmsNorm), bytes, 1 and 2 threads', async () => {
  const rnd = xorshift(0x1badd);
  const ks = [await createKernels({ threads: 1 }), await createKernels({ threads: 2, minWorkPerThread: 1 })];
  try {
    for (const [T, D, m, mix] of [[1, 2048, 4, true], [1, 64, 1, false], [3, 96, 2, true], [5, 36, 7, true], [64, 256, 3, true], [2, 40, 1, false]] as const) {
      // candidates of very different scales (softmax weights far from uniform, some exp underflowing)
      const cands = Array.from({ length: m }, (_, i) => Float32Array.from({ length: T * D }, () => (rnd() - 0.5) * 8 ** (i - 1)));
      const fold = Float32Array.from({ length: D }, () => (rnd() - 0.5) * 40);
      const norm = Float32Array.from({ length: D }, () => rnd() + 0.5);
      const x: BlockInput = { cands, fold: mix ? fold : null, mixEps: 1e-6, norm, normEps: 1e-5, T, D };
      const want = blockInput(REF_COMPUTE, x);
      for (const k of ks) {
        const placed = [...(mix ? [fold] : []), norm].map((v) => {
          const a = k.allocF32(v.length); // (constants in kernel memory, placed before the chain)
          a.set(v);
          return a;
        });
        const ch = k.chain();
        try {
          const got = ch.attnResNorm(x.cands, mix ? placed[0]! : null, x.mixEps, placed.at(-1)!, x.normEps, T, D);
          ch.run();
          assert.deepEqual(new Uint32Array(got.slice().buffer), new Uint32Array(want.buffer), `T=${T} D=${D} m=${m} mix=${mix} threads=${k.threads}`);
        } finally {
          ch.done();
        }
      }
    }
  } finally {
    await Promise.all(ks.map((k) => k.close()));
  }
});

test('MLA chain ops == their references, bytes: rmsNorm rows, latents appended, scores softmax (Math.exp), sigmoid gate; 1 and 2 threads', async () => {
  const rnd = xorshift(0xa11ce);
  const ks = [await createKernels({ threads: 1 }), await createKernels({ threads: 2, minWorkPerThread: 1 })];
  const arena = (k: Kernels, v: Float32Array): Float32Array => {
    const a = k.allocF32(v.length);
    a.set(v);
    return a;
  };
  const bytes = (a: Float32Array): Uint32Array => new Uint32Array(a.slice().buffer);
  try {
    for (const k of ks) {
      const tag = `threads=${k.threads}`;
      // rmsNorm of 3 rows of 40 values at a stride of 52, and the latents (Lk 40, dr 12) of the same rows
      const T = 3, Lk = 40, dr = 12, a = Float32Array.from({ length: T * (Lk + dr) }, () => (rnd() - 0.5) * 30);
      const w = Float32Array.from({ length: Lk }, () => rnd() + 0.5);
      const wantNorm = rmsNorm(a, T, Lk, w, 1e-6, undefined, 0, Lk + dr);
      const wantLat = wantNorm.slice(), wantRope = new Float32Array(T * dr);
      for (let t = 0; t < T; t++) wantRope.set(a.subarray(t * (Lk + dr) + Lk, (t + 1) * (Lk + dr)), t * dr);
      // 16 heads of 37 scores (one head's far apart, one with -Infinity), the gate over 300 values
      const H = 16, n = 37, sc = Float32Array.from({ length: H * n }, (_, i) => (rnd() - 0.5) * (i < n ? 400 : 8));
      sc[n + 3] = -Infinity;
      const wantSm = sc.slice();
      mlaSoftmaxRef(wantSm, n, H);
      const out = Float32Array.from({ length: 300 }, () => (rnd() - 0.5) * 4), g = Float32Array.from({ length: 300 }, () => (rnd() - 0.5) * 200);
      const wantGate = out.slice();
      sigmoidGateRef(wantGate, g, 300);

      const ka = arena(k, a), kw = arena(k, w), lat = k.allocF32(T * Lk + 8), rope = k.allocF32(T * dr + 8), ksc = arena(k, sc), kout = arena(k, out), kg = arena(k, g);
      const ch = k.chain();
      try {
        const normed = ch.rmsNorm(ka, T, Lk, kw, 1e-6, Lk + dr);
        ch.mlaAppend(ka, T, Lk, dr, kw, 1e-6, lat.subarray(4), rope.subarray(4)); // (from position 1 of a cache of 4-float rows)
        ch.mlaSoftmax(ksc, n, H);
        ch.sigmoidGate(kout, kg, 300);
        ch.run();
        assert.deepEqual(bytes(normed), bytes(wantNorm), `rms norm rows, ${tag}`);
        assert.deepEqual(bytes(lat.subarray(4, 4 + T * Lk)), bytes(wantLat), `latents, ${tag}`);
        assert.deepEqual(bytes(rope.subarray(4, 4 + T * dr)), bytes(wantRope), `rope keys, ${tag}`);
        assert.deepEqual(bytes(ksc), bytes(wantSm), `softmax, ${tag}`);
        assert.deepEqual(bytes(kout), bytes(wantGate), `gate, ${tag}`);
      } finally {
        ch.done();
      }
    }
  } finally {
    await Promise.all(ks.map((k) => k.close()));
  }
});
