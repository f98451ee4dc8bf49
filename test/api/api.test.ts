// The library API (src/api): loadModel on the demo K3 checkpoint. Generation equals the greedy
// loop's ids; overlapping generations (decoded together through forwardBatch) each give their
// solo bytes; a follow-up turn continues from the held prefix state; an AbortSignal stops a
// generation; and the README's library example runs as written against the package's exports.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type KimiModel } from '../../src/api/index.js';
import { greedy } from '../../src/generate/greedy.js';
import { Model } from '../../src/model/model.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { ROOT } from '../helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-api-'));
const DEMO = join(tmp, 'demo-k3');
let model: KimiModel;

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  model = await loadModel(DEMO, { threads: 1, ctx: 256, parallel: 4 });
});
after(async () => {
  await model?.close();
  rmSync(tmp, { recursive: true, force: true });
});

test('generate streams the greedy ids and their text, and a final result', async () => {
  const prompt = model.tokenize('The quick brown fox');
  const ref = Model.open(DEMO, { ctx: 256 });
  const want = (await greedy(ref, ref.newState(), prompt, 8)).generated;
  await ref.close();
  const g = model.generate(prompt, { maxTokens: 8 });
  const ids: number[] = [];
  let text = '';
  for await (const t of g) {
    ids.push(t.id);
    text += t.text;
  }
  const r = await g.result;
  assert.deepEqual(ids, want);
  assert.deepEqual(r.ids, want);
  assert.equal(r.text, text);
  assert.equal(text, model.detokenize(want));
  assert.equal(r.stopReason, 'max_tokens');
  assert.equal(r.promptTokens, prompt.length);
});

test('overlapping sampled generations each give the bytes they give alone', async () => {
  const prompts = ['alpha beta', 'gamma', 'delta epsilon zeta', 'eta'];
  const opts = (i: number) => ({ maxTokens: 6 + i, temperature: 0.9, topP: 0.95, seed: 10 + i });
  const solo: number[][] = [];
  for (let i = 0; i < prompts.length; i++) solo.push((await model.generate(prompts[i]!, opts(i)).result).ids);
  const together = await Promise.all(prompts.map((p, i) => model.generate(p, opts(i)).result));
  assert.deepEqual(together.map((r) => r.ids), solo);
  assert.ok(model.engine.totals.decodeSeconds > 0);
});

test('a follow-up chat turn continues from the held state of the previous turn', async () => {
  const first = [{ role: 'user', content: 'Hello there' }];
  const r1 = await model.chat(first, { maxTokens: 5, ignoreEos: true }).result;
  const next = [...first, { role: 'assistant', content: r1.message.content }, { role: 'user', content: 'And then?' }];
  const r2 = await model.chat(next, { maxTokens: 5, ignoreEos: true }).result;
  assert.ok(r2.cachedTokens >= r1.promptTokens, `cached ${r2.cachedTokens} < previous prompt ${r1.promptTokens}`);
  // the same turn from scratch on a fresh model gives the same reply
  const fresh = await loadModel(DEMO, { threads: 1, ctx: 256 });
  try {
    const r3 = await fresh.chat(next, { maxTokens: 5, ignoreEos: true }).result;
    assert.equal(r3.cachedTokens, 0);
    assert.deepEqual(r3.ids, r2.ids);
  } finally {
    await fresh.close();
  }
});

test('generations alone (spec, report) give the batched bytes, even while batched ones run', async () => {
  const opts = { maxTokens: 8, temperature: 0.8, seed: 3 };
  const batched = await model.generate('one two three', opts).result;
  const [spec, report, other] = await Promise.all([
    model.generate('one two three', { ...opts, spec: 3 }).result,
    model.generate('one two three', { ...opts, report: true }).result,
    model.generate('four five', opts).result,
  ]);
  assert.deepEqual(spec.ids, batched.ids);
  assert.deepEqual(report.ids, batched.ids);
  assert.equal(report.report!.steps.length, batched.ids.length - 1);
  assert.ok(report.report!.peak_rss_bytes > 0);
  assert.deepEqual(other.ids, (await model.generate('four five', opts).result).ids);
});

test('a session keeps its state between turns, as `k3 chat`; save / load / reset', async () => {
  const s = model.session({ maxTokens: 5, thinking: false }); // K3's thinking prompt would not fit in 256
  const t1 = await s.turn('Hi there');
  const t2 = await s.turn('And again');
  assert.ok(t2.reused >= t1.promptIds.length && t2.rebuilt === null, s.stats());
  const file = join(tmp, 'session.state');
  s.save(file);
  const s2 = model.session({ maxTokens: 5, thinking: false });
  s2.load(file);
  assert.deepEqual([...s2.history], [...s.history]);
  const [a, b] = [await s.turn('Third'), await s2.turn('Third')];
  assert.deepEqual(a.ids, b.ids);
  s.reset();
  assert.equal(s.history.length, 0);
  s.close();
  s2.close();
});

test('an AbortSignal stops a generation within a token; the model keeps working', async () => {
  const ac = new AbortController();
  const g = model.generate('abort me', { maxTokens: 200, signal: ac.signal });
  let n = 0;
  for await (const _ of g) if (++n === 3) ac.abort();
  const r = await g.result;
  assert.equal(r.stopReason, 'aborted');
  assert.ok(r.ids.length <= 4, `${r.ids.length} tokens after the abort at 3`);
  assert.equal((await model.generate('still here', { maxTokens: 2 }).result).ids.length, 2);
});

test('bad options are one clear error', async () => {
  assert.throws(() => model.generate('x', { maxTokens: 0 }), /maxTokens must be an integer >= 1/);
  assert.throws(() => model.generate([1, 1e9]), /token id 1000000000 is out of range/);
  await assert.rejects(loadModel(join(tmp, 'nope')), /model directory .* does not exist/);
  // a tokenizer with more ids than the model's vocabulary is refused at load, as in `k3 run`
  const small = join(tmp, 'vocab-300');
  await synthCheckpoint({ arch: 'k3', out: small, vocab: 300 });
  await assert.rejects(loadModel(small, { tokenizer: DEMO, kernels: 'ref' }), new RegExp(`the tokenizer in ${DEMO} has 512 ids but the model's vocabulary is 300`));
});

test('the model options of `k3 run` reach the store: --io, lookahead, --verify-reads, --allow-nonfinite', async () => {
  const m = await loadModel(DEMO, { threads: 1, ctx: 64, io: 'direct', lookahead: false, verifyReads: true, allowNonfinite: true });
  try {
    assert.equal(m.model.store.lookahead, false);
    assert.equal(m.model.checkFinite, false);
    assert.deepEqual((await m.generate([1, 2, 3], { maxTokens: 2 }).result).ids, (await model.generate([1, 2, 3], { maxTokens: 2 }).result).ids);
  } finally {
    await m.close();
  }
});

test("the README's library example runs as written, importing the package by its name", () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const m = /<!-- library-example -->\s*```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, 'README.md has a ```js block after <!-- library-example -->');
  // inside the package, so that `import ... from 'kimi-k3-ts'` resolves through its exports
  const file = join(ROOT, 'dist', 'test', `readme-example-${process.pid}.mjs`);
  writeFileSync(file, m[1]!);
  try {
    const r = spawnSync(process.execPath, [file], { env: { ...process.env, K3_MODEL: DEMO }, encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /tokens, stop: max_tokens/);
  } finally {
    rmSync(file, { force: true });
  }
});
