// The Anthropic Messages front (src/server/anthropic*.ts) without a model: the request's
// translation to the OpenAI chat body and its 400s, the reply as a Message and as events, and
// the official `@anthropic-ai/sdk` client against the route over a scripted chat turn (the tool
// loop streamed and not, with identical messages; errors in the SDK's classes; count_tokens).
// The same client against `k3 serve` on a model is test/server/anthropic-serve.test.ts.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { toChatBody } from '../../src/server/anthropic-request.js';
import { MessageEvents, anthropicMessage, toolInput } from '../../src/server/anthropic-reply.js';
import { messagesRoute, sendAnthropicError } from '../../src/server/anthropic.js';
import type { PreparedTurn, TurnDelta, TurnOutcome, TurnToolCall } from '../../src/server/chat-turn.js';
import { ApiError } from '../../src/server/errors.js';
import type { Served } from '../../src/server/served.js';
import { E2E_INSTALL, importE2e } from '../e2e-deps.js';

type Any = any;
type Body = Record<string, unknown>;
const served = { name: 'k3-test', maxContext: 512 } as Served;
const base = { model: 'k3-test', max_tokens: 32 };
const chat = (b: Body, forCount = false) => toChatBody(served, { ...base, ...b }, forCount);

/** The 400 (or other status) toChatBody throws, as [status, message]. */
function refusal(b: Body): [number, string] {
  try {
    chat(b);
  } catch (e) {
    assert.ok(e instanceof ApiError);
    return [e.status, e.message];
  }
  assert.fail(`accepted ${JSON.stringify(b)}`);
}

const ADD = { name: 'add', description: 'Add two integers.', input_schema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } };

test('request: system, string and block content, sampling fields, stop_sequences', () => {
  const b = chat({ system: [{ type: 'text', text: 'Be ' }, { type: 'text', text: 'brief.' }], messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: [{ type: 'text', text: 'Hello' }] }, { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }], temperature: 0.5, top_p: 0.9, stop_sequences: ['END'], metadata: { user_id: 'u' }, stream: true });
  assert.deepEqual(b, {
    model: 'k3-test',
    max_tokens: 32,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }, { role: 'user', content: 'ab' }],
    stop: ['END'],
    temperature: 0.5,
    top_p: 0.9,
  });
  assert.equal(chat({ messages: [{ role: 'user', content: 'x' }], temperature: 0.7, top_k: 1 }).temperature, 0, 'top_k 1 is greedy');
  assert.equal(chat({ messages: [{ role: 'user', content: 'x' }], top_k: 40 }).temperature, undefined, 'other top_k: no effect');
  assert.equal(chat({ messages: [{ role: 'user', content: 'x' }], max_tokens: undefined }, true).max_tokens, undefined, 'count_tokens needs no max_tokens');
});

test('request: tools, tool_choice and thinking map to their OpenAI / K3 forms; absent thinking stays absent', () => {
  const m = [{ role: 'user', content: '2+3?' }];
  const b = chat({ messages: m, tools: [ADD], tool_choice: { type: 'any' } });
  assert.deepEqual(b.tools, [{ type: 'function', function: { name: 'add', description: 'Add two integers.', parameters: ADD.input_schema } }]);
  assert.equal(b.tool_choice, 'required');
  assert.equal(chat({ messages: m, tools: [ADD], tool_choice: { type: 'auto' } }).tool_choice, 'auto');
  assert.equal(chat({ messages: m, tools: [ADD], tool_choice: { type: 'none' } }).tool_choice, 'none');
  const one = chat({ messages: m, tools: [ADD], tool_choice: { type: 'tool', name: 'add', disable_parallel_tool_use: true } });
  assert.deepEqual([one.tool_choice, one.parallel_tool_calls], [{ type: 'function', function: { name: 'add' } }, false]);
  assert.equal(chat({ messages: m }).chat_template_kwargs, undefined);
  assert.deepEqual(chat({ messages: m, thinking: { type: 'enabled', budget_tokens: 1024 } }).chat_template_kwargs, { thinking: true });
  assert.deepEqual(chat({ messages: m, thinking: { type: 'adaptive' } }).chat_template_kwargs, { thinking: true });
  assert.deepEqual(chat({ messages: m, thinking: { type: 'disabled' } }).chat_template_kwargs, { thinking: false });
});

