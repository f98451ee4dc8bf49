// The official `ollama` npm client against `k3 serve` (/api/*) on the shipped trained demo, a tiny
// agent that adds: version, list, ps and show answer; chat and generate, streamed (Ollama's
// default) and not, give the same text, thinking and counts as /v1/chat/completions for the same
// greedy request, with the add tool's round trip (tool_name back to its call) and think / format;
// errors come as Ollama's {"error"} in the client's ResponseError. The client lives in the
// on-demand install test/e2e/ (e2e-deps.ts); without it these tests skip, saying so.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADD_TOOL, TRAINED_DEMO_DIR, sumQuestion } from '../../src/cli/demo-sums.js';
import { E2E_INSTALL, importE2e } from '../e2e-deps.js';
import { post, startServe, type Serving } from '../serve-helpers.js';

type Any = any;
type Body = Record<string, unknown>;
const mod = await importE2e<Any>('ollama');
const skip = mod ? false : `the ollama client is not installed (${E2E_INSTALL})`;
if (!mod) console.log(`skipped: ${skip}`);

const KEY = 'sk-ollama-e2e';
const MODEL = 'demo-k3-trained';
const auth = { authorization: `Bearer ${KEY}` };
let srv: Serving | null = null;
let client: Any;

before(async () => {
  if (!mod) return;
  srv = await startServe(TRAINED_DEMO_DIR, ['--api-key', KEY]);
  const Ollama = mod.Ollama ?? mod.default.Ollama;
  client = new Ollama({ host: srv.url, headers: auth });
});
after(async () => {
  await srv?.stop();
});

const user = (content: string) => [{ role: 'user', content }];
/** Greedy and short, as every request here. */
const greedy = (n: number) => ({ temperature: 0, seed: 7, num_predict: n });

/** An answer without what differs between two runs: the times. */
function same({ created_at, total_duration, load_duration, prompt_eval_duration, eval_duration, ...r }: Any): Any {
  for (const d of [total_duration, load_duration, prompt_eval_duration, eval_duration]) assert.ok(Number.isInteger(d) && d > 0, `duration ${d}`);
  assert.ok(!Number.isNaN(Date.parse(created_at)), created_at);
  return r;
}

/** A streamed chat accumulated as a client does: the same fields as the whole answer. */
async function streamedChat(req: Body): Promise<Any> {
  const message: Any = { role: 'assistant', content: '' };
  let last: Any = null;
  for await (const part of await client.chat({ ...req, stream: true })) {
    assert.equal(part.model, req.model);
    message.content += part.message.content;
    if (part.message.thinking) message.thinking = (message.thinking ?? '') + part.message.thinking;
    if (part.message.tool_calls) (message.tool_calls ??= []).push(...part.message.tool_calls);
    last = part;
  }
  assert.equal(last.done, true);
  return { ...last, message };
}

/** The chat whole and streamed, checked identical; the whole one. */
async function chatBoth(req: Body): Promise<Any> {
  const whole = await client.chat({ ...req, stream: false });
  assert.deepEqual(same(await streamedChat(req)), same(whole));
  return whole;
}

/** The same request on /v1/chat/completions: its message and usage. */
async function openai(body: Body): Promise<Any> {
  const r = await post(`${srv!.url}/v1/chat/completions`, { model: MODEL, temperature: 0, seed: 7, ...body }, auth);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json;
}

/** An Ollama answer and an OpenAI completion say the same. */
function sameAsOpenAi(o: Any, c: Any): void {
  const m = c.choices[0].message;
  assert.equal(o.message.content, m.content ?? '');
  assert.equal(o.message.thinking, m.reasoning_content);
  assert.deepEqual((o.message.tool_calls ?? []).map((t: Any) => [t.function.name, t.function.arguments]), (m.tool_calls ?? []).map((t: Any) => [t.function.name, JSON.parse(t.function.arguments)]));
  assert.deepEqual([o.prompt_eval_count, o.eval_count, o.done_reason], [c.usage.prompt_tokens, c.usage.completion_tokens, c.choices[0].finish_reason === 'length' ? 'length' : 'stop']);
}

