// `k3 serve` on the demo K3 checkpoint, driven with plain fetch (no client library needed):
// health, models, metrics; every kind of bad input answered with its status and an OpenAI-shaped
// JSON error while the server stays up; streamed == non-streamed text; seed repeats; stop
// strings; logprobs equal to `k3 logits` on the same ids; a follow-up turn continues from the
// held state (cached_tokens); a client abort mid-stream; a full queue answers 429.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { lastRowByK3Logits, post, sse, startServe, type Serving } from '../serve-helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-serve-'));
const DEMO = join(tmp, 'demo-k3');
const KEY = 'sk-test-key';
const AUTH = { authorization: `Bearer ${KEY}` };
let srv: Serving;
const chat = (body: object, headers: Record<string, string> = AUTH) => post(`${srv.url}/v1/chat/completions`, body, headers);
const user = (content: string) => [{ role: 'user', content }];
// the text tests read the response channel of a random-weight model: thinking off
const NO_THINK = { chat_template_kwargs: { thinking: false } };

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  srv = await startServe(DEMO, ['--api-key', KEY, '--parallel', '1', '--queue', '1', '--body-limit', String(1 << 20)]);
});
after(async () => {
  const code = await srv?.stop();
  rmSync(tmp, { recursive: true, force: true });
  assert.equal(code, 0, srv?.stderr());
});

async function healthy(): Promise<void> {
  const r = await fetch(`${srv.url}/health`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { status: 'ok' });
}