test('request: a tool loop history becomes assistant tool_calls and tool messages, ids kept', () => {
  const b = chat({
    tools: [ADD],
    messages: [
      { role: 'user', content: 'What is 2+3 and 4+5?' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'Two sums.', signature: '' },
          { type: 'redacted_thinking', data: 'xx' },
          { type: 'text', text: 'Adding.' },
          { type: 'tool_use', id: 'call_1', name: 'add', input: { a: 2, b: 3 } },
          { type: 'tool_use', id: 'toolu_2', name: 'add', input: { a: 4, b: 5 } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '5' }, { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'overflow' }], is_error: true }, { type: 'text', text: 'Go on.' }] },
    ],
  });
  assert.deepEqual(b.messages, [
    { role: 'user', content: 'What is 2+3 and 4+5?' },
    {
      role: 'assistant',
      content: 'Adding.',
      reasoning_content: 'Two sums.',
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":3}' } },
        { id: 'toolu_2', type: 'function', function: { name: 'add', arguments: '{"a":4,"b":5}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '5' },
    { role: 'tool', tool_call_id: 'toolu_2', content: 'Error: overflow' },
    { role: 'user', content: 'Go on.' },
  ]);
  const only = chat({ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'add', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't' }] }] });
  assert.deepEqual((only.messages as Body[])[1], { role: 'assistant', content: null, tool_calls: [{ id: 't', type: 'function', function: { name: 'add', arguments: '{}' } }] });
  assert.deepEqual((only.messages as Body[])[2], { role: 'tool', tool_call_id: 't', content: '' });
});

