// Long prompts under the server's and the CLI's promises (issue 44): a prompt past the planned
// context is refused before any compute (400 at once, /health answering meanwhile; exit 2 for the
// CLI); a long prefill goes in one chunk at a time, so other requests decode and /health answers
// between its chunks, its client can abort it, and SIGTERM or SIGINT stops it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type KimiModel } from '../../src/api/index.js';
import { startServer, type RunningServer } from '../../src/server/server.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { CLI } from '../helpers.js';
import { post, startServe } from '../serve-helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-long-prompt-'));
const DEMO = join(tmp, 'demo-k3');
const CTX = 1024;
let kimi: KimiModel;
let srv: RunningServer;

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  kimi = await loadModel(DEMO, { threads: 1, ctx: CTX, parallel: 2 });
  srv = await startServer(kimi, { port: 0, name: 'demo-k3', maxContext: CTX });
});
after(async () => {
  await srv?.close();
  await kimi?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const ids = (n: number, seed = 0) => Array.from({ length: n }, (_, i) => 1 + ((i * 7 + seed) % 400));

test('a 100,000-token prompt is a 400 naming the context, at once, while /health answers', { timeout: 60_000 }, async () => {
  // its own process: a server that prefilled it would not return to its event loop for minutes
  const serve = await startServe(DEMO); // --ctx 512
  try {
    const signal = AbortSignal.timeout(20_000);
    const t0 = performance.now();
    const [r, h] = await Promise.all([post(`${serve.url}/v1/completions`, { prompt: ids(100_000), max_tokens: 2 }, {}, signal), fetch(`${serve.url}/health`, { signal })]);
    const s = (performance.now() - t0) / 1000;
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.equal(r.json.error.param, 'prompt');
    assert.match(r.json.error.message, /100000 tokens; this server holds 512 tokens of context/);
    assert.equal(h.status, 200);
    assert.ok(s < 3, `answered after ${s.toFixed(1)} s`);
    // text too: refused from its length alone, before it is tokenized; chat and Anthropic's shape
    const text = 'ab '.repeat(400_000);
    const c = await post(`${serve.url}/v1/completions`, { prompt: text, max_tokens: 2 }, {}, signal);
    assert.equal(c.status, 400);
    assert.match(c.json.error.message, /the prompt is at least \d+ tokens; this server holds 512 tokens/);
    const chat = await post(`${serve.url}/v1/chat/completions`, { messages: [{ role: 'user', content: text }], max_tokens: 2 }, {}, signal);
    assert.equal(chat.status, 400);
    assert.equal(chat.json.error.param, 'messages');
    // 2000 one-letter messages: short text, but the template's tokens are past the context
    const t1 = performance.now();
    const [many, h2] = await Promise.all([
      post(`${serve.url}/v1/chat/completions`, { messages: Array.from({ length: 2000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'a' })), max_tokens: 2 }, {}, signal),
      fetch(`${serve.url}/health`, { signal }),
    ]);
    assert.equal(many.status, 400, JSON.stringify(many.json));
    assert.match(many.json.error.message, /512 tokens of context/);
    assert.equal(h2.status, 200);
    assert.ok(performance.now() - t1 < 3000, `2000 messages answered after ${((performance.now() - t1) / 1000).toFixed(1)} s`);
    const msg = await post(`${serve.url}/v1/messages`, { model: 'demo-k3', max_tokens: 2, messages: [{ role: 'user', content: text }] }, {}, signal);
    assert.equal(msg.status, 400, JSON.stringify(msg.json));
    assert.equal(msg.json.type, 'error');
    assert.equal(msg.json.error.type, 'invalid_request_error');
    assert.match(msg.json.error.message, /512 tokens of context/);
  } finally {
    if (serve.proc.exitCode === null) serve.proc.kill('SIGKILL');
  }
});

test('a prompt past --ctx: `k3 run` and `k3 logits` exit 2 with one line, before loading', () => {
  const prompt = ids(600).join(',');
  for (const [args, want] of [
    [['run', DEMO, '--ids', prompt, '--ctx', '512'], /^k3: run: the prompt is 600 tokens; --ctx 512 leaves no room/],
    [['logits', DEMO, '--ids', prompt, '--ctx', '512', '--out', join(tmp, 'never.npy')], /^k3: logits: the prompt is 600 tokens; --ctx 512 holds fewer/],
  ] as const) {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, want);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    // a 600-token prefill takes 8 s on the test machine; the refusal, node's start-up alone
    assert.ok(performance.now() - t0 < 5000, `${args[0]}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
});

test('a long prefill goes in chunks: a short request decodes meanwhile, with its solo bytes; /health answers', async () => {
  const short = ids(5, 3);
  const solo = await kimi.generate(short, { maxTokens: 4 }).result;
  const long = kimi.generate(ids(CTX - 8), { maxTokens: 1 }).result;
  await new Promise((r) => setTimeout(r, 50)); // the long one is prefilling
  const t0 = performance.now();
  const h = await fetch(`${srv.url}/health`);
  const healthS = (performance.now() - t0) / 1000;
  assert.equal(h.status, 200);
  let longDone = false;
  void long.then(() => (longDone = true));
  const r = await kimi.generate(short, { maxTokens: 4 }).result;
  assert.equal(longDone, false, 'the short request ended before the long prompt was in');
  assert.deepEqual(r.ids, solo.ids);
  assert.ok(healthS < 3, `/health after ${healthS.toFixed(1)} s`);
  assert.equal((await long).ids.length, 1);
});

test('a request aborted by its client during its prefill ends there; the next one is unchanged', async () => {
  const prompt = ids(CTX - 8, 5);
  const ac = new AbortController();
  const g = kimi.generate(prompt, { maxTokens: 2, signal: ac.signal });
  setTimeout(() => ac.abort(), 100);
  const t0 = performance.now();
  const r = await g.result;
  assert.equal(r.stopReason, 'aborted');
  assert.equal(r.ids.length, 0);
  assert.ok(performance.now() - t0 < 3000);
  assert.equal(kimi.engine.stats.active, 0);
  // nothing of the half-fed state is held: a short prompt's bytes are what they were
  const a = await kimi.generate(ids(6, 1), { maxTokens: 3 }).result;
  const b = await kimi.generate(ids(6, 1), { maxTokens: 3 }).result;
  assert.deepEqual(a.ids, b.ids);
});

/** `k3 run` on a 20,000-token prompt, sent SIGTERM `delay` ms after it starts: exit code, seconds
 *  from the signal to the exit, stderr. */
async function termRun(delay: number): Promise<{ code: number | null; s: number; err: string }> {
  const prompt = Array.from({ length: 20_000 }, (_, i) => 1 + ((i * 13) % 97));
  const p = spawn(process.execPath, [CLI, 'run', DEMO, '--ids', prompt.join(','), '-n', '1', '--ctx', '20100', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
  await new Promise((r) => setTimeout(r, delay));
  const t0 = performance.now();
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 20_000);
  const code = await exited;
  clearTimeout(timer);
  return { code, s: (performance.now() - t0) / 1000, err };
}

test('SIGTERM during a 20,000-token prefill ends `k3 run` within 5 s (exit 130, the report)', { timeout: 120_000 }, async () => {
  // a signal that lands while the model still loads (a loaded machine) stops the load instead:
  // that is not this case, so wait longer and send it again
  let r = await termRun(2500);
  for (const delay of [6000, 12_000]) if (/nothing written/.test(r.err)) r = await termRun(delay);
  const { code, s, err } = r;
  assert.equal(code, 130, err);
  assert.ok(s < 5, `stopped after ${s.toFixed(1)} s`);
  assert.match(err, /\[interrupted\]/);
  const fed = Number(/prefill (\d+) tokens/.exec(err)?.[1]);
  assert.ok(fed > 0 && fed < 20_000, `stopped within the prompt (${fed} tokens in): ${err}`);
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} during a 20,000-token prefill stops \`k3 serve\` in order within 5 s`, { timeout: 60_000 }, async () => {
    const serve = await startServe(DEMO, ['--ctx', '20100']);
    try {
      const prompt = Array.from({ length: 20_000 }, (_, i) => 1 + ((i * 13) % 97));
      const pending = post(`${serve.url}/v1/completions`, { prompt, max_tokens: 1 }).catch(() => null); // cut off by the stop
      await new Promise((r) => setTimeout(r, 1500)); // prefilling
      const h = await fetch(`${serve.url}/health`, { signal: AbortSignal.timeout(5_000) });
      assert.equal(h.status, 200);
      const t0 = performance.now();
      assert.equal(await serve.stop(signal), 0, serve.stderr());
      const s = (performance.now() - t0) / 1000;
      assert.ok(s < 5, `stopped after ${s.toFixed(1)} s`);
      assert.doesNotMatch(serve.stderr(), /without waiting/);
      await pending;
    } finally {
      if (serve.proc.exitCode === null) serve.proc.kill('SIGKILL');
    }
  });
}
