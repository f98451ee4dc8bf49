// K3's request rules on `k3 serve`, as Moonshot's API and its conformance suite (the Kimi Vendor
// Verifier) state them: each bad field gets a 400 naming it; a system message carrying tools may
// have no content; usage comes at the end of every stream; max_tokens past the context is
// accepted and ends with "length"; the server renders exactly as `k3 render` and reports
// Moonshot's prompt_tokens; --vendor-params fixes the sampling as the hosted API does.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, ROOT } from '../helpers.js';
import { post, sse, startServe, type Serving } from '../serve-helpers.js';
import { validator } from '../constrain-helpers.js';

const DEMO = join(ROOT, 'models-shipped', 'demo-k3-trained');
const tmp = mkdtempSync(join(tmpdir(), 'k3-proto-'));
let srv: Serving;
let vendor: Serving;
const chat = (body: object, s: Serving = srv) => post(`${s.url}/v1/chat/completions`, body);
const user = (content: string) => [{ role: 'user', content }];
const fn = (name: string, parameters: object = { type: 'object', properties: {} }) => ({ type: 'function', function: { name, description: 'A tool.', parameters } });

before(async () => {
  // K3 prompts are long (the thinking-effort message alone is ~40 tokens): room for them
  srv = await startServe(DEMO, ['--ctx', '2048']);
  vendor = await startServe(DEMO, ['--ctx', '2048', '--vendor-params']);
});
after(async () => {
  await srv?.stop();
  await vendor?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

test('bad K3 fields: a 400 naming each', async () => {
  const cases: [string, object, string][] = [
    ['tool name starting with a digit', { messages: user('x'), tools: [fn('1bad')] }, 'tools[0].function.name'],
    ['tool name with @', { messages: user('x'), tools: [fn('bad@name')] }, 'tools[0].function.name'],
    ['empty tool name', { messages: user('x'), tools: [fn('')] }, 'tools[0].function.name'],
    ['tool name of 257', { messages: user('x'), tools: [fn('a'.repeat(257))] }, 'tools[0].function.name'],
    ['tool of another type', { messages: user('x'), tools: [{ type: 'bogus', function: { name: 'x' } }] }, 'tools[0].type'],
    ['tool without function', { messages: user('x'), tools: [{ type: 'function' }] }, 'tools[0].function'],
    ['duplicate tool names', { messages: user('x'), tools: [fn('dup'), fn('dup')] }, 'tools[1].function.name'],
    ['duplicate request and dynamic', { tools: [fn('dup')], messages: [{ role: 'system', content: '', tools: [fn('dup')] }, ...user('x')] }, 'messages[0].tools[0].function.name'],
    ['duplicate across dynamic', { messages: [{ role: 'system', tools: [fn('dup')] }, { role: 'system', tools: [fn('dup')] }, ...user('x')] }, 'messages[1].tools[0].function.name'],
    ['dynamic tools in a user message', { messages: [{ role: 'user', content: 'hi', tools: [fn('f')] }] }, 'messages[0].tools'],
    ['dynamic tools in an assistant message', { messages: [...user('hi'), { role: 'assistant', content: 'ok', tools: [fn('f')] }, ...user('x')] }, 'messages[1].tools'],
    ['dynamic tools not an array', { messages: [{ role: 'system', content: '', tools: { type: 'function' } }, ...user('x')] }, 'messages[0].tools'],
    ['dynamic tools with content', { messages: [{ role: 'system', content: 'not empty', tools: [fn('f')] }, ...user('x')] }, 'messages[0].content'],
    ['tool message without tool_call_id', { messages: [{ role: 'tool', content: 'r' }, ...user('x')] }, 'messages[0].tool_call_id'],
    ['tool_choice required without tools', { messages: user('x'), tool_choice: 'required' }, 'tool_choice'],
    ['tool_choice required with no tools', { messages: user('x'), tools: [], tool_choice: 'required' }, 'tool_choice'],
    ['tool_choice bogus', { messages: user('x'), tools: [fn('f')], tool_choice: 'bogus' }, 'tool_choice'],
    ['tool_choice names an unknown function', { messages: user('x'), tools: [fn('f')], tool_choice: { type: 'function', function: { name: 'g' } } }, 'tool_choice'],
    ['reasoning_effort medium', { messages: user('x'), reasoning_effort: 'medium' }, 'reasoning_effort'],
    ['thinking_effort medium', { messages: user('x'), chat_template_kwargs: { thinking_effort: 'medium' } }, 'chat_template_kwargs.thinking_effort'],
    ['thinking.effort medium', { messages: user('x'), thinking: { type: 'enabled', effort: 'medium' } }, 'thinking.effort'],
    ['thinking.keep none', { messages: user('x'), thinking: { type: 'enabled', keep: 'none' } }, 'thinking.keep'],
    ['response_format of another type', { messages: user('x'), response_format: { type: 'yaml' } }, 'response_format.type'],
    ['json_schema without its object', { messages: user('x'), response_format: { type: 'json_schema' } }, 'response_format.json_schema'],
    ['json_schema without a name', { messages: user('x'), response_format: { type: 'json_schema', json_schema: { schema: { type: 'object' } } } }, 'response_format.json_schema.name'],
    ['json_schema without a schema', { messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'n' } } }, 'response_format.json_schema.schema'],
    ['json_schema schema not an object', { messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema: 'x' } } }, 'response_format.json_schema.schema'],
    ['json_schema strict not a boolean', { messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema: {}, strict: 'yes' } } }, 'response_format.json_schema.strict'],
  ];
  for (const [what, body, param] of cases) {
    const r = await chat({ ...body, max_tokens: 2 });
    assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.json).slice(0, 300)}`);
    assert.equal(r.json.error.param, param, `${what}: ${r.json.error.message}`);
    assert.equal(r.json.error.type, 'invalid_request_error', what);
  }
  const effort = await chat({ messages: user('x'), reasoning_effort: 'medium' });
  assert.match(effort.json.error.message, /low, high, max/);
});

test('accepted: dynamic tools without content, tool_choice none / auto without tools, a named function', async () => {
  const ok: object[] = [
    { messages: [{ role: 'system', tools: [fn('get_weather')] }, ...user('x')] },
    { messages: [{ role: 'system', content: null, tools: [fn('get_weather')] }, ...user('x')] },
    { messages: user('x'), tool_choice: 'none' },
    { messages: user('x'), tool_choice: 'auto' },
    { messages: user('x'), tools: [fn('f')], tool_choice: { type: 'function', function: { name: 'f' } } },
    { messages: [{ role: 'system', tools: [fn('f')] }, ...user('x')], tool_choice: 'required' },
    { messages: user('x'), thinking: { type: 'disabled', keep: 'none', effort: 'high' } },
    { messages: user('x'), reasoning_effort: 'low' },
  ];
  for (const body of ok) {
    const r = await chat({ ...body, max_tokens: 3 });
    assert.equal(r.status, 200, `${JSON.stringify(body)}: ${JSON.stringify(r.json).slice(0, 300)}`);
  }
});

test('usage ends every stream, include_usage or not; max_tokens past the context ends with "length"', async () => {
  const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('hi'), max_tokens: 3, stream: true }) });
  const { chunks, done } = await sse(res);
  assert.ok(done);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(typeof last.usage.prompt_tokens, 'number');
  // the ids that could end the turn banned, so the reply runs into the context
  const added = JSON.parse(readFileSync(join(DEMO, 'tokenizer_config.json'), 'utf8')).added_tokens_decoder as Record<string, { content: string }>;
  const ban = Object.fromEntries(Object.entries(added).filter(([, t]) => ['<|end_of_msg|>', '[EOS]', '<|close|>'].includes(t.content)).map(([id]) => [id, -100]));
  const long = await chat({ messages: user('hi'), max_tokens: 1_000_000, chat_template_kwargs: { thinking: false }, logit_bias: ban });
  assert.equal(long.status, 200, JSON.stringify(long.json));
  assert.equal(long.json.choices[0].finish_reason, 'length');
});

test('the server renders as `k3 render`; usage.prompt_tokens is Moonshot\'s count of that render', async () => {
  const requests = [
    { messages: user('What is 2+3?') },
    { messages: [{ role: 'system', content: 'Be brief.' }, ...user('hi')], tools: [fn('add', { type: 'object', properties: { a: { type: 'integer' } } })], tool_choice: 'required' },
    { messages: user('hi'), chat_template_kwargs: { thinking: false } },
    { messages: user('hi'), reasoning_effort: 'low', response_format: { type: 'json_object' } },
  ];
  for (const [i, body] of requests.entries()) {
    const file = join(tmp, `req-${i}.json`);
    writeFileSync(file, JSON.stringify(body));
    const rendered = JSON.parse(execFileSync(process.execPath, [CLI, 'render', DEMO, '--request', file, '--json'], { encoding: 'utf8' }));
    const r = await post(`${srv.url}/v1/completions`, { prompt: rendered.ids, max_tokens: 1, temperature: 0 });
    const c = await chat({ ...body, max_tokens: 1, temperature: 0 });
    assert.equal(c.status, 200, JSON.stringify(c.json));
    assert.equal(c.json.usage.prompt_tokens, rendered.prompt_tokens, `request ${i}`);
    // the same ids: the chat request continues from the state the raw-id request left
    assert.equal(r.json.usage.prompt_tokens, rendered.ids.length);
    assert.ok(c.json.usage.prompt_tokens_details.cached_tokens <= c.json.usage.prompt_tokens);
  }
});

test('--vendor-params: the hosted API\'s fixed sampling accepted, anything else refused', async () => {
  for (const thinking of [false, true]) {
    const kw = { chat_template_kwargs: { thinking } };
    for (const p of [{ temperature: 0.6 }, { temperature: 0.0 }, { temperature: 1.0 }, { top_p: 0.95 }, { presence_penalty: 0 }, { frequency_penalty: 0 }, { n: 1 }]) {
      const r = await chat({ messages: user('OK'), max_tokens: 2, ...kw, ...p }, vendor);
      assert.equal(r.status, 200, `${JSON.stringify(p)}: ${JSON.stringify(r.json)}`);
    }
    for (const p of [{ temperature: 1.1 }, { temperature: 2.0 }, { temperature: -0.1 }, { top_p: 0.8 }, { presence_penalty: 0.5 }, { frequency_penalty: 0.5 }, { n: 2 }]) {
      const r = await chat({ messages: user('OK'), max_tokens: 2, ...kw, ...p }, vendor);
      assert.equal(r.status, 400, `${JSON.stringify(p)}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error.param, Object.keys(p)[0]);
    }
  }
  // without the switch a local user keeps full control
  assert.equal((await chat({ messages: user('OK'), max_tokens: 2, temperature: 1.5, top_p: 0.5 })).status, 200);
});

