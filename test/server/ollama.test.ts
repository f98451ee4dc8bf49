// Ollama's requests as the chat turn's OpenAI body (src/server/ollama-request.ts): tool results
// found by tool_name, think, format and options mapped, each bad field a 400 naming it; and, with
// no client library, the NDJSON stream /api/chat sends by default on the shipped trained demo.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TRAINED_DEMO_DIR, sumQuestion } from '../../src/cli/demo-sums.js';
import { ApiError } from '../../src/server/errors.js';
import { chatBody, generateRequest, requestedModel } from '../../src/server/ollama-request.js';
import type { Served } from '../../src/server/served.js';
import { post, startServe } from '../serve-helpers.js';

type Any = any;
const served = { name: 'demo', maxContext: 512, kimi: { vocabSize: 1024 } } as unknown as Served;
const call = (name: string, args: object) => ({ function: { name, arguments: args } });

/** The 400 (or other status) a request gets, and its message. */
function refused(f: () => unknown): { status: number; message: string } {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return { status: e.status, message: e.message };
  }
  assert.fail('accepted');
}

test('ollama request: tool results answer their calls by tool_name (or tool_call_id), in order; arguments as JSON', () => {
  const { body } = chatBody(served, {
    messages: [
      { role: 'user', content: 'sums' },
      { role: 'assistant', content: '', thinking: 'two adds', tool_calls: [call('add', { a: 1, b: 2 }), call('mul', { a: 3 }), { id: 'mine', function: { name: 'add', arguments: { a: 5 } } }] },
      { role: 'tool', tool_name: 'mul', content: '3' },
      { role: 'tool', tool_name: 'add', content: '3' },
      { role: 'tool', tool_call_id: 'mine', content: '5' },
      { role: 'tool', tool_name: 'sub', content: '?' },
    ],
  });
  const m = body.messages as Any[];
  assert.deepEqual(m[1], {
    role: 'assistant',
    content: '',
    reasoning_content: 'two adds',
    tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":1,"b":2}' } },
      { id: 'call_2', type: 'function', function: { name: 'mul', arguments: '{"a":3}' } },
      { id: 'mine', type: 'function', function: { name: 'add', arguments: '{"a":5}' } },
    ],
  });
  assert.deepEqual(m.slice(2).map((x) => [x.tool_call_id, x.name]), [['call_2', undefined], ['call_1', undefined], ['mine', undefined], ['sub', 'sub']]);
});

test('ollama request: think, format and options as the OpenAI body and the extra sampling', () => {
  const { body, sampling } = chatBody(served, {
    messages: [{ role: 'user', content: 'hi' }],
    think: 'low',
    format: 'json',
    keep_alive: '5m',
    options: { temperature: 0.2, top_p: 0.9, top_k: 40, min_p: 0.05, seed: -1, num_predict: -1, num_ctx: 4096, repeat_penalty: 1.1, stop: ['a', '', 'b', 'c', 'd', 'e'], num_gpu: 99, mirostat: 0 },
  });
  assert.deepEqual(body, { temperature: 0.2, top_p: 0.9, chat_template_kwargs: { thinking: true, thinking_effort: 'low' }, response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'hi' }] });
  assert.deepEqual(sampling, { repetitionPenalty: 1.1, penaltyLastN: 64, topK: 40, minP: 0.05, stop: ['a', 'b', 'c', 'd', 'e'] });
  const schema = { type: 'object', properties: { x: { type: 'integer' } } };
  const b2 = chatBody(served, { messages: [], think: false, format: schema, options: { seed: 3, num_predict: 9, repeat_last_n: 0, presence_penalty: 1 } });
  assert.deepEqual([b2.body.seed, b2.body.max_tokens, b2.body.presence_penalty, b2.body.chat_template_kwargs, b2.body.response_format, b2.sampling], [3, 9, undefined, { thinking: false }, { type: 'json_schema', json_schema: { name: 'format', schema, strict: true } }, {}]);
});