test('request: each bad field is a 400 naming it (404 for another model)', () => {
  const u = [{ role: 'user', content: 'x' }];
  const cases: [Body, RegExp][] = [
    [{ messages: u, max_tokens: undefined }, /^max_tokens: is required/],
    [{ messages: u, max_tokens: 0 }, /^max_tokens: must be in/],
    [{ messages: u, max_tokens: 2.5 }, /^max_tokens: must be an integer/],
    [{ messages: [] }, /^messages: must be a non-empty array/],
    [{ messages: [{ role: 'tool', content: 'x' }] }, /^messages\.0\.role: must be "user" or "assistant"/],
    [{ messages: [{ role: 'user', content: 7 }] }, /^messages\.0\.content: must be a string or an array/],
    [{ messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, /^messages\.0\.content\.0\.type: "image" blocks are not supported/],
    [{ messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'a', name: 'add', input: {} }] }] }, /^messages\.0\.content\.0\.type: a user message holds text and tool_result/],
    [{ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'nope', content: '1' }] }] }, /^messages\.0\.content\.0\.tool_use_id: "nope" answers no tool_use block/],
    [{ messages: [...u, { role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'add', input: [] }] }] }, /^messages\.1\.content\.0\.input: must be an object/],
    [{ messages: [...u, { role: 'assistant', content: [{ type: 'tool_use', name: 'add', input: {} }] }] }, /^messages\.1\.content\.0\.id: is required/],
    [{ messages: u, system: [{ type: 'image' }] }, /^system\.0\.type: "image" blocks are not supported/],
    [{ messages: u, tools: [{ name: 'a b', input_schema: { type: 'object' } }] }, /^tools\.0\.name: must start with a letter/],
    [{ messages: u, tools: [{ name: '1add', input_schema: { type: 'object' } }] }, /^tools\.0\.name: must start with a letter/],
    [{ messages: u, tools: [{ name: 'add' }] }, /^tools\.0\.input_schema: must be a JSON schema object/],
    [{ messages: u, tools: [ADD, ADD] }, /^tools\.1\.name: "add" is declared twice/],
    [{ messages: u, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /^tools\.0\.type: server tools/],
    [{ messages: u, tools: [ADD], tool_choice: { type: 'tool', name: 'mul' } }, /^tool_choice\.name: no tool named "mul"/],
    [{ messages: u, tools: [ADD], tool_choice: { type: 'sometimes' } }, /^tool_choice\.type: must be/],
    [{ messages: u, tool_choice: { type: 'any' } }, /^tool_choice: type "any" needs tools/],
    [{ messages: u, thinking: { type: 'enabled' } }, /^thinking\.budget_tokens: is required/],
    [{ messages: u, thinking: { type: 'enabled', budget_tokens: 0.5 } }, /^thinking\.budget_tokens: must be an integer/],
    [{ messages: u, thinking: { type: 'on' } }, /^thinking\.type: must be/],
    [{ messages: u, temperature: 1.5 }, /^temperature: must be in \[0, 1\]/],
    [{ messages: u, top_k: 0 }, /^top_k: must be in/],
    [{ messages: u, stop_sequences: 'END' }, /^stop_sequences: must be an array/],
    [{ messages: u, stop_sequences: [''] }, /^stop_sequences\.0: must not be empty/],
    [{ messages: u, stream: 'yes' }, /^stream: must be a boolean/],
    [{ messages: u, model: undefined }, /^model: is required/],
    [{ messages: u, model: 3 }, /^model: must be a string, got 3/],
  ];
  for (const [b, want] of cases) {
    const [status, message] = refusal(b);
    assert.equal(status, 400, message);
    assert.match(message, want);
  }
  assert.deepEqual(refusal({ messages: u, model: 'claude-sonnet-4-5' }), [404, 'model: claude-sonnet-4-5 (this server serves k3-test)']);
});

/** An outcome as chat-turn resolves it. */
function outcome(message: TurnOutcome['message'], finishReason: TurnOutcome['finishReason'], stopSequence: string | null = null, completion = 7): TurnOutcome {
  return { message, finishReason, stopSequence, usage: { prompt_tokens: 20, completion_tokens: completion, total_tokens: 20 + completion, prompt_tokens_details: { cached_tokens: 12 } }, result: {} as TurnOutcome['result'] };
}
const call = (id: string, args: string): TurnToolCall => ({ id, type: 'function', function: { name: 'add', arguments: args } });

test('reply: blocks, stop reasons, usage and tool input', () => {
  const m = anthropicMessage('msg_1', 'k3-test', outcome({ role: 'assistant', content: 'Adding.', reasoning_content: 'Think.', tool_calls: [call('call_9', '{"a":2,"b":3}')] }, 'tool_calls'));
  assert.deepEqual(m, {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'k3-test',
    container: null,
    stop_details: null,
    content: [{ type: 'thinking', thinking: 'Think.', signature: '' }, { type: 'text', text: 'Adding.', citations: null }, { type: 'tool_use', id: 'call_9', name: 'add', input: { a: 2, b: 3 } }],
    stop_reason: 'tool_use',
    stop_sequence: null,
    usage: { input_tokens: 8, output_tokens: 7, cache_read_input_tokens: 12, cache_creation_input_tokens: 0 },
  });
  const stop = (o: TurnOutcome) => anthropicMessage('m', 'k', o);
  assert.equal(stop(outcome({ role: 'assistant', content: 'x' }, 'length')).stop_reason, 'max_tokens');
  assert.deepEqual([stop(outcome({ role: 'assistant', content: 'x' }, 'stop', 'END')).stop_reason, stop(outcome({ role: 'assistant', content: 'x' }, 'stop', 'END')).stop_sequence], ['stop_sequence', 'END']);
  assert.equal(stop(outcome({ role: 'assistant', content: 'x' }, 'stop')).stop_reason, 'end_turn');
  assert.deepEqual(stop(outcome({ role: 'assistant', content: '', reasoning_content: '' }, 'stop')).content, [], 'empty parts make no blocks');
  assert.deepEqual(toolInput(''), {});
  assert.deepEqual(toolInput('[1]'), { arguments: '[1]' });
  assert.deepEqual(toolInput('{"a":'), { arguments: '{"a":' });
});

