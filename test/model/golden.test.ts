// Golden checkpoints in the official layouts with logits from an independent float64 reference
// (../shared/golden, read in place). Acceptance: max |logit - golden| <
// GOLDEN_TOL (2e-4, what f32 arithmetic justifies: see helpers.ts) on the 32- and the 300-token
// prompt, and the 32 greedy ids identical.
// Determinism: prefill == token-by-token decode == any chunk size, compared as bytes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, GOLDEN_TOL, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { readNpyF32 } from '../../src/util/npy.js';
import { greedy } from '../../src/generate/greedy.js';

const CASES = ['k2-yarn', 'k2-thinking-int4', 'kimi-linear', 'k3'];

function maxDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

for (const name of CASES) {
  const dir = path.join(GOLDEN, name);
  const tokens = JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')) as { short: number[]; long: number[] };

  test(`${name}: golden logits, short and long prompts (< ${GOLDEN_TOL})`, async () => {
    const model = Model.open(dir);
    for (const which of ['short', 'long'] as const) {
      const tol = GOLDEN_TOL;
      const logits = await model.forward(model.newState(), tokens[which], 'all');
      const gold = readNpyF32(path.join(dir, `logits-${which}.npy`));
      assert.deepEqual(gold.shape, [tokens[which].length, model.config.vocabSize]);
      const d = maxDiff(logits, gold.data);
      assert.ok(d < tol, `${which}: max |diff| ${d} >= ${tol}`);
    }
    model.close();
  });

  test(`${name}: 32 greedy ids identical to the reference`, async () => {
    const model = Model.open(dir);
    const g = JSON.parse(fs.readFileSync(path.join(dir, 'greedy.json'), 'utf8')) as { prompt: number[]; generated: number[] };
    const r = await greedy(model, model.newState(), g.prompt, g.generated.length);
    assert.deepEqual(r.generated, g.generated);
    model.close();
  });

  test(`${name}: prefill, token-by-token decode and chunks 1, 7, 64 give the same bytes`, async () => {
    const model = Model.open(dir);
    const ids = tokens.short.slice(0, 24);
    const whole = await model.forward(model.newState(), ids, 'all', 64);
    for (const chunk of [1, 7]) {
      assert.ok(sameBytes(await model.forward(model.newState(), ids, 'all', chunk), whole), `chunk ${chunk} differs from one prefill`);
    }
    // Decode: a prompt of 5, then one forward call per token, carrying the state.
    const st = model.newState();
    const V = model.config.vocabSize;
    const parts = [await model.forward(st, ids.slice(0, 5), 'all')];
    for (let t = 5; t < ids.length; t++) parts.push(await model.forward(st, [ids[t]!], 'all'));
    const dec = new Float32Array(ids.length * V);
    let o = 0;
    for (const p of parts) {
      dec.set(p, o);
      o += p.length;
    }
    assert.ok(sameBytes(dec, whole), 'decode differs from prefill');
    model.close();
  });
}