test('ollama request: bad fields are a 400 naming them; another model a 404', () => {
  const hi = [{ role: 'user', content: 'hi' }];
  const cases: [object, RegExp][] = [
    [{}, /^messages: /],
    [{ messages: hi, think: 'medium' }, /^think: .*no "medium"/],
    [{ messages: hi, think: 'lots' }, /^think: /],
    [{ messages: hi, format: 'yaml' }, /^format: /],
    [{ messages: hi, options: { temperature: 9 } }, /^options\.temperature: must be in/],
    [{ messages: hi, options: { num_predict: 0 } }, /^options\.num_predict: /],
    [{ messages: hi, options: { stop: [1] } }, /^options\.stop: /],
    [{ messages: hi, options: 'fast' }, /^options: /],
    [{ messages: hi, stream: 'yes' }, /^stream: /],
    [{ messages: [{ role: 'user', content: 'hi', images: ['aGk='] }] }, /^messages\[0\]\.images: /],
    [{ messages: [{ role: 'user', content: ['hi'] }] }, /^messages\[0\]\.content: must be a string/],
    [{ messages: [{ role: 'assistant', content: '', tool_calls: [{ function: { name: 'add', arguments: [1] } }] }] }, /^messages\[0\]\.tool_calls\[0\]\.function\.arguments: /],
    [{ messages: hi, logprobs: true }, /^logprobs: /],
  ];
  for (const [b, re] of cases) {
    const r = refused(() => chatBody(served, b as Any));
    assert.equal(r.status, 400, JSON.stringify(b));
    assert.match(r.message, re, JSON.stringify(b));
  }
  const gen: [object, RegExp][] = [
    [{ prompt: 'x', suffix: 'y' }, /^suffix: /],
    [{ prompt: 'x', template: '{{ .Prompt }}' }, /^template: /],
    [{ prompt: 'x', images: ['aGk='] }, /^images: /],
    [{ prompt: 'x', raw: true, system: 'be brief' }, /^system: .*raw/],
    [{ prompt: 'x', context: [1, 2] }, /^context: .*raw: true/],
    [{ prompt: 'x', raw: true, context: [5000] }, /^context: /],
  ];
  for (const [b, re] of gen) assert.match(refused(() => generateRequest(served, b as Any)).message, re, JSON.stringify(b));
  assert.deepEqual(generateRequest(served, { prompt: 'q', system: 's', raw: false }).body!.messages, [{ role: 'system', content: 's' }, { role: 'user', content: 'q' }]);
  assert.deepEqual(generateRequest(served, { prompt: 'q', raw: true, context: [1, 2] }).context, [1, 2]);
  assert.equal(requestedModel(served, { model: 'demo:latest' }), 'demo:latest');
  assert.equal(requestedModel(served, { name: 'demo' }), 'demo');
  assert.equal(refused(() => requestedModel(served, { model: 'llama3' })).status, 404);
  assert.match(refused(() => requestedModel(served, {})).message, /^model: is required/);
});

test('ollama serve: /api/chat streams NDJSON by default; errors are {"error"}; HEAD / answers', async () => {
  const srv = await startServe(TRAINED_DEMO_DIR);
  try {
    const r = await fetch(`${srv.url}/api/chat`, { method: 'POST', body: JSON.stringify({ model: 'demo-k3-trained', messages: [{ role: 'user', content: sumQuestion(27, 58) }], options: { temperature: 0, num_predict: 40 } }) });
    assert.equal(r.headers.get('content-type'), 'application/x-ndjson');
    const lines = (await r.text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.ok(lines.slice(0, -1).every((l) => l.done === false && l.message.role === 'assistant'));
    const last = lines.at(-1);
    assert.deepEqual([last.done, last.done_reason, last.eval_count], [true, 'stop', 23]);
    assert.deepEqual([lines.map((l) => l.message.thinking ?? '').join(''), lines.map((l) => l.message.content).join('')], ['27+58=85', '85']);
    const bad = await post(`${srv.url}/api/generate`, '[1]');
    assert.deepEqual([bad.status, Object.keys(bad.json)], [400, ['error']]);
    assert.equal((await post(`${srv.url}/api/nowhere`, {})).json.error, 'no route POST /api/nowhere');
    assert.equal((await fetch(`${srv.url}/`, { method: 'HEAD' })).status, 200);
    assert.equal(((await (await fetch(`${srv.url}/api/version`)).json()) as Any).version.split('.').length, 3);
  } finally {
    await srv.stop();
  }
});