test('structure through the server: json_schema content parses and validates; required / named tool_choice give a call', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, temperature: { type: 'number' }, tags: { type: 'array', items: { enum: ['hot', 'cold'] }, maxItems: 3 } }, required: ['city', 'temperature'], additionalProperties: false };
  const validate = validator(schema);
  for (const seed of [1, 2, 3]) {
    for (const thinking of [true, false]) {
      const r = await chat({ messages: user('Weather?'), max_tokens: 120, temperature: 1, seed, chat_template_kwargs: { thinking }, response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } } });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const content = r.json.choices[0].message.content as string;
      assert.ok(!/[\n\t]/.test(content), `compact JSON: ${JSON.stringify(content)}`);
      assert.ok(validate(JSON.parse(content)), content);
      assert.equal(r.json.choices[0].finish_reason, 'stop');
    }
  }
  const tools = [fn('get_weather', { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'] }), fn('get_time')];
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_time' } }]) {
    for (const seed of [1, 2]) {
      const r = await chat({ messages: user('Weather in Paris?'), tools, tool_choice, max_tokens: 200, temperature: 1, seed });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const c = r.json.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.ok(c.message.tool_calls.length >= 1);
      if (typeof tool_choice === 'object') assert.equal(c.message.tool_calls[0].function.name, 'get_time');
      for (const call of c.message.tool_calls) JSON.parse(call.function.arguments);
    }
  }
  // too few tokens for the structure: cut off on the shortest way to the end, "length"
  const few = await chat({ messages: user('x'), tools, tool_choice: 'required', max_tokens: 5 });
  assert.equal(few.status, 200);
  assert.equal(few.json.choices[0].finish_reason, 'length');
  // tool_choice none: no call is returned, whatever the model writes
  const none = await chat({ messages: user('Weather in Paris?'), tools, tool_choice: 'none', max_tokens: 40, temperature: 1, seed: 5 });
  assert.equal(none.json.choices[0].message.tool_calls, undefined);
});