test('reply: the event stream opens and closes one block per part, in order', () => {
  const events: [string, Body][] = [];
  const ev = new MessageEvents((t, d) => events.push([t, d]));
  ev.start('msg_1', 'k3-test', 20);
  const deltas: TurnDelta[] = [{ reasoning_content: 'Th' }, { reasoning_content: 'ink.' }, { content: '' }, { content: 'Add' }, { content: 'ing.' }, { tool_call: { ...call('c1', '{"a":2,"b":3}'), index: 0 } }, { tool_call: { ...call('c2', '{}'), index: 1 } }];
  for (const d of deltas) ev.delta(d);
  ev.finish(outcome({ role: 'assistant', content: 'Adding.', reasoning_content: 'Think.', tool_calls: [call('c1', '{"a":2,"b":3}'), call('c2', '{}')] }, 'tool_calls'));
  const brief = events.map(([t, d]) => `${t}${d.index !== undefined ? `:${String(d.index)}` : ''}${t === 'content_block_start' ? `:${String((d.content_block as Body).type)}` : ''}`);
  assert.deepEqual(brief, [
    'message_start', 'ping',
    'content_block_start:0:thinking', 'content_block_delta:0', 'content_block_delta:0', 'content_block_stop:0',
    'content_block_start:1:text', 'content_block_delta:1', 'content_block_delta:1', 'content_block_stop:1',
    'content_block_start:2:tool_use', 'content_block_delta:2', 'content_block_stop:2',
    'content_block_start:3:tool_use', 'content_block_delta:3', 'content_block_stop:3',
    'message_delta', 'message_stop',
  ]);
  assert.deepEqual(events[11]![1].delta, { type: 'input_json_delta', partial_json: '{"a":2,"b":3}' });
  assert.deepEqual(events.at(-2)![1], { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null, stop_details: null }, usage: { input_tokens: 8, output_tokens: 7, cache_read_input_tokens: 12, cache_creation_input_tokens: 0 } });
});

// ---- the SDK against the route, over a scripted turn ----

const mod = await importE2e<{ default: Any }>('@anthropic-ai/sdk');
const skip = mod ? false : `the Anthropic client is not installed (${E2E_INSTALL})`;
if (!mod) console.log(`skipped: ${skip}`);

/**
 * A chat turn that plays the add tool loop: asked with tools, it calls add(2, 3) under a fresh
 * id; given a tool message, it answers with the result; otherwise it echoes the last user text,
 * cut at max_tokens characters or at a stop string. "fail" fails mid-turn.
 */
