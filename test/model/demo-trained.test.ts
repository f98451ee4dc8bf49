// The built-in trained demo model (models-shipped/demo-k3-trained): the engine's answers to the
// 200 held-out sums reach the accuracy the training script recorded (within 1 point); they are
// the same bytes at the floor budget and all resident, on 1 and 2 threads, with and without
// speculation; and the engine's logits match the numpy training model's (a second K3
// implementation, tools/train-demo/k3_numpy.py) on 32 positions to 1e-3.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, FIXTURES, ROOT } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { TRAINED_DEMO_DIR, answerSum, readTrainInfo, sumAnswer } from '../../src/cli/demo-sums.js';
import { readNpyF32 } from '../../src/util/npy.js';

const DIR = TRAINED_DEMO_DIR;
const SMALL_PIECE = 8 * 1024;
const info = readTrainInfo(DIR);

async function answers(opts: { budget: number; threads: number; spec?: number }, problems: [number, number][]): Promise<string[]> {
  const model = await Model.load(DIR, { budget: opts.budget, threads: opts.threads, ctx: 64, maxPiece: SMALL_PIECE });
  try {
    const out: string[] = [];
    for (const [a, b] of problems) out.push(await answerSum(model, a, b, { spec: opts.spec }));
    return out;
  } finally {
    await model.close();
  }
}

test('demo model: the shipped checkpoint is where the demo looks for it', () => {
  assert.equal(DIR, path.join(ROOT, 'models-shipped', 'demo-k3-trained'));
  assert.equal(info.held_out.length, 200);
});

test('demo model: 200 held-out sums at the recorded accuracy, the same answers at every budget, thread count and with --spec', async () => {
  const all = info.held_out;
  const ref = await answers({ budget: Number.MAX_SAFE_INTEGER, threads: 2 }, all);
  // the floor of each thread count (the plan counts the threads)
  const floorOf = (threads: number) => Model.plan(DIR, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE, threads }).floorBytes;
  const some = all.slice(0, 24); // enough to cover every code path; the floor streams the trunk per token
  for (const atFloor of [true, false]) {
    for (const threads of [1, 2]) {
      for (const spec of [0, 4]) {
        if (!atFloor && threads === 2 && spec === 0) continue; // the reference itself
        const got = await answers({ budget: atFloor ? floorOf(threads) : Number.MAX_SAFE_INTEGER, threads, spec }, some);
        assert.deepEqual(got, ref.slice(0, some.length), `budget ${atFloor ? 'floor' : 'resident'}, threads ${threads}, spec ${spec}`);
      }
    }
  }
  const right = ref.filter((got, i) => got === sumAnswer(...all[i]!)).length;
  const acc = (100 * right) / all.length;
  assert.ok(acc >= 95, `held-out accuracy ${acc}% is below 95%`);
  assert.ok(Math.abs(acc - info.held_out_accuracy) <= 1, `engine accuracy ${acc}% vs ${info.held_out_accuracy}% recorded by the training script`);
});

test('demo model: engine logits match the numpy training model on 32 positions (< 1e-3)', async () => {
  const fx = path.join(FIXTURES, 'demo-trained');
  const ids = (JSON.parse(fs.readFileSync(path.join(fx, 'ids.json'), 'utf8')) as { ids: number[] }).ids;
  const want = readNpyF32(path.join(fx, 'numpy-logits.npy'));
  assert.equal(ids.length, 32);
  const model = await Model.load(DIR, { threads: 2, ctx: 64 });
  try {
    const got = await model.forward(model.newState(), ids, 'all');
    assert.equal(got.length, want.data.length);
    let worst = 0;
    for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want.data[i]!));
    assert.ok(worst < 1e-3, `max |logit difference| ${worst}`);
  } finally {
    await model.close();
  }
});

test('k3 demo shows the three behaviours on held-out sums (chat, thinking, the tool loop), most of them right', () => {
  const r = spawnSync(process.execPath, [CLI, 'demo', '--problems', '3', '--threads', '1'], { encoding: 'utf8', cwd: ROOT });
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.split('\n').filter((l) => / (raw|chat|tool): /.test(l));
  assert.equal(lines.length, 9, r.stdout);
  for (const mode of ['raw:', 'chat:', 'tool:']) assert.equal(lines.filter((l) => l.includes(mode)).length, 3, r.stdout);
  assert.ok(lines.filter((l) => l.endsWith('right')).length >= 7, r.stdout);
  assert.match(r.stdout, /add\(\{"a":\d+,"b":\d+\}\) -> \d+, says \d+/);
  assert.match(r.stdout, /\d+ of 9 right/);
});
