// The DSpark drafter's forward on the engine's kernels (issue 46, items 1 and 3; docs/DSPARK.md §7):
// on each of the four synthesized layouts it matches the float64 reference within the stated
// tolerance; its drafts and confidences are the same bytes on 1 and 2 threads, with the reference
// kernels, and at prefill chunks 1 / 4 / 64; greedy output with it is the bytes of --spec 0 on the
// golden K3 and the demo K3 (models-shipped/demo-k3-trained), at the floor and resident, on 1 and
// 2 threads, also with the trained demo drafter (models-shipped/demo-k3-dspark); a budget it does
// not fit in is refused with one line naming it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { GOLDEN, ROOT, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { greedy } from '../../src/generate/greedy.js';
import { speculative } from '../../src/generate/spec.js';
import { drafterMemoryBytes, loadDSpark, loadDSparkReference, type DSparkDrafter } from '../../src/generate/dspark-draft.js';
import { DRAFTER_LAYOUTS, synthDrafter } from '../../src/synth/drafter.js';
import { loadConfig } from '../../src/checkpoint/config.js';
import { loadDrafter } from '../../src/checkpoint/drafter.js';

const GEN = 10;
const SMALL_PIECE = 8 * 1024;
const IDS = [3, 17, 101, 5, 250, 42, 7, 99];
/** Kernel path vs float64 reference: |score difference| <= TOL x (1 + max |score|), confidence within TOL. */
const TOL = 2e-3;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dspark-kernels-'));
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function targets(): Promise<{ name: string; dir: string; drafters: string[] }[]> {
  const out = [];
  for (const [name, dir] of [['golden k3', path.join(GOLDEN, 'k3')], ['demo k3', path.join(ROOT, 'models-shipped', 'demo-k3-trained')]] as const) {
    const c = loadConfig(dir);
    const drafters = [];
    for (const layout of DRAFTER_LAYOUTS) {
      const d = path.join(tmp, `${name.replace(' ', '-')}-${layout}`);
      if (!fs.existsSync(d)) await synthDrafter({ layout, out: d, target: { hidden: c.hiddenSize, layers: c.numLayers, vocab: c.vocabSize } });
      drafters.push(d);
    }
    // the trained drafter shipped beside the demo K3 (models-shipped/demo-k3-dspark), as it ships
    if (name === 'demo k3') drafters.push(path.join(ROOT, 'models-shipped', 'demo-k3-dspark'));
    out.push({ name, dir, drafters });
  }
  return out;
}

function stateBytes(s: SequenceState): Buffer {
  const f = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const parts: Buffer[] = [Buffer.from(JSON.stringify(s.tokens))];
  for (const k of s.kda) if (k) parts.push(f(k.S), f(k.conv));
  for (const m of s.mla) if (m) parts.push(f(m.lat.subarray(0, m.length * m.Lk)), f(m.rope.subarray(0, m.length * m.dr)));
  return Buffer.concat(parts);
}

/** Blocks drafted after forwarding IDS (chunk `chunk`) then each of three more ids: tokens, scores, confidence. */
async function blocks(model: Model, drafter: DSparkDrafter, chunk: number): Promise<{ tokens: number[]; scores: Float32Array[]; confidence: number[] | null }[]> {
  const s = model.newState();
  const out = [];
  const ctx = [...IDS];
  await model.forward(s, ctx.slice(0, -1), 'none', chunk, drafter.taps);
  for (const next of [11, 400, 2]) {
    const tokens = drafter.draft(ctx, drafter.config.block);
    out.push({ tokens, scores: drafter.lastScores.map((x) => Float32Array.from(x)), confidence: drafter.lastConfidence });
    await model.forward(s, [ctx[ctx.length - 1]!], 'none', chunk, drafter.taps);
    ctx.push(next);
  }
  model.release(s);
  return out;
}