function scriptedTurn(bodies: Body[]) {
  let calls = 0;
  return (_s: Served, body: Body): PreparedTurn => {
    bodies.push(body);
    const messages = body.messages as Body[];
    const last = messages.at(-1)!;
    return {
      promptTokens: JSON.stringify(messages).length,
      options: {} as PreparedTurn['options'],
      async run(_signal, onDelta) {
        const usage = (n: number) => ({ prompt_tokens: this.promptTokens, completion_tokens: n, total_tokens: this.promptTokens + n, prompt_tokens_details: { cached_tokens: 0 } });
        const done = (message: TurnOutcome['message'], finishReason: TurnOutcome['finishReason'], stopSequence: string | null = null): TurnOutcome => ({ message, finishReason, stopSequence, usage: usage(5), result: {} as TurnOutcome['result'] });
        if (last.role === 'tool') {
          onDelta?.({ reasoning_content: 'I have the sum.' });
          onDelta?.({ content: `It is ${String(last.content)}.` });
          return done({ role: 'assistant', content: `It is ${String(last.content)}.`, reasoning_content: 'I have the sum.' }, 'stop');
        }
        if (body.tools) {
          const c = { id: `call_${++calls}`, type: 'function' as const, function: { name: 'add', arguments: '{"a":2,"b":3}' } };
          onDelta?.({ reasoning_content: 'Use add.' });
          onDelta?.({ content: 'Adding.' });
          onDelta?.({ tool_call: { ...c, index: 0 } });
          return done({ role: 'assistant', content: 'Adding.', reasoning_content: 'Use add.', tool_calls: [c] }, 'tool_calls');
        }
        let text = String(last.content);
        if (text === 'fail') {
          onDelta?.({ content: 'fa' });
          throw new ApiError(500, 'reading the weights failed: EIO');
        }
        const stop = ((body.stop ?? []) as string[]).find((s) => text.includes(s)) ?? null;
        if (stop !== null) text = text.slice(0, text.indexOf(stop));
        const cut = text.length > (body.max_tokens as number);
        if (cut) text = text.slice(0, body.max_tokens as number);
        for (const ch of text) onDelta?.({ content: ch });
        return done({ role: 'assistant', content: text }, cut ? 'length' : 'stop', cut ? null : stop);
      },
    };
  };
}

const bodies: Body[] = [];
let server: http.Server | null = null;
let full = false;
let client: Any;

before(async () => {
  if (!mod) return;
  const ctx = { served, apiKey: 'sk-ant-test', bodyLimit: 1 << 16, queueFull: () => full, prepare: scriptedTurn(bodies) };
  server = http.createServer((req, res) => {
    const route = `${req.method} ${new URL(req.url!, 'http://x').pathname.replace(/\/+$/, '')}`;
    messagesRoute(route, req, res, ctx).catch((e: unknown) => (res.headersSent ? res.end() : sendAnthropicError(res, e as ApiError)));
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  client = new mod.default({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: 'sk-ant-test', maxRetries: 0 });
});
after(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve(null)));
});

/** The message the SDK accumulates from a stream, and the event types it saw. */
async function streamed(params: Body): Promise<{ message: Any; types: string[] }> {
  const s = client.messages.stream(params);
  const types: string[] = [];
  s.on('streamEvent', (e: Any) => types.push(e.type));
  return { message: await s.finalMessage(), types };
}

/** A message without what differs between two runs of one turn: its id and the tool_use ids (and
 *  the SDK's own parsed_output, which its stream helper adds). */
function withoutId({ id, parsed_output: _, ...m }: Any): Any {
  assert.match(id, /^msg_[0-9a-f]{32}$/);
  return { ...m, content: m.content.map((b: Any) => (b.type === 'tool_use' ? { ...b, id: 'toolu' } : b)) };
}

test('SDK: the add tool loop, streamed and not, gives the same messages and round-trips the tool_use id', { skip }, async () => {
  const ask = { model: 'k3-test', max_tokens: 64, tools: [ADD], messages: [{ role: 'user', content: 'What is 2+3?' }] };
  const first = await client.messages.create(ask);
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b: Any) => b.type === 'tool_use');
  assert.deepEqual({ name: use.name, input: use.input }, { name: 'add', input: { a: 2, b: 3 } });
  const s1 = await streamed(ask);
  assert.deepEqual(withoutId(s1.message), withoutId(first));
  assert.equal(s1.types.filter((t) => t === 'content_block_start').length, 3);

  const answer = { ...ask, messages: [...ask.messages, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: String(use.input.a + use.input.b) }] }] };
  const second = await client.messages.create(answer);
  const sent = bodies.at(-1)!.messages as Body[];
  assert.equal((sent.at(-2)!.tool_calls as Body[])[0]!.id, use.id, 'the tool_use id goes back as the tool call id');
  assert.deepEqual(sent.at(-1), { role: 'tool', tool_call_id: use.id, content: '5' });
  assert.equal(second.stop_reason, 'end_turn');
  assert.deepEqual(second.content, [{ type: 'thinking', thinking: 'I have the sum.', signature: '' }, { type: 'text', text: 'It is 5.', citations: null }]);
  assert.deepEqual(withoutId((await streamed(answer)).message), withoutId(second));
});

