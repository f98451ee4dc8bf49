// K2 tool calls through the HTTP server, streamed and whole. Random weights never write a
// tool-call section, so the model is scripted: a real tiny K2 checkpoint and the K2-family test
// tokenizer (real chat render with tools, real stop ids), whose forward passes are replaced by
// logits that put the next id of a fixed reply first. Everything after the logits is the real
// path: the engine loop, greedy sampling, stop handling and text pieces, the server, SSE, and
// the K2 tool-call parser (tool-calls.ts).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KimiModel, loadModel } from '../../src/api/index.js';
import { Engine } from '../../src/api/engine.js';
import type { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { startServer, type RunningServer } from '../../src/server/server.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { E2E_INSTALL, importE2e } from '../e2e-deps.js';
import { ROOT } from '../helpers.js';
import { post, sse } from '../serve-helpers.js';

const REPLY = 'Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>';
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', description: 'The time', parameters: { type: 'object', properties: {} } } },
];
const CALLS = [
  { id: 'functions.get_weather:0', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
  { id: 'functions.get_time:1', type: 'function', function: { name: 'get_time', arguments: '{}' } },
];

/** `model` whose logits always put first the id that continues `script` (then `end`). */
function scripted(model: Model, script: readonly number[], end: number): Model {
  const V = model.config.vocabSize;
  const next = (s: SequenceState): number => {
    const t = s.tokens;
    // the longest script prefix the sequence ends with (none: the reply starts now)
    for (let j = Math.min(script.length, t.length); j > 0; j--) if (script.slice(0, j).every((id, i) => t[t.length - j + i] === id)) return script[j] ?? end;
    return script[0]!;
  };
  const logits = (s: SequenceState): Float32Array => {
    const l = new Float32Array(V);
    l[next(s)] = 50;
    return l;
  };
  const m = Object.create(model) as Model;
  m.forward = async (state, ids) => (state.tokens.push(...ids), logits(state));
  m.forwardBatch = async (states, ids) => states.map((s, i) => (s.tokens.push(...ids[i]!), logits(s)));
  return m;
}

let tmp: string;
let real: KimiModel;
let srv: RunningServer;

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'k3-k2-tools-'));
  const dir = join(tmp, 'k2');
  await synthCheckpoint({ arch: 'k2', out: dir, vocab: 6400, layers: 2 });
  const fx = join(ROOT, '..', 'shared', 'golden', 'tokenizer');
  copyFileSync(join(fx, 'tiktoken.model'), join(dir, 'tiktoken.model'));
  copyFileSync(join(fx, 'k2', 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
  real = await loadModel(dir, { ctx: 512, threads: 1, parallel: 2 });
  const tok = real.tokenizer!;
  const ids = tok.encode(REPLY, { allowSpecial: true });
  const end = tok.specialId('<|im_end|>')!;
  const model = scripted(real.model, ids, end);
  const kimi = new KimiModel(model, tok, new Engine(model, tok, { parallel: 2, chunk: 64, cacheBytes: 0 }));
  assert.equal(kimi.format, 'k2');
  srv = await startServer(kimi, { port: 0, name: 'k2', maxContext: 512 });
});

after(async () => {
  await srv?.close();
  await real?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const request = { model: 'k2', messages: [{ role: 'user', content: 'Weather and time in Paris?' }], tools: TOOLS, max_tokens: 200, temperature: 0 };

test('K2 tool calls, non-streaming: message.tool_calls, content before the section, finish_reason tool_calls', async () => {
  const { status, json } = await post(`${srv.url}/v1/chat/completions`, request);
  assert.equal(status, 200, JSON.stringify(json));
  const c = json.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.role, 'assistant');
  assert.equal(c.message.content, 'Let me check.');
  assert.deepEqual(c.message.tool_calls, CALLS);
  assert.ok(json.usage.completion_tokens > 10);
});

test('K2 tool calls, streaming: content deltas stop at the section, then indexed tool_calls deltas, then finish_reason tool_calls', async () => {
  const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...request, stream: true }) });
  assert.equal(res.status, 200);
  const { chunks, done } = await sse(res);
  assert.ok(done, 'ends with [DONE]');
  const deltas = chunks.map((c) => c.choices[0]?.delta ?? {});
  const content = deltas.map((d) => d.content ?? '').join('');
  assert.equal(content, 'Let me check.', 'no section text leaks into content');
  const calls = deltas.filter((d) => d.tool_calls).flatMap((d) => d.tool_calls);
  assert.deepEqual(calls, CALLS.map((c, index) => ({ index, ...c })));
  const finishes = chunks.map((c) => c.choices[0]?.finish_reason).filter((f) => f);
  assert.deepEqual(finishes, ['tool_calls']);
});

test('K2 tool calls through the openai client, when test/e2e is installed', async (t) => {
  const mod = await importE2e<{ default: new (o: object) => any }>('openai');
  if (!mod) return t.skip(`the openai client is not installed (${E2E_INSTALL})`);
  const client = new mod.default({ baseURL: `${srv.url}/v1`, apiKey: 'none' });
  const r = await client.chat.completions.create(request);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(r.choices[0].message.tool_calls, CALLS);
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const args: string[] = [];
  const names: string[] = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      names[d.index] = (names[d.index] ?? '') + (d.function?.name ?? '');
      args[d.index] = (args[d.index] ?? '') + (d.function?.arguments ?? '');
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.deepEqual(names, ['get_weather', 'get_time']);
  assert.deepEqual(args, ['{"city": "Paris"}', '{}']);
  assert.equal(finish, 'tool_calls');
});

test('logit_bias: checked with a 400 naming the field; -100 bans the id the logits put first', async () => {
  for (const bad of [[], { x: 1 }, { '-1': 1 }, { '6400': 1 }, { '5': 101 }, { '5': 'a' }]) {
    const { status, json } = await post(`${srv.url}/v1/chat/completions`, { ...request, logit_bias: bad });
    assert.equal(status, 400, JSON.stringify(bad));
    assert.equal(json.error.param, 'logit_bias');
  }
  const first = real.tokenizer!.encode(REPLY, { allowSpecial: true })[0]!;
  const { json } = await post(`${srv.url}/v1/chat/completions`, { ...request, max_tokens: 1, logit_bias: { [first]: -100 } });
  assert.notEqual(json.choices[0].message.content, 'Let');
  const plain = await post(`${srv.url}/v1/chat/completions`, { ...request, max_tokens: 1 });
  assert.equal(plain.json.choices[0].message.content, real.tokenizer!.decode([first]));
});