test('kernel path == float64 reference within tolerance, each layout; same bytes on threads 1 / 2, reference kernels, chunks 1 / 4 / 64', async () => {
  const [golden] = await targets();
  const open = Model.open(golden!.dir, { ctx: 64 });
  const loaded = [await Model.load(golden!.dir, { ctx: 64, threads: 1 }), await Model.load(golden!.dir, { ctx: 64, threads: 2 })];
  try {
    for (const [i, dir] of golden!.drafters.entries()) {
      const what = DRAFTER_LAYOUTS[i];
      const ref = await blocks(open, loadDSparkReference(open, dir), 64);
      const fast = await blocks(open, loadDSpark(open, dir), 64);
      fast.forEach((b, k) => {
        assert.deepEqual(b.tokens, ref[k]!.tokens, `${what}: block ${k} tokens`);
        b.scores.forEach((sc, j) => {
          const r = ref[k]!.scores[j]!;
          let max = 0;
          let diff = 0;
          for (let v = 0; v < sc.length; v++) {
            max = Math.max(max, Math.abs(r[v]!));
            diff = Math.max(diff, Math.abs(sc[v]! - r[v]!));
          }
          assert.ok(diff <= TOL * (1 + max), `${what}: block ${k} proposal ${j}: scores differ by ${diff} (max |score| ${max})`);
        });
        assert.equal(b.confidence === null, ref[k]!.confidence === null, `${what}: confidence head`);
        b.confidence?.forEach((c, j) => assert.ok(c >= 0 && c <= 1 && Math.abs(c - ref[k]!.confidence![j]!) <= TOL, `${what}: confidence ${c} vs ${ref[k]!.confidence![j]}`));
      });
      for (const [m, chunk] of [[open, 1], [open, 4], [loaded[0]!, 64], [loaded[1]!, 4], [loaded[1]!, 1]] as const) {
        const other = await blocks(m, loadDSpark(m, dir), chunk);
        other.forEach((b, k) => {
          assert.deepEqual(b.tokens, fast[k]!.tokens, `${what}: threads ${m.threads}, chunk ${chunk}: tokens`);
          b.scores.forEach((sc, j) => assert.ok(sameBytes(sc, fast[k]!.scores[j]!), `${what}: threads ${m.threads}, chunk ${chunk}: scores`));
          assert.deepEqual(b.confidence, fast[k]!.confidence, `${what}: threads ${m.threads}, chunk ${chunk}: confidence`);
        });
      }
    }
  } finally {
    for (const m of loaded) await m.close();
    await open.close();
  }
});

test('--drafter on the kernels (each layout) == --spec 0 bytes: golden and demo K3, floor and resident, threads 1 and 2', async () => {
  for (const t of await targets()) {
    for (const resident of [false, true]) {
      for (const threads of [1, 2]) {
        const floor = Model.plan(t.dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE, threads }).floorBytes;
        const model = await Model.load(t.dir, { budget: resident ? Number.MAX_SAFE_INTEGER : floor, ctx: 64, threads, maxPiece: SMALL_PIECE });
        try {
          const V = model.config.vocabSize;
          const base: Float32Array[] = [];
          const s0 = model.newState();
          const ref = await greedy(model, s0, IDS, GEN, { pick: (l) => (base.push(l.slice(0, V)), argmax(l, V)) });
          for (const [i, dir] of t.drafters.entries()) {
            const what = `${t.name}, ${DRAFTER_LAYOUTS[i] ?? 'trained'}, ${resident ? 'resident' : 'floor'}, threads ${threads}`;
            // at the floor: the target plans at its floor, the drafter's bytes come on top (budget = floor + its memory)
            const budget = resident ? undefined : model.store.plan.totalBytes + drafterMemoryBytes(loadDrafter(dir), 64);
            const drafter = loadDSpark(model, dir, { budget });
            const rows: Float32Array[] = [];
            const s = model.newState();
            const r = await speculative(model, s, IDS, GEN, { spec: drafter.config.block, fixedWidth: true, drafter, pick: (l) => (rows.push(l.slice(0, V)), argmax(l, V)) });
            assert.deepEqual(r.generated, ref.generated, `${what}: ids`);
            rows.forEach((row, k) => assert.ok(sameBytes(row, base[k]!), `${what}: logits of token ${k}`));
            assert.ok(stateBytes(s).equals(stateBytes(s0)), `${what}: final state`);
            // at the floor the plan streams K3's lm_head: a drafter sharing it reads it again for its logits
            if (!resident && drafter.config.lmHead === 'target') assert.ok(drafter.bytesRead >= model.config.vocabSize * model.config.hiddenSize * 2, `${what}: lm_head read again (${drafter.bytesRead} bytes)`);
            if (drafter.config.confidence) assert.ok(drafter.lastConfidence!.length >= 1 && drafter.lastConfidence!.every((c) => c >= 0 && c <= 1), `${what}: a confidence per proposal`);
            model.release(s);
          }
          model.release(s0);
        } finally {
          await model.close();
        }
      }
    }
  }
});

test('a drafter that does not fit beside the model in the budget is refused, naming the budget', async () => {
  const [golden] = await targets();
  const model = Model.open(golden!.dir, { ctx: 64 });
  try {
    assert.throws(() => loadDSpark(model, golden!.drafters[0]!, { budget: model.store.plan.totalBytes + 1024 }), /--drafter .*do not fit beside the model's plan .* in the budget of/);
  } finally {
    await model.close();
  }
});

function argmax(l: Float32Array, V: number): number {
  let best = 0;
  for (let i = 1; i < V; i++) if (l[i]! > l[best]!) best = i;
  return best;
}
