// The trained DSpark drafter of the demo K3 (models-shipped/demo-k3-dspark, docs/DEMO-DRAFTER.md):
// it loads as the RadixArk layout it declares, fits the demo K3, and on held-out prompts (sums and
// add-tool conversations of pairs never trained on; their ids recorded by tools/train-dspark/eval.mjs:
// per kind the prompt at its median, and the worst one, whose sweeps reject drafts) it emits the same
// ids as plain greedy decoding while accepting enough of its drafts: at least 2.5 tokens per sweep
// (drafts accepted + the bonus token) at the full block, pooled, at 1 and 2 threads; and the drafted run is the bytes of
// plain greedy decoding (ids, logits, final state) at the floor and resident, 1 and 2 threads.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ROOT } from '../helpers.js';
import { loadModel } from '../../src/api/index.js';
import { checkDrafterTarget, loadDrafter } from '../../src/checkpoint/drafter.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { greedy } from '../../src/generate/greedy.js';
import { speculative } from '../../src/generate/spec.js';
import { loadDSparkReference } from '../../src/generate/dspark-draft.js';

const TARGET = path.join(ROOT, 'models-shipped', 'demo-k3-trained');
const DRAFTER = path.join(ROOT, 'models-shipped', 'demo-k3-dspark');

interface TestPrompt {
  kind: string;
  a: number;
  b: number;
  ids: number[];
  tokens_per_sweep: number;
}

const SMALL_PIECE = 8 * 1024;

/** Greedy picks that keep every logits row they were given. */
function recording(V: number): { rows: Float32Array[]; pick: (l: Float32Array) => number } {
  const rows: Float32Array[] = [];
  return {
    rows,
    pick: (l) => {
      rows.push(l.slice(0, V));
      let best = 0;
      for (let i = 1; i < V; i++) if (l[i]! > l[best]!) best = i;
      return best;
    },
  };
}

/** A sequence state's ids, KDA states and MLA cache rows, as bytes. */
function stateBytes(s: SequenceState): Buffer {
  const f = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const parts: Buffer[] = [Buffer.from(JSON.stringify(s.tokens))];
  for (const k of s.kda) if (k) parts.push(f(k.S), f(k.conv));
  for (const m of s.mla) if (m) parts.push(f(m.lat.subarray(0, m.length * m.Lk)), f(m.rope.subarray(0, m.length * m.dr)));
  return Buffer.concat(parts);
}

interface Step {
  drafted?: number;
  emitted?: number;
}

const info = JSON.parse(fs.readFileSync(path.join(DRAFTER, 'train.json'), 'utf8')) as {
  eval: { tokens_per_sweep: number; ids_equal_spec0: boolean; test_prompts: TestPrompt[] };
  eval_spec_width_7: { per_prompt: { kind: string; a: number; b: number; tokens_per_sweep: number }[] };
};

test('demo drafter: a RadixArk-layout checkpoint that fits the demo K3, small', () => {
  const d = loadDrafter(DRAFTER);
  assert.equal(d.config.format, 'dflash');
  assert.equal(d.config.block, 7);
  checkDrafterTarget(d.config, Model.open(TARGET, { ctx: 64 }).config, 'the demo K3');
  const bytes = fs.readdirSync(DRAFTER).reduce((n, f) => n + fs.statSync(path.join(DRAFTER, f)).size, 0);
  assert.ok(bytes < 5 * 1024 * 1024, `${bytes} bytes`);
  // the recorded evaluation (tools/train-dspark/eval.mjs --write) met the bar on all its prompts
  assert.ok(info.eval.ids_equal_spec0);
  assert.ok(info.eval.tokens_per_sweep >= 2.5, `recorded ${info.eval.tokens_per_sweep}`);
});

test('demo drafter: held-out prompts, the ids of --spec 0 and >= 2.5 tokens per sweep at the full block, 1 and 2 threads', async () => {
  const prompts = info.eval.test_prompts;
  assert.ok(prompts.length >= 3);
  // the full block every sweep is deterministic: each prompt's value is the one the eval recorded
  // (the default width model is timed, so only its ids are checked)
  const recorded = new Map(info.eval_spec_width_7.per_prompt.map((x) => [`${x.kind} ${x.a}+${x.b}`, x.tokens_per_sweep]));
  for (const threads of [1, 2]) {
    const model = await loadModel(TARGET, { threads, ctx: 512 });
    try {
      let sweeps = 0;
      let emitted = 0;
      for (const p of prompts) {
        const what = `${p.kind} ${p.a}+${p.b}`;
        const opts = { maxTokens: 128, ignoreEos: false };
        const plain = await model.generate(p.ids, opts).result;
        const timed = await model.generate(p.ids, { ...opts, drafter: DRAFTER }).result;
        assert.deepEqual(timed.ids, plain.ids, `${what}, threads ${threads}: drafted output (width model) differs from --spec 0`);
        const spec = await model.generate(p.ids, { ...opts, drafter: DRAFTER, specWidth: 7, report: true }).result;
        assert.deepEqual(spec.ids, plain.ids, `${what}, threads ${threads}: drafted output differs from --spec 0`);
        const steps = (spec.report as { steps: Step[] }).steps.filter((s) => s.drafted !== undefined);
        const n = steps.reduce((x, s) => x + s.emitted!, 0);
        assert.equal(Math.round((1000 * n) / steps.length) / 1000, recorded.get(what), `${what}, threads ${threads}`);
        sweeps += steps.length;
        emitted += n;
      }
      assert.ok(emitted / sweeps >= 2.5, `threads ${threads}: ${emitted} tokens in ${sweeps} sweeps`);
    } finally {
      await model.close();
    }
  }
});

test('demo drafter == --spec 0 bytes (ids, every logits row, final state): floor and resident, threads 1 and 2', async () => {
  // the worst recorded prompt (its sweeps reject drafts) and the call prompt (long, all accepted)
  const prompts = info.eval.test_prompts.filter((p) => p.kind === 'call' || p === info.eval.test_prompts.at(-1));
  const GEN = 40;
  const floor = Model.plan(TARGET, { budget: 0, ctx: 320, maxPiece: SMALL_PIECE, threads: 2 }).floorBytes;
  for (const budget of [floor, Number.MAX_SAFE_INTEGER]) {
    for (const threads of [1, 2]) {
      const model = await Model.load(TARGET, { budget, ctx: 320, threads, maxPiece: SMALL_PIECE });
      try {
        const drafter = loadDSparkReference(model, DRAFTER);
        for (const p of prompts) {
          const what = `${p.kind} ${p.a}+${p.b}, ${budget === floor ? 'floor' : 'resident'}, threads ${threads}`;
          const V = model.config.vocabSize;
          const base = recording(V);
          const s0 = model.newState();
          const ref = await greedy(model, s0, p.ids, GEN, { pick: base.pick });
          const rec = recording(V);
          const s = model.newState();
          const r = await speculative(model, s, p.ids, GEN, { spec: drafter.config.block, drafter, pick: rec.pick });
          assert.deepEqual(r.generated, ref.generated, `${what}: ids`);
          rec.rows.forEach((row, k) => assert.ok(Buffer.from(row.buffer).equals(Buffer.from(base.rows[k]!.buffer)), `${what}: logits of token ${k}`));
          assert.ok(stateBytes(s).equals(stateBytes(s0)), `${what}: final state`);
          model.release(s);
          model.release(s0);
        }
      } finally {
        await model.close();
      }
    }
  }
});