test('SDK: system, stop_sequences and max_tokens set the stop reason, the same streamed', { skip }, async () => {
  const ask = (content: string, more: Body = {}) => ({ model: 'k3-test', max_tokens: 8, system: 'Echo.', messages: [{ role: 'user', content }], ...more });
  for (const [params, reason, seq, text] of [
    [ask('short'), 'end_turn', null, 'short'],
    [ask('a much longer line'), 'max_tokens', null, 'a much l'],
    [ask('one END two', { stop_sequences: ['END'] }), 'stop_sequence', 'END', 'one '],
  ] as const) {
    const r = await client.messages.create(params);
    assert.deepEqual([r.stop_reason, r.stop_sequence, r.content[0]?.text], [reason, seq, text]);
    assert.deepEqual(withoutId((await streamed(params)).message), withoutId(r));
  }
  assert.equal((bodies.at(-1)!.messages as Body[])[0]!.content, 'Echo.');
});

test('SDK: errors arrive as the SDK\'s classes with Anthropic\'s types', { skip }, async () => {
  const sdk = mod!.default;
  const bad = (p: Body) => client.messages.create({ model: 'k3-test', max_tokens: 8, messages: [{ role: 'user', content: 'x' }], ...p });
  await assert.rejects(bad({ temperature: 3 }), (e: Any) => e instanceof sdk.BadRequestError && e.type === 'invalid_request_error' && /^temperature: must be in/.test(e.apiMessage));
  await assert.rejects(bad({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }] }] }), (e: Any) => e instanceof sdk.BadRequestError && /image/.test(e.apiMessage));
  await assert.rejects(bad({ model: 'another-model' }), (e: Any) => e instanceof sdk.NotFoundError && e.type === 'not_found_error');
  const wrongKey = new sdk({ baseURL: client.baseURL, apiKey: 'sk-wrong', maxRetries: 0 });
  await assert.rejects(wrongKey.messages.create({ model: 'k3-test', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (e: Any) => e instanceof sdk.AuthenticationError && e.type === 'authentication_error');
  const bearer = new sdk({ baseURL: client.baseURL, authToken: 'sk-ant-test', maxRetries: 0 });
  assert.equal((await bearer.messages.create({ model: 'k3-test', max_tokens: 8, messages: [{ role: 'user', content: 'ok' }] })).content[0].text, 'ok', 'Authorization: Bearer works too');
  full = true;
  await assert.rejects(bad({}), (e: Any) => e instanceof sdk.OverloadedError && e.status === 529 && e.type === 'overloaded_error');
  full = false;
  await assert.rejects(streamed({ model: 'k3-test', max_tokens: 8, messages: [{ role: 'user', content: 'fail' }] }), (e: Any) => e instanceof sdk.APIError && e.type === 'api_error' && /EIO/.test(e.message));
  const raw = await fetch(`${client.baseURL}/v1/messages/batches`, { method: 'POST', headers: { 'x-api-key': 'sk-ant-test' } });
  assert.deepEqual([raw.status, await raw.json()], [404, { type: 'error', error: { type: 'not_found_error', message: 'no route POST /v1/messages/batches' } }]);
});

test('SDK: count_tokens answers the prompt tokens of the rendered turn', { skip }, async () => {
  const messages = [{ role: 'user', content: 'How many?' }];
  const r = await client.messages.countTokens({ model: 'k3-test', messages });
  assert.equal(r.input_tokens, JSON.stringify(messages).length);
});
