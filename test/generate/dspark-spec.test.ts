// DSpark drafts verified by K3 (issue 46, item 3), on the reference drafter path: with a drafter
// synthesized in each of the four layouts and fitted to the target, greedy output is the bytes of
// --spec 0 (ids, every logits row, final state) on the golden K3 and the demo K3, at the floor and
// resident, on 1 and 2 threads; the drafter's context rows after partly accepted sweeps are the
// taps a fresh forward gives; `k3 run --json --drafter` lists every sweep.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CLI, GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import type { Taps } from '../../src/model/taps.js';
import { greedy } from '../../src/generate/greedy.js';
import { ReplayDrafter, type Drafter } from '../../src/generate/draft.js';
import { speculative } from '../../src/generate/spec.js';
import { RunRecorder } from '../../src/generate/report.js';
import { acceptDraftFrom } from '../../src/generate/spec-sample.js';
import { Rng, Sampler } from '../../src/generate/sampling.js';
import { loadDSparkReference } from '../../src/generate/dspark-draft.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { DRAFTER_LAYOUTS, synthDrafter } from '../../src/synth/drafter.js';
import { loadConfig } from '../../src/checkpoint/config.js';

const GEN = 10;
const SMALL_PIECE = 8 * 1024;

function stateBytes(s: SequenceState): Buffer {
  const f = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const parts: Buffer[] = [Buffer.from(JSON.stringify(s.tokens))];
  for (const k of s.kda) if (k) parts.push(f(k.S), f(k.conv));
  for (const m of s.mla) if (m) parts.push(f(m.lat.subarray(0, m.length * m.Lk)), f(m.rope.subarray(0, m.length * m.dr)));
  return Buffer.concat(parts);
}

function recordingPick(V: number): { rows: Float32Array[]; pick: (l: Float32Array) => number } {
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

/** The target models and a drafter per layout fitted to each (made once). */
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dspark-spec-'));
async function targets(): Promise<{ name: string; dir: string; drafters: string[] }[]> {
  const demo = path.join(tmp, 'demo');
  if (!fs.existsSync(demo)) await synthCheckpoint({ arch: 'k3', preset: 'demo', out: demo });
  const out = [];
  for (const [name, dir] of [['golden k3', path.join(GOLDEN, 'k3')], ['demo k3', demo]] as const) {
    const c = loadConfig(dir);
    const drafters = [];
    for (const layout of DRAFTER_LAYOUTS) {
      const d = path.join(tmp, `${name.replace(' ', '-')}-${layout}`);
      if (!fs.existsSync(d)) await synthDrafter({ layout, out: d, target: { hidden: c.hiddenSize, layers: c.numLayers, vocab: c.vocabSize } });
      drafters.push(d);
    }
    out.push({ name, dir, drafters });
  }
  return out;
}

test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));

