// The WebAssembly kernels on worker threads give the bytes of the TypeScript reference, for
// threads 1 and 2, relaxed SIMD on and off, every prefill chunk size, and a streaming budget
// (weights read into kernel memory through the ring), and every weight resident in small pieces.
// Golden tolerances hold on this path too.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, GOLDEN_TOL, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { readNpyF32 } from '../../src/util/npy.js';
import type { Kernels } from '../../src/kernels/fast.js';

const CASES = ['k2-yarn', 'k2-thinking-int4', 'kimi-linear', 'k3'];

for (const name of CASES) {
  test(`${name}: wasm kernels (threads 1/2, relaxed on/off, chunks 1/7/64, floor budget) == reference bytes`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 20);
    const ref = Model.open(dir, { ctx: 64 });
    const want = await ref.forward(ref.newState(), ids, 'all');
    await ref.close();
    const floor = Model.plan(dir, { budget: 0, ctx: 64, chunk: 7, maxPiece: 8192, threads: 2 }).floorBytes;
    const p1 = Model.plan(dir, { budget: 0, ctx: 64, chunk: 1, threads: 2 });
    const pinnedTrunk = p1.floorBytes + p1.trunkBytes + 8 * p1.expertBytes; // experts read while the MoE head chain runs
    const variants: { threads: number; relaxed: boolean; chunk: number; budget?: number; maxPiece?: number; apart?: boolean }[] = [
      { threads: 1, relaxed: true, chunk: 64 },
      { threads: 2, relaxed: true, chunk: 64 },
      { threads: 2, relaxed: false, chunk: 1 },
      { threads: 1, relaxed: false, chunk: 7 },
      { threads: 2, relaxed: true, chunk: 7, budget: floor, maxPiece: 8192 },
      // all resident in small pieces: a split matrix's pieces in one buffer, one view (the chains take it), T = 1 and T > 1
      { threads: 2, relaxed: true, chunk: 1, maxPiece: 8192 },
      { threads: 2, relaxed: true, chunk: 64, maxPiece: 8192 },
      // the same in a buffer a piece (a kernel memory without room for the whole): its blocks in one dispatch
      { threads: 2, relaxed: true, chunk: 1, maxPiece: 8192, apart: true },
      { threads: 2, relaxed: true, chunk: 64, maxPiece: 8192, apart: true },
      // the trunk pinned, a few expert slots: one token at a time, the MoE head launched while experts are read
      { threads: 2, relaxed: true, chunk: 1, budget: pinnedTrunk },
    ];
    for (const v of variants) {
      const m = await Model.load(dir, { ctx: 64, threads: v.threads, relaxed: v.relaxed, chunk: v.chunk, budget: v.budget, maxPiece: v.maxPiece, ...(v.apart ? { allocTogether: () => null } : {}) });
      try {
        assert.equal(m.threads, v.threads);
        const got = await m.forward(m.newState(), ids, 'all', v.chunk);
        assert.ok(sameBytes(got, want), `${JSON.stringify(v)}: logits differ from the reference`);
      } finally {
        await m.close();
      }
    }
  });
}

test(`k3 golden tolerance on the wasm path (300-token prompt < ${GOLDEN_TOL})`, async () => {
  const dir = path.join(GOLDEN, 'k3');
  const ids = JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).long as number[];
  const m = await Model.load(dir, { threads: 2 });
  try {
    const got = await m.forward(m.newState(), ids, 'all');
    const gold = readNpyF32(path.join(dir, 'logits-long.npy')).data;
    let d = 0;
    for (let i = 0; i < got.length; i++) d = Math.max(d, Math.abs(got[i]! - gold[i]!));
    assert.ok(d < GOLDEN_TOL, `max |diff| ${d} >= ${GOLDEN_TOL}`);
  } finally {
    await m.close();
  }
});

test('a kernel memory past 2 GiB (weights and chain arrays above 2^31): the reference bytes, every architecture', async () => {
  // A memory holds up to 3.75 GiB of weights; byte offsets past 2^31 are negative as Int32 words
  // (a chained MoE block refused them until December 2026). 2 GiB of untouched pages first: no RSS.
  for (const name of CASES) {
    const dir = path.join(GOLDEN, name);
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 24);
    const ref = Model.open(dir, { ctx: 64 });
    const want = await ref.forward(ref.newState(), ids, 'all');
    await ref.close();
    const m = await Model.load(dir, { ctx: 64, threads: 2, chunk: 4 });
    try {
      const k = m.kernels!.members[0]!;
      const pad = k.alloc(2 ** 31 + (64 << 20), 4096);
      // a prompt in chunks of 4 (the tiled products of the decoded formats), one of 17 (bf16's
      // too: TILE_MIN_T), then one token at a time (the single-token products)
      const st = m.newState();
      const V = want.length / ids.length;
      const got = new Float32Array(want.length);
      got.set(await m.forward(st, ids.slice(0, 4), 'all', 4));
      got.set(await m.forward(st, ids.slice(4, 21), 'all', 17), 4 * V);
      for (let t = 21; t < ids.length; t++) got.set(await m.forward(st, [ids[t]!], 'last'), t * V);
      assert.ok(k.mark() > 2 ** 31 && pad.u8.byteOffset < 2 ** 31, `${name}: the weights and arrays lie past 2 GiB`);
      assert.ok(sameBytes(got, want), `${name}: logits differ from the reference past 2 GiB`);
    } finally {
      await m.close();
    }
  }
});

test('a released state is cleared and reused by newState(): same bytes as a fresh one, no new kernel memory', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 12);
  const m = await Model.load(dir, { ctx: 64, threads: 2 });
  try {
    const a = m.newState();
    const first = await m.forward(a, ids, 'all');
    m.release(a);
    const b = m.newState();
    assert.equal(b, a, 'the released state is reused');
    assert.equal(b.position, 0);
    assert.ok(sameBytes(await m.forward(b, ids, 'all'), first));
  } finally {
    await m.close();
  }
});

test('resident blocks run as chained dispatches: a decode token makes one chain per FFN, per MoE head with a shared expert (launched before routing), per KDA layer (two where the softplus gate\'s JavaScript step splits it) and per MLA layer (three with rope)', async () => {
  const { Kernels } = await import('../../src/kernels/fast.js');
  const inner = Kernels.prototype.chain;
  let chains = 0;
  Kernels.prototype.chain = function (this: Kernels) {
    chains++;
    return inner.call(this);
  };
  try {
    for (const name of CASES) {
      const m = await Model.load(path.join(GOLDEN, name), { ctx: 64, threads: 2, budget: { preset: 'max' } });
      try {
        await m.store.preload(); // every expert in memory: the MoE block's one batch chains
        const st = m.newState();
        await m.forward(st, [1, 2, 3], 'last');
        chains = 0;
        await m.forward(st, [4], 'last');
        const cfg = m.config;
        const kda = cfg.layers.filter((L) => L.attn === 'kda').length * (cfg.kda?.gateLowerBound === null ? 2 : 1);
        const heads = cfg.moe.shared > 0 ? cfg.layers.filter((L) => L.ffn === 'moe').length : 0;
        const mla = cfg.layers.filter((L) => L.attn === 'mla').length * (cfg.mla.rope ? 3 : 1); // (K2's rope: two JavaScript steps split it)
        assert.equal(chains, kda + mla + cfg.numLayers + heads, `${name}: chained dispatches in a decode token`);
      } finally {
        await m.close();
      }
    }
  } finally {
    Kernels.prototype.chain = inner;
  }
});
