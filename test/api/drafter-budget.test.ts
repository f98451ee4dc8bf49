// A drafter named at load (LoadOptions.drafter; k3 run, chat and serve pass --drafter) shares the
// memory budget with a streamed model: the plan keeps the drafter's weights, KV cache and working
// memory off --memory and pins K3's lm_head first; drafted greedy output is the ids of plain
// decoding. Without the drafter at load the same budget leaves it no room (one clear line), and a
// budget below the model's floor plus the drafter's memory is refused naming the drafter. The
// kernels are made as wide as the drafter's widest matrix, so it runs on them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { ROOT, sameBytes } from '../helpers.js';
import { loadModel } from '../../src/api/index.js';
import { loadDrafter } from '../../src/checkpoint/drafter.js';

import { drafterMemoryBytes } from '../../src/generate/dspark-draft.js';
import { Model } from '../../src/model/model.js';
import { pinnedMask } from '../../src/store/plan.js';

const DEMO = path.join(ROOT, 'models-shipped', 'demo-k3-trained');
const DRAFTER = path.join(ROOT, 'models-shipped', 'demo-k3-dspark');
const CTX = 256;
const PROMPT = [1011, 263, 281, 264, 366, 34, 1013, 510, 370, 32, 56, 54, 43, 49, 57, 63, 1012, 263, 1013, 1010, 1011, 263, 281, 264, 351, 34, 1013, 1011, 297, 1013];

test('loadModel({ drafter }): the drafter kept off a streamed budget, the lm_head pinned first, the ids of --spec 0', async () => {
  const p = Model.plan(DEMO, { budget: 0, ctx: CTX, threads: 1, parallel: 1 });
  const need = drafterMemoryBytes(loadDrafter(DRAFTER), CTX);
  const memory = p.floorBytes + need + Math.floor(p.trunkBytes / 4);
  const kimi = await loadModel(DEMO, { memory, threads: 1, ctx: CTX, parallel: 1, drafter: DRAFTER });
  try {
    const plan = kimi.model.store.plan;
    assert.equal(plan.reservedBytes, need);
    assert.equal(plan.budgetBytes, memory - need);
    assert.ok(plan.streamedBytes > 0, 'the model streams part of its trunk');
    const { layout } = kimi.model.store;
    const head = [...layout.matrices.values()].find((m) => /(^|\.)lm_head$/.test(m.base))!;
    const mask = pinnedMask(plan, layout);
    assert.ok(head.pieces.every((pc) => mask[pc.seq]), 'the lm_head is pinned');
    // the kernels take the drafter's widest matrix (its context projection: taps x K3's hidden size)
    const d = loadDrafter(DRAFTER).config;
    assert.ok(kimi.model.kernels!.members[0]!.maxCols >= d.taps.length * d.targetHiddenSize);

    const opts = { maxTokens: 24, ignoreEos: false };
    const plain = await kimi.generate(PROMPT, opts).result;
    const drafted = await kimi.generate(PROMPT, { ...opts, drafter: DRAFTER, specWidth: 7, report: true }).result;
    assert.deepEqual(drafted.ids, plain.ids);
    const steps = (drafted.report as { steps: { drafted?: number }[] }).steps;
    assert.ok(steps.some((s) => (s.drafted ?? 0) > 0), 'drafts were verified');
  } finally {
    await kimi.close();
  }
  // the same budget without the drafter at load: the plan takes it all, and the drafter is refused in one line
  const bare = await loadModel(DEMO, { memory, threads: 1, ctx: CTX, parallel: 1 });
  try {

    await assert.rejects(async () => bare.generate(PROMPT, { maxTokens: 4, drafter: DRAFTER }).result, /do not fit beside the model's plan .* load the model with the drafter/);
  } finally {
    await bare.close();
  }
  await assert.rejects(
    () => loadModel(DEMO, { memory: p.floorBytes + need - (1 << 20), threads: 1, ctx: CTX, parallel: 1, drafter: DRAFTER }),
    (e: Error) => /kept for the drafter\) is below this model's floor: the smallest budget that works with the drafter is/.test(e.message) && e.message.split('\n').length === 1,
  );
});

test('kernelCols: kernels as wide as a matrix beside the model (a drafter\'s context projection), counted in the plan, the same bytes', async () => {
  const ids = PROMPT.slice(0, 12);
  const narrow = await Model.load(DEMO, { ctx: CTX, threads: 2 });
  const wide = await Model.load(DEMO, { ctx: CTX, threads: 2, kernelCols: 1 << 16 });
  try {
    assert.ok(narrow.kernels!.members[0]!.maxCols < 1 << 16);
    assert.ok(wide.kernels!.members[0]!.maxCols >= 1 << 16);
    assert.ok(wide.store.plan.threadBytes > narrow.store.plan.threadBytes, 'each thread\'s scratch is counted at the wider width');
    const a = await narrow.forward(narrow.newState(), ids, 'all', 64);
    const b = await wide.forward(wide.newState(), ids, 'all', 64);
    assert.ok(sameBytes(a, b));
  } finally {
    await narrow.close();
    await wide.close();
  }
});