test('ollama: version, list, ps and show answer; HEAD / and GET / still serve the chat page', { skip }, async () => {
  assert.match((await client.version()).version, /^\d+\.\d+\.\d+$/);
  const { models } = await client.list();
  assert.equal(models.length, 1);
  assert.equal(models[0].name, `${MODEL}:latest`);
  assert.ok(models[0].size > 0 && /^[0-9a-f]{64}$/.test(models[0].digest), JSON.stringify(models[0]));
  assert.equal(models[0].details.family, 'k3');
  assert.equal((await client.ps()).models[0].context_length, 512);
  const info = await client.show({ model: models[0].name });
  assert.deepEqual(info.capabilities, ['completion', 'tools', 'thinking']);
  assert.equal(info.model_info['general.architecture'], 'k3');
  assert.match(info.parameters, /num_ctx 512/);
  const head = await fetch(`${srv!.url}/`, { method: 'HEAD' });
  assert.deepEqual([head.status, head.headers.get('content-type')], [200, 'text/html; charset=utf-8']);
  assert.match(await (await fetch(`${srv!.url}/`)).text(), /<html/i);
});

test('ollama: chat, streamed and not, says what /v1/chat/completions says, thinking apart', { skip }, async () => {
  const q = sumQuestion(27, 58);
  const r = await chatBoth({ model: MODEL, messages: user(q), options: greedy(40) });
  assert.equal(r.model, MODEL);
  assert.deepEqual([r.message.thinking, r.message.content, r.done_reason], ['27+58=85', '85', 'stop']);
  sameAsOpenAi(r, await openai({ messages: user(q), max_tokens: 40 }));
  // the name as /api/tags lists it is the model too, and comes back as sent
  assert.equal((await client.chat({ model: `${MODEL}:latest`, messages: user(q), options: greedy(40) })).model, `${MODEL}:latest`);
  // think: false has no thinking; "low" is K3's effort low; both as the OpenAI fields
  const off = await chatBoth({ model: MODEL, messages: user(q), think: false, options: greedy(20) });
  assert.equal(off.message.thinking, undefined);
  sameAsOpenAi(off, await openai({ messages: user(q), max_tokens: 20, chat_template_kwargs: { thinking: false } }));
  const low = await chatBoth({ model: MODEL, messages: user(q), think: 'low', options: greedy(40) });
  sameAsOpenAi(low, await openai({ messages: user(q), max_tokens: 40, reasoning_effort: 'low' }));
  // a token limit ends the reply with "length"
  const cut = await chatBoth({ model: MODEL, messages: user(q), options: greedy(3) });
  assert.deepEqual([cut.done_reason, cut.eval_count], ['length', 3]);
});

test('ollama: the add tool round trip: a call with object arguments, tool_name back, the answer from its result', { skip }, async () => {
  const ask = { model: MODEL, tools: [ADD_TOOL], messages: user(sumQuestion(27, 58)), options: greedy(100) };
  const first = await chatBoth(ask);
  assert.equal(first.message.tool_calls.length, 1, JSON.stringify(first.message));
  assert.deepEqual([first.message.tool_calls[0].function.name, first.message.tool_calls[0].function.arguments], ['add', { a: 27, b: 58 }]);
  const viaOpenAi = await openai({ tools: [ADD_TOOL], messages: ask.messages, max_tokens: 100 });
  sameAsOpenAi(first, viaOpenAi);
  // the assistant message goes back as the client got it (ids dropped, as older clients do)
  const call = { function: { name: 'add', arguments: first.message.tool_calls[0].function.arguments } };
  const history = [...ask.messages, { role: 'assistant', content: first.message.content, thinking: first.message.thinking, tool_calls: [call] }, { role: 'tool', tool_name: 'add', content: '85' }];
  const second = await chatBoth({ ...ask, messages: history });
  assert.match(second.message.content, /(^|\D)0?85(\D|$)/);
  const m = viaOpenAi.choices[0].message;
  sameAsOpenAi(second, await openai({ tools: [ADD_TOOL], max_tokens: 100, messages: [...ask.messages, m, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '85' }] }));
});

