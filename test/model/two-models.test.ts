// Kernels belong to a model, not to the process: two models loaded at once with Model.load, on
// different thread counts, interleaving their forward passes, each give exactly the bytes they
// give alone (and the golden logits); closing one leaves the other computing the same bytes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { readNpyF32 } from '../../src/util/npy.js';

const shortIds = (name: string): number[] => (JSON.parse(fs.readFileSync(path.join(GOLDEN, name, 'tokens.json'), 'utf8')) as { short: number[] }).short;

function maxDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** Logits of every position of `ids`, fed `chunk` tokens per forward call, one call per `step()`. */
function stepper(m: Model, st: SequenceState, ids: number[], chunk: number): { step: () => Promise<boolean>; out: Float32Array } {
  const V = m.config.vocabSize;
  const out = new Float32Array(ids.length * V);
  let s = 0;
  return {
    out,
    async step() {
      if (s >= ids.length) return false;
      out.set(await m.forward(st, ids.slice(s, s + chunk), 'all'), s * V);
      s += chunk;
      return true;
    },
  };
}

const PAIRS = [
  { a: { name: 'k3', threads: 1 }, b: { name: 'kimi-linear', threads: 2 } },
  { a: { name: 'k3', threads: 1 }, b: { name: 'k3', threads: 2 } },
];

for (const { a, b } of PAIRS) {
  test(`two models in one process: ${a.name} (threads ${a.threads}) and ${b.name} (threads ${b.threads}), interleaved == alone; one closed, the other unchanged`, async () => {
    const idsA = shortIds(a.name), idsB = shortIds(b.name);
    // each model alone
    const solo = async (name: string, threads: number, ids: number[]): Promise<Float32Array> => {
      const m = await Model.load(path.join(GOLDEN, name), { ctx: 64, threads });
      try {
        return await m.forward(m.newState(), ids, 'all');
      } finally {
        await m.close();
      }
    };
    const wantA = await solo(a.name, a.threads, idsA);
    const wantB = await solo(b.name, b.threads, idsB);
    for (const [name, ids, want] of [[a.name, idsA, wantA], [b.name, idsB, wantB]] as const) {
      const gold = readNpyF32(path.join(GOLDEN, name, 'logits-short.npy'));
      assert.deepEqual(gold.shape, [ids.length, want.length / ids.length]);
      const d = maxDiff(want, gold.data);
      assert.ok(d < 1e-3, `${name} alone: max |diff| to golden ${d}`);
    }

    const ma = await Model.load(path.join(GOLDEN, a.name), { ctx: 64, threads: a.threads });
    const mb = await Model.load(path.join(GOLDEN, b.name), { ctx: 64, threads: b.threads });
    let closedA = false;
    try {
      assert.equal(ma.threads, a.threads);
      assert.equal(mb.threads, b.threads);
      const ka = ma.kernels!, kb = mb.kernels!;
      assert.notEqual(ka, kb);
      const sa = ma.newState(), sb = mb.newState();
      // each state lives in its own model's kernel memory, never the other's
      for (const [st, own, other] of [[sa, ka, kb], [sb, kb, ka]] as const) {
        for (const k of st.kda) if (k) assert.ok(own.ownerOf(k.S) && !other.ownerOf(k.S), 'KDA state in its model\'s kernel memory');
        for (const c of st.mla) if (c) assert.ok(own.ownerOf(c.lat) && !other.ownerOf(c.lat), 'MLA cache in its model\'s kernel memory');
      }

      // interleaved: one forward call of a, one of b, ... (decode-like single tokens for b)
      const ra = stepper(ma, sa, idsA, 5), rb = stepper(mb, sb, idsB, 1);
      for (let more = true; more;) {
        const ga = await ra.step();
        const gb = await rb.step();
        more = ga || gb;
      }
      assert.ok(sameBytes(ra.out, wantA), `${a.name} interleaved differs from alone`);
      assert.ok(sameBytes(rb.out, wantB), `${b.name} interleaved differs from alone`);

      // both at once (their awaits interleave)
      const [ca, cb] = await Promise.all([ma.forward(ma.newState(), idsA, 'all', 3), mb.forward(mb.newState(), idsB, 'all', 7)]);
      assert.ok(sameBytes(ca, wantA), `${a.name} concurrent differs from alone`);
      assert.ok(sameBytes(cb, wantB), `${b.name} concurrent differs from alone`);

      // close a: b keeps its kernels and its bytes
      await ma.close();
      closedA = true;
      assert.equal(mb.kernels, kb);
      assert.equal(mb.threads, b.threads);
      const sb2 = mb.newState();
      for (const k of sb2.kda) if (k) assert.ok(kb.ownerOf(k.S), 'new state still in the remaining model\'s kernel memory');
      assert.ok(sameBytes(await mb.forward(sb2, idsB, 'all'), wantB), `${b.name} after closing ${a.name} differs`);
    } finally {
      if (!closedA) await ma.close();
      await mb.close();
    }
  });
}