test('--drafter (each layout) == --spec 0 bytes: golden and demo K3, floor and resident, threads 1 and 2', async () => {
  for (const t of await targets()) {
    const ids = [3, 17, 101, 5, 250, 42, 7, 99];
    const floor = Model.plan(t.dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE, threads: 2 }).floorBytes;
    for (const budget of [floor, Number.MAX_SAFE_INTEGER]) {
      for (const threads of [1, 2]) {
        const model = await Model.load(t.dir, { budget, ctx: 64, threads, maxPiece: SMALL_PIECE });
        try {
          const V = model.config.vocabSize;
          const base = recordingPick(V);
          const s0 = model.newState();
          const ref = await greedy(model, s0, ids, GEN, { pick: base.pick });
          for (const [i, dir] of t.drafters.entries()) {
            const what = `${t.name}, ${DRAFTER_LAYOUTS[i]}, ${budget === floor ? 'floor' : 'resident'}, threads ${threads}`;
            const drafter = loadDSparkReference(model, dir);
            const rec = recordingPick(V);
            const s = model.newState();
            const recorder = new RunRecorder(model.store);
            const r = await speculative(model, s, ids, GEN, { spec: Math.min(3, drafter.config.block), fixedWidth: true, drafter, pick: rec.pick, recorder });
            assert.deepEqual(r.generated, ref.generated, `${what}: ids`);
            rec.rows.forEach((row, k) => assert.ok(sameBytes(row, base.rows[k]!), `${what}: logits of token ${k}`));
            assert.ok(stateBytes(s).equals(stateBytes(s0)), `${what}: final state`);
            const sum = recorder.summary();
            assert.ok(sum.spec!.drafted > 0, `${what}: drafted`);
            for (const st of sum.steps) assert.equal(st.drafted_ids!.length, st.drafted, `${what}: drafted ids listed`);
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

test("the drafter's context after partly accepted sweeps is the taps of a fresh forward; refusals", async () => {
  const [golden] = await targets();
  const model = Model.open(golden!.dir, { ctx: 64 });
  const dspark = loadDSparkReference(model, golden!.drafters[0]!);
  const ids = [3, 17, 101, 5, 250, 42, 7, 99];
  const ref = await greedy(model, model.newState(), ids, GEN, {});
  const replay = new ReplayDrafter([...ids, ...ref.generated], 0.5);
  const blocks: { context: number[]; tokens: number[] }[] = [];
  // drafts K3 half accepts (replayed), while the DSpark drafter drafts from the same taps
  const mixed: Drafter = {
    taps: dspark.taps,
    draft(context, max) {
      blocks.push({ context: [...context], tokens: dspark.draft(context, dspark.config.block) });
      return replay.draft(context, max);
    },
  };
  const recorder = new RunRecorder(model.store);
  const r = await speculative(model, model.newState(), ids, GEN, { spec: 4, fixedWidth: true, drafter: mixed, recorder });
  assert.deepEqual(r.generated, ref.generated);
  // half of each replayed draft is right: the first positions accepted, the later ones not
  const sp = recorder.summary().spec!;
  assert.ok(sp.acceptance_by_position[0]! > 0 && sp.acceptance_by_position.at(-1)! === 0, `per position ${sp.acceptance_by_position}`);
  assert.ok(blocks.length >= 3);
  for (const b of blocks) {
    // a fresh drafter, its taps from one forward over the context but its last id (the anchor)
    const fresh = loadDSparkReference(model, golden!.drafters[0]!);
    const s = model.newState();
    await model.forward(s, b.context.slice(0, -1), 'none', 64, fresh.taps as Taps);
    model.release(s);
    assert.deepEqual(fresh.draft(b.context, fresh.config.block), b.tokens, `block after ${b.context.length} ids`);
  }
  const tinyDir = path.join(tmp, 'tiny-inferact');
  await synthDrafter({ layout: 'inferact', out: tinyDir });
  assert.throws(() => loadDSparkReference(model, tinyDir), /target_hidden_size 64 is not the target's hidden_size 128/);
  await model.close();
});

test('k3 run --drafter --json lists every sweep; --spec-width fixes the width; refusals', async () => {
  const [golden] = await targets();
  const run = (...extra: string[]) => spawnSync(process.execPath, [CLI, 'run', golden!.dir, '--ids', '3,17,101,5,250,42,7,99', '-n', '8', '--json', ...extra], { encoding: 'utf8' });
  const plain = JSON.parse(run().stdout);
  const r = run('--drafter', golden!.drafters[1]!, '--spec-width', '2');
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.deepEqual(j.generated_ids, plain.generated_ids);
  assert.equal(j.steps.length, j.spec.sweeps);
  assert.equal(j.spec.acceptance_by_position.length, 2, 'acceptance per draft position');
  for (const [k, a] of j.spec.acceptance_by_position.entries()) {
    const at = j.steps.filter((st: { drafted: number }) => st.drafted > k);
    assert.equal(a, at.filter((st: { accepted: number }) => st.accepted > k).length / at.length, `position ${k}`);
  }
  let done = 1; // the first id comes from the prefill
  for (const [i, st] of j.steps.entries()) {
    assert.equal(st.drafted_ids.length, Math.min(2, 8 - done - 1), `sweep ${i}: width`);
    assert.ok(st.next_id === null || j.generated_ids.includes(st.next_id));
    done += st.emitted;
  }
  // the CLI's synth fits a drafter to a target as the library's does (the same bytes)
  const viaCli = path.join(tmp, 'cli-block5');
  const synth = spawnSync(process.execPath, [CLI, 'synth', '--drafter', 'inferact-block5', '--target', golden!.dir, '--out', viaCli], { encoding: 'utf8' });
  assert.equal(synth.status, 0, synth.stderr);
  for (const f of ['config.json', 'model.safetensors']) assert.ok(fs.readFileSync(path.join(viaCli, f)).equals(fs.readFileSync(path.join(golden!.drafters[1]!, f))), f);
  const both = run('--drafter', golden!.drafters[0]!, '--spec', '2');
  assert.equal(both.status, 2);
  assert.match(both.stderr, /--drafter and --spec are exclusive/);
  const wide = run('--drafter', golden!.drafters[1]!, '--spec-width', '6');
  assert.equal(wide.status, 2);
  assert.match(wide.stderr, /more than the drafter's block of 5/);
});

/** A draw from q (probabilities over the vocabulary). */
function drawFrom(q: ArrayLike<number>, rng: Rng): number {
  const u = rng.nextFloat();
  let cum = 0;
  for (let i = 0; i < q.length; i++) if (u < (cum += q[i]!)) return i;
  return q.length - 1;
}

test("sampled DSpark drafts: the acceptance rule with the drafter's own q keeps K3's distribution; a seed gives one text", async () => {
  const [golden] = await targets();
  const model = Model.open(golden!.dir, { ctx: 64 });
  const V = model.config.vocabSize;
  const dspark = loadDSparkReference(model, golden!.drafters[2]!);
  dspark.sampleFrom(1, 5);
  const ids = [3, 17, 101, 5, 250, 42, 7, 99];
  const s = model.newState();
  const last = await model.forward(s, ids, 'last', 64, dspark.taps);
  let pending = 0;
  for (let i = 1; i < V; i++) if (last[i]! > last[pending]!) pending = i;
  dspark.draft([...ids, pending], 3);
  const logits = await model.forward(s, [pending], 'last', 64, dspark.taps); // p at the first proposal's position
  const sampler = new Sampler({ temperature: 1, seed: 11 });
  const { ids: order, probs } = sampler.distribution(logits, [], V);
  const p = new Float64Array(V);
  order.forEach((id, i) => (p[id] = probs[i]!));
  const drafterQ = dspark.lastQ[0]!;
  const mixed = p.map((x) => 0.5 * x + 0.5 / V); // a q close to p: most drafts accepted
  const N = 40000;
  const rng = new Rng(3);
  for (const [name, q] of [['drafter q', drafterQ], ['q near p', mixed]] as const) {
    const counts = new Float64Array(V);
    let accepted = 0;
    for (let n = 0; n < N; n++) {
      const c = acceptDraftFrom(sampler, logits, drawFrom(q, rng), q, [], V);
      counts[c.id]!++;
      if (c.accepted) accepted++;
    }
    let worst = 0;
    for (let v = 0; v < V; v++) worst = Math.max(worst, Math.abs(counts[v]! / N - p[v]!));
    assert.ok(worst < 0.01, `${name}: emitted ids distributed as p (worst gap ${worst})`);
    const expect = p.reduce((a, x, v) => a + Math.min(x, q[v]!), 0);
    assert.ok(Math.abs(accepted / N - expect) < 0.01, `${name}: acceptance ${accepted / N} vs sum min(p, q) ${expect}`);
  }
  await model.close();
  // through k3 run: the drafter samples its block, a seed gives the same text
  const run = (seed: string) => spawnSync(process.execPath, [CLI, 'run', golden!.dir, '--ids', ids.join(','), '-n', '10', '--json', '--drafter', golden!.drafters[2]!, '--spec-width', '3', '--temperature', '1.5', '--seed', seed], { encoding: 'utf8' });
  const a = run('7');
  assert.equal(a.status, 0, a.stderr);
  assert.deepEqual(JSON.parse(a.stdout).generated_ids, JSON.parse(run('7').stdout).generated_ids);
  assert.ok(JSON.parse(a.stdout).spec.drafted > 0);
});