test('ollama: format (a JSON schema) is held by constrained decoding, as response_format', { skip }, async () => {
  const schema = { type: 'object', properties: { sum: { type: 'integer' } }, required: ['sum'] };
  const r = await chatBoth({ model: MODEL, messages: user(sumQuestion(3, 4)), think: false, format: schema, options: greedy(24) });
  sameAsOpenAi(r, await openai({ messages: user(sumQuestion(3, 4)), max_tokens: 24, chat_template_kwargs: { thinking: false }, response_format: { type: 'json_schema', json_schema: { name: 'format', schema, strict: true } } }));
  if (r.done_reason === 'stop') assert.equal(typeof JSON.parse(r.message.content).sum, 'number');
});

test('ollama: generate: the prompt as a user turn, or raw without the template; streamed == whole', { skip }, async () => {
  const q = sumQuestion(27, 58);
  const whole = await client.generate({ model: MODEL, prompt: q, stream: false, options: greedy(40) });
  assert.deepEqual([whole.thinking, whole.response, whole.done_reason], ['27+58=85', '85', 'stop']);
  let text = '';
  let thinking = '';
  let last: Any = null;
  for await (const part of await client.generate({ model: MODEL, prompt: q, stream: true, options: greedy(40) })) {
    text += part.response;
    thinking += part.thinking ?? '';
    last = part;
  }
  assert.deepEqual([thinking, text, last.done, last.eval_count], [whole.thinking, whole.response, true, whole.eval_count]);
  // raw: the demo's trained raw form "ab+cd=" -> three digits; context holds the ids
  const raw = await client.generate({ model: MODEL, prompt: '27+58=', raw: true, stream: false, options: greedy(4) });
  assert.equal(raw.response, '085');
  assert.deepEqual(raw.context.slice(0, 6), [...Buffer.from('27+58=')]);
  // an empty prompt only "loads" the model, as Ollama answers it
  assert.equal((await client.generate({ model: MODEL, prompt: '', stream: false })).done_reason, 'load');
});

test('ollama: errors in Ollama\'s shape: bad JSON, missing messages, another model, a bad key, unsupported fields', { skip }, async () => {
  const bad = await post(`${srv!.url}/api/chat`, '{"model": ', auth);
  assert.equal(bad.status, 400);
  assert.deepEqual(Object.keys(bad.json), ['error']);
  assert.match(bad.json.error, /not valid JSON/);
  const rejects = (p: Promise<unknown>, status: number, re: RegExp) => assert.rejects(p, (e: Any) => e.name === 'ResponseError' && e.status_code === status && re.test(e.error));
  await rejects(client.chat({ model: MODEL }), 400, /^messages: /);
  await rejects(client.chat({ model: 'llama3.2', messages: user('hi') }), 404, /"llama3.2" not found/);
  await rejects(client.chat({ model: MODEL, messages: user('hi'), think: 'medium' }), 400, /^think: /);
  await rejects(client.chat({ model: MODEL, messages: user('hi'), options: { temperature: 'hot' } }), 400, /^options\.temperature: /);
  await rejects(client.chat({ model: MODEL, messages: [{ role: 'user', content: 'hi', images: ['aGk='] }] }), 400, /^messages\[0\]\.images: /);
  await rejects(client.generate({ model: MODEL, prompt: 'def f(', suffix: 'return x' }), 400, /^suffix: /);
  await rejects(client.pull({ model: 'llama3.2' }), 501, /does not pull/);
  const Ollama = mod.Ollama ?? mod.default.Ollama;
  await rejects(new Ollama({ host: srv!.url, headers: { authorization: 'Bearer wrong' } }).list(), 401, /unauthorized/);
});
