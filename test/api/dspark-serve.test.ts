// --drafter on chat, serve and the library (issue 46, items 1, 2 and 4): a session's greedy replies
// with the DSpark drafter are the ids of one without; `k3 serve --drafter` answers with the same
// text as without and /metrics counts its sweeps, drafts and acceptance per position; a bad
// --drafter DIR is one line and a non-zero exit for chat and serve; sampled drafts give one text
// for a seed on 1 and 2 threads.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CLI, ROOT } from '../helpers.js';
import { post, startServe } from '../serve-helpers.js';
import { loadModel, checkDrafter, specStats } from '../../src/api/index.js';
import { synthDrafter } from '../../src/synth/drafter.js';
import { loadConfig } from '../../src/checkpoint/config.js';

const DEMO = path.join(ROOT, 'models-shipped', 'demo-k3-trained');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dspark-serve-'));
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function drafterFor(layout: 'inferact' | 'radixark'): Promise<string> {
  const d = path.join(tmp, layout);
  if (!fs.existsSync(d)) {
    const c = loadConfig(DEMO);
    await synthDrafter({ layout, out: d, target: { hidden: c.hiddenSize, layers: c.numLayers, vocab: c.vocabSize } });
  }
  return d;
}

test('a session with --drafter replies with the ids of one without (greedy, two turns); refusals', async () => {
  const kimi = await loadModel(DEMO, { threads: 1, ctx: 256 });
  try {
    const dir = await drafterFor('inferact');
    const plain = kimi.session({ maxTokens: 12, thinking: false });
    const drafted = kimi.session({ maxTokens: 12, thinking: false, drafter: dir });
    for (const text of ['Hello there', 'Tell me more']) {
      const a = await plain.turn(text);
      const b = await drafted.turn(text);
      assert.deepEqual(b.ids, a.ids, `turn "${text}"`);
    }
    drafted.reset();
    assert.deepEqual((await drafted.turn('Hello there')).ids, (await kimi.session({ maxTokens: 12, thinking: false }).turn('Hello there')).ids, 'after /reset');
    assert.throws(() => kimi.session({ drafter: dir, spec: 2 }), /--drafter and --spec are exclusive/);
    assert.throws(() => kimi.session({ drafter: dir, specWidth: 99 }), /--spec-width 99 is not an integer in 0\.\.7/);
    assert.throws(() => kimi.session({ drafter: path.join(tmp, 'none') }), /--drafter: .*none does not exist/);
    assert.equal(checkDrafter(kimi, dir, 3).specWidth, 3);
    const before = specStats(kimi.model).sweeps;
    const g = kimi.generate([3, 17, 101, 5], { maxTokens: 6, drafter: dir, specWidth: 2 });
    await g.result;
    assert.ok(specStats(kimi.model).sweeps > before, 'a generation with a drafter adds its sweeps');
  } finally {
    await kimi.close();
  }
});

test('k3 serve --drafter: the text of a server without it; /metrics counts the sweeps', async () => {
  const dir = await drafterFor('radixark');
  const body = { prompt: [3, 17, 101, 5, 250, 42], max_tokens: 10, temperature: 0 };
  const plain = await startServe(DEMO);
  let want: string;
  try {
    want = (await post(`${plain.url}/v1/completions`, body)).json.choices[0].text;
  } finally {
    await plain.stop();
  }
  const s = await startServe(DEMO, ['--drafter', dir, '--spec-width', '3']);
  try {
    const r = await post(`${s.url}/v1/completions`, body);
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].text, want);
    const chat = await post(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0 });
    assert.equal(chat.status, 200);
    const m = await (await fetch(`${s.url}/metrics`)).text();
    const val = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(m)?.[1]);
    assert.ok(val('k3_spec_sweeps_total') >= 2, m);
    const sum = (name: string): number => [...m.matchAll(new RegExp(`^${name}\\{position="\\d+"\\} (\\d+)$`, 'gm'))].reduce((a, x) => a + Number(x[1]), 0);
    assert.equal(sum('k3_spec_drafted_by_position_total'), val('k3_spec_drafted_tokens_total'), 'drafted: the positions add up');
    assert.equal(sum('k3_spec_accepted_by_position_total'), val('k3_spec_accepted_tokens_total'), 'accepted: the positions add up');
    assert.match(m, /^k3_spec_accepted_by_position_total\{position="3"\} \d+$/m);
    assert.ok(val('k3_spec_emitted_tokens_total') >= val('k3_spec_sweeps_total'));
    assert.ok(val('k3_spec_read_bytes_per_emitted_token') >= 0);
  } finally {
    await s.stop();
  }
});

test('a bad --drafter DIR: one line and a non-zero exit for chat and serve', async () => {
  const bad = path.join(tmp, 'missing');
  for (const cmd of [['chat', DEMO], ['serve', DEMO, '--port', '0']]) {
    const r = spawnSync(process.execPath, [CLI, ...cmd, '--threads', '1', '--ctx', '128', '--drafter', bad], { encoding: 'utf8', input: 'hi\n' });
    assert.notEqual(r.status, 0, `${cmd[0]}: ${r.stderr}`);
    assert.match(r.stderr, /--drafter: .*missing does not exist/, cmd[0]);
    assert.equal(r.stderr.trim().split('\n').filter((l) => !l.startsWith('note:')).length, 1, `${cmd[0]}: ${r.stderr}`);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  }
});

test('sampled drafts on the kernels: a seed gives one text on 1 and 2 threads', async () => {
  const dir = await drafterFor('inferact');
  const texts: number[][] = [];
  for (const threads of [1, 2]) {
    const kimi = await loadModel(DEMO, { threads, ctx: 128 });
    try {
      const g = kimi.generate([3, 17, 101, 5], { maxTokens: 12, temperature: 0.8, seed: 5, drafter: dir });
      texts.push((await g.result).ids);
    } finally {
      await kimi.close();
    }
  }
  assert.equal(texts[0]!.length, 12);
  assert.deepEqual(texts[1], texts[0]);
});