test('health, models and Prometheus metrics', async () => {
  await healthy();
  const m = await fetch(`${srv.url}/v1/models`, { headers: AUTH });
  const models = await m.json();
  assert.deepEqual(models.data.map((d: { id: string }) => d.id), ['demo-k3']);
  assert.equal(models.data[0].max_model_len, 512, 'the context (--ctx), which the chat page shows');
  const page = await fetch(`${srv.url}/`);
  assert.match(await page.text(), /<script type="module" src="\/assets\/chat.js">/);
  // the page's scripts and the two libraries come from this server (no network needed)
  for (const [asset, has] of [['api.js', '/v1/chat/completions'], ['marked.js', 'marked'], ['purify.js', 'DOMPurify']] as const) {
    const r = await fetch(`${srv.url}/assets/${asset}`);
    assert.equal(r.headers.get('content-type'), 'text/javascript; charset=utf-8', asset);
    assert.ok((await r.text()).includes(has), asset);
  }
  // the counters are behind the key too (issue 44); /health and the page are not
  assert.equal((await fetch(`${srv.url}/metrics`)).status, 401);
  assert.equal((await fetch(`${srv.url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
  const text = await (await fetch(`${srv.url}/metrics`, { headers: AUTH })).text();
  for (const name of ['k3_http_requests_total', 'k3_prompt_tokens_total', 'k3_completion_tokens_total', 'k3_decode_tokens_per_second', 'k3_expert_hit_rate', 'k3_read_gigabytes_total', 'k3_queue_length']) assert.match(text, new RegExp(`^${name}(\\{[^}]*\\})? [0-9.e+-]+$`, 'm'), name);
});

test('bad input: each gets its status and an OpenAI JSON error; the server stays up', async () => {
  const cases: [string, () => Promise<{ status: number; json: any }>, number, string | null][] = [
    ['malformed JSON', () => chat('{"messages": [' as unknown as object), 400, null],
    ['not an object', () => chat([1, 2] as unknown as object), 400, null],
    ['messages of the wrong type', () => chat({ messages: 'hi' }), 400, 'messages'],
    ['a bad role', () => chat({ messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages[0].role'],
    ['temperature of the wrong type', () => chat({ messages: user('x'), temperature: 'hot' }), 400, 'temperature'],
    ['n = 2', () => chat({ messages: user('x'), n: 2 }), 400, 'n'],
    ['max_tokens not an integer', () => chat({ messages: user('x'), max_tokens: 1.5 }), 400, 'max_tokens'],
    ['a bad tool name', () => chat({ messages: user('x'), tools: [{ type: 'function', function: { name: '1f', parameters: {} } }] }), 400, 'tools[0].function.name'],
    ['unknown model', () => chat({ model: 'gpt-4o', messages: user('x') }), 404, 'model'],
    ['missing key', () => chat({ messages: user('x') }, {}), 401, null],
    ['wrong key', () => chat({ messages: user('x') }, { authorization: 'Bearer nope' }), 401, null],
    ['token id out of range', () => post(`${srv.url}/v1/completions`, { prompt: [1, 999999] }, AUTH), 400, 'prompt'],
    ['unknown route', () => post(`${srv.url}/v1/embeddings`, {}, AUTH), 404, null],
    ['a 100 MB body', () => post(`${srv.url}/v1/chat/completions`, JSON.stringify({ messages: user('x'.repeat(100 << 20)) }), AUTH), 413, null],
  ];
  for (const [what, send, status, param] of cases) {
    const r = await send();
    assert.equal(r.status, status, `${what}: ${JSON.stringify(r.json).slice(0, 200)}`);
    assert.equal(typeof r.json.error?.message, 'string', what);
    assert.equal(typeof r.json.error?.type, 'string', what);
    if (param !== null) assert.equal(r.json.error.param, param, what);
    await healthy();
  }
});

test('streamed and non-streamed replies are the same text; a seed repeats', async () => {
  const body = { messages: user('Tell me a story'), max_tokens: 12, temperature: 0.8, seed: 7, ...NO_THINK };
  const a = await chat(body);
  assert.equal(a.status, 200, JSON.stringify(a.json));
  const b = await chat(body);
  assert.equal(b.json.choices[0].message.content, a.json.choices[0].message.content);
  const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { ...AUTH, 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const { chunks, done } = await sse(res);
  assert.ok(done, 'ends with data: [DONE]');
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, a.json.choices[0].message.content);
  assert.equal(chunks.at(-2).choices[0].finish_reason, a.json.choices[0].finish_reason);
  assert.equal(chunks.at(-1).usage.completion_tokens, a.json.usage.completion_tokens);
});

test('stop strings end the reply before them', async () => {
  const full = await chat({ messages: user('Go on'), max_tokens: 16, temperature: 0, ...NO_THINK });
  const text: string = full.json.choices[0].message.content;
  const stop = text.slice(4, 7);
  assert.ok(stop.length === 3, `reply long enough: ${JSON.stringify(text)}`);
  const r = await chat({ messages: user('Go on'), max_tokens: 16, temperature: 0, stop: [stop], ...NO_THINK });
  assert.equal(r.json.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(r.json.choices[0].finish_reason, 'stop');
});

test('logprobs equal those of `k3 logits` on the same ids', async () => {
  const prompt = [5, 17, 42, 99, 7];
  const r = await post(`${srv.url}/v1/completions`, { prompt, max_tokens: 3, temperature: 0, logprobs: 2 }, AUTH);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const lp = r.json.choices[0].logprobs;
  // the generated ids, from the completion's text tokens: re-run the same request's ids through `k3 logits`
  const gen = await post(`${srv.url}/v1/completions`, { prompt, max_tokens: 3, temperature: 0, logprobs: 0 }, AUTH);
  assert.deepEqual(gen.json.choices[0].logprobs.token_logprobs, lp.token_logprobs);
  const ids = [...prompt];
  // greedy: each generated id is the argmax of the row before it
  for (let step = 0; step < 3; step++) {
    const want = await lastRowByK3Logits(DEMO, ids, tmp);
    assert.ok(Math.abs(lp.token_logprobs[step] - want.logprob) < 1e-9, `step ${step}: ${lp.token_logprobs[step]} vs ${want.logprob}`);
    assert.ok(Object.keys(lp.top_logprobs[step]).length <= 2);
    ids.push(want.id);
  }
});

test('a follow-up turn continues from the held state: cached_tokens, only the new tokens processed', async () => {
  const first = user('What is a fox?');
  const r1 = await chat({ messages: first, max_tokens: 6, temperature: 0 });
  const next = [...first, { role: 'assistant', content: r1.json.choices[0].message.content }, { role: 'user', content: 'And a dog?' }];
  const before = await (await fetch(`${srv.url}/metrics`, { headers: AUTH })).text();
  const r2 = await chat({ messages: next, max_tokens: 6, temperature: 0 });
  const after = await (await fetch(`${srv.url}/metrics`, { headers: AUTH })).text();
  const cached = r2.json.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= r1.json.usage.prompt_tokens, `cached ${cached} < previous prompt ${r1.json.usage.prompt_tokens}`);
  const metric = (t: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(t)![1]);
  assert.equal(metric(after, 'k3_cached_prompt_tokens_total') - metric(before, 'k3_cached_prompt_tokens_total'), cached);
  // the same request again: its whole prompt is held, with its logits
  const r3 = await chat({ messages: next, max_tokens: 6, temperature: 0 });
  assert.equal(r3.json.usage.prompt_tokens_details.cached_tokens, r2.json.usage.prompt_tokens);
  assert.equal(r3.json.choices[0].message.content, r2.json.choices[0].message.content);
});

test('a client abort mid-stream stops its sequence; the server stays healthy; a full queue answers 429', async () => {
  const ac = new AbortController();
  const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', signal: ac.signal, headers: { ...AUTH, 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('long'), max_tokens: 400, stream: true }) });
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  ac.abort();
  await reader.read().catch(() => {}); // the aborted body errors
  await healthy();
  // parallel 1, queue 1: one running, one waiting, the third is refused
  const long = { messages: user('busy'), max_tokens: 300, stream: true };
  const a = fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { ...AUTH, 'content-type': 'application/json' }, body: JSON.stringify(long) });
  const ra = await a;
  const rdA = ra.body!.getReader();
  await rdA.read();
  const b = post(`${srv.url}/v1/chat/completions`, { messages: user('second'), max_tokens: 2 }, AUTH);
  await new Promise((r) => setTimeout(r, 200));
  const c = await post(`${srv.url}/v1/chat/completions`, { messages: user('third'), max_tokens: 2 }, AUTH);
  assert.equal(c.status, 429, JSON.stringify(c.json));
  await rdA.cancel();
  assert.equal((await b).status, 200);
  const m = await (await fetch(`${srv.url}/metrics`, { headers: AUTH })).text();
  assert.match(m, /^k3_active_sequences 0$/m);
  assert.match(m, /^k3_queue_length 0$/m);
});
