// The official `openai` npm client against `k3 serve` on the demo K3 checkpoint: streamed and
// non-streamed replies give the same text, a seed repeats, stop strings work, a client abort
// mid-stream leaves the server healthy, logprobs match `k3 logits` on the same ids, and a
// follow-up turn reports cached_tokens and processes only its new tokens. The client lives in
// the on-demand install test/e2e/ (e2e-deps.ts); without it these tests skip, saying so.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { E2E_INSTALL, importE2e } from '../e2e-deps.js';
import { lastRowByK3Logits, startServe, type Serving } from '../serve-helpers.js';

type Any = any;
const mod = await importE2e<{ default: new (o: object) => Any }>('openai');
const skip = mod ? false : `the openai client is not installed (${E2E_INSTALL})`;
if (!mod) console.log(`skipped: ${skip}`);

const tmp = mkdtempSync(join(tmpdir(), 'k3-openai-'));
const DEMO = join(tmp, 'demo-k3');
let srv: Serving | null = null;
let client: Any;
const user = (content: string) => [{ role: 'user' as const, content }];
// these tests read the response channel of a random-weight model: thinking off
const NO_THINK = { chat_template_kwargs: { thinking: false } };

before(async () => {
  if (!mod) return;
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  srv = await startServe(DEMO, ['--api-key', 'sk-e2e']);
  client = new mod.default({ baseURL: `${srv.url}/v1`, apiKey: 'sk-e2e', maxRetries: 0 });
});
after(async () => {
  await srv?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

async function streamText(body: object): Promise<{ text: string; finish: string | null }> {
  const stream = await client.chat.completions.create({ model: 'demo-k3', stream: true, ...body });
  let text = '';
  let finish: string | null = null;
  for await (const c of stream) {
    text += c.choices[0]?.delta?.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

test('a streamed and a non-streamed chat completion give the same text', { skip }, async () => {
  const body = { messages: user('Hello there'), max_tokens: 12, temperature: 0.7, seed: 3, ...NO_THINK };
  const r = await client.chat.completions.create({ model: 'demo-k3', ...body });
  const s = await streamText(body);
  assert.equal(s.text, r.choices[0].message.content);
  assert.equal(s.finish, r.choices[0].finish_reason);
  assert.ok(r.usage.completion_tokens > 0);
});

test('seed makes the output repeat', { skip }, async () => {
  const body = { model: 'demo-k3', messages: user('Pick words'), max_tokens: 10, temperature: 1, seed: 42, ...NO_THINK };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('stop strings work', { skip }, async () => {
  const body = { model: 'demo-k3', messages: user('Keep going'), max_tokens: 16, temperature: 0, ...NO_THINK };
  const full: string = (await client.chat.completions.create(body)).choices[0].message.content;
  const stop = full.slice(5, 8);
  const r = await client.chat.completions.create({ ...body, stop: [stop] });
  assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('a client abort mid-stream leaves the server healthy', { skip }, async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: 'demo-k3', messages: user('long story'), max_tokens: 400, stream: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ac.abort();
  } catch (e) {
    assert.match(String((e as Error).name), /Abort/); // the client ends the stream quietly or with an abort error
  }
  assert.ok(n < 10, `${n} chunks after the abort at 3`);
  assert.equal((await fetch(`${srv!.url}/health`)).status, 200);
  const r = await client.chat.completions.create({ model: 'demo-k3', messages: user('after'), max_tokens: 2 });
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('logprobs match `k3 logits` on the same ids', { skip }, async () => {
  const prompt = [3, 14, 15, 92, 65];
  const r = await client.completions.create({ model: 'demo-k3', prompt, max_tokens: 3, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  const ids = [...prompt];
  for (let step = 0; step < 3; step++) {
    const want = await lastRowByK3Logits(DEMO, ids, tmp);
    assert.ok(Math.abs(lp.token_logprobs[step] - want.logprob) < 1e-9, `step ${step}: ${lp.token_logprobs[step]} vs ${want.logprob}`);
    ids.push(want.id);
  }
  // chat logprobs: the chosen token's logprob is the largest of its top_logprobs at temperature 0
  const c = await client.chat.completions.create({ model: 'demo-k3', messages: user('hi'), max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 3 });
  for (const t of c.choices[0].logprobs.content) assert.equal(t.logprob, t.top_logprobs[0].logprob);
});

test('a follow-up turn reports cached_tokens of the previous turn and processes only the new tokens', { skip }, async () => {
  const first = user('What is a fox?');
  const r1 = await client.chat.completions.create({ model: 'demo-k3', messages: first, max_tokens: 6, temperature: 0 });
  const next = [...first, { role: 'assistant' as const, content: r1.choices[0].message.content }, { role: 'user' as const, content: 'And a dog?' }];
  const r2 = await client.chat.completions.create({ model: 'demo-k3', messages: next, max_tokens: 6, temperature: 0 });
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens, JSON.stringify(r2.usage));
  // processed: at most the tokens the follow-up added (the reply as rendered, and the new message)
  assert.ok(r2.usage.prompt_tokens - r2.usage.prompt_tokens_details.cached_tokens <= r2.usage.prompt_tokens - r1.usage.prompt_tokens);
});
