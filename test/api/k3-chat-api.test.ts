// The library's K3 chat: model.chat() renders as the server (and `k3 render`) does for the same
// request, its token events' deltas add up to the returned message, thinking is on by default,
// stop strings end the content only; a session's turn parses its reply the same way.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type ChatDelta, type KimiModel } from '../../src/api/index.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles, k3RequestFromBody } from '../../src/tokenizer/index.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-chat-api-'));
const DEMO = join(tmp, 'demo-k3');
let kimi: KimiModel;

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  kimi = await loadModel(DEMO, { threads: 1, ctx: 2048 });
});
after(async () => {
  await kimi?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const add = { type: 'function' as const, function: { name: 'add', description: 'Add two integers.', parameters: { type: 'object', properties: { a: { type: 'integer' } } } } };

test('renderPrompt (library options) = renderK3 of the request body (the server\'s and k3 render\'s path)', () => {
  const messages = [{ role: 'system' as const, content: 'Be brief.' }, { role: 'user' as const, content: 'What is 2+3?' }];
  const pairs: [Parameters<KimiModel['renderPrompt']>[1], Record<string, unknown>][] = [
    [{}, {}],
    [{ thinking: false }, { chat_template_kwargs: { thinking: false } }],
    [{ thinkingEffort: 'low', tools: [add], toolChoice: 'required' }, { reasoning_effort: 'low', tools: [add], tool_choice: 'required' }],
    [{ responseFormat: { type: 'json_object' } }, { response_format: { type: 'json_object' } }],
    [{ thinkingEffort: null }, { chat_template_kwargs: { thinking_effort: null } }],
  ];
  for (const [opts, body] of pairs) {
    const lib = kimi.renderPrompt(messages, opts);
    const srv = kimi.renderK3(k3RequestFromBody({ messages, ...body }));
    assert.deepEqual(lib.ids, srv.ids, JSON.stringify(body));
    assert.equal(lib.promptTokens, lib.ids.length - 3);
  }
});

/** Deltas as a stream would send them: every token's, then the end's. */
async function chatWithDeltas(opts: Parameters<KimiModel['chat']>[1]) {
  const gen = kimi.chat([{ role: 'user', content: 'Tell me something' }], opts);
  const deltas: ChatDelta[] = [];
  for await (const e of gen) deltas.push(...e.deltas);
  const r = await gen.result;
  deltas.push(...r.lastDeltas);
  const sum = (k: 'content' | 'reasoning_content') => deltas.map((d) => (k in d ? (d as Record<string, string>)[k] : '')).join('');
  return { r, content: sum('content'), reasoning: sum('reasoning_content') };
}

test('chat: deltas add up to the message; thinking on by default; off has no reasoning', async () => {
  for (const seed of [1, 2, 3]) {
    const on = await chatWithDeltas({ maxTokens: 40, temperature: 1, seed });
    assert.equal(on.content, on.r.message.content, `seed ${seed}`);
    assert.equal(on.reasoning, on.r.message.reasoning_content, `seed ${seed}`);
    assert.ok(['stop', 'length', 'tool_calls'].includes(on.r.finishReason));
    const off = await chatWithDeltas({ maxTokens: 40, temperature: 1, seed, thinking: false });
    assert.equal(off.content, off.r.message.content);
    assert.equal(off.r.message.reasoning_content, undefined);
    assert.equal(off.reasoning, '');
  }
});

test('chat: a stop string ends the content before it (finish "stop"), markup never stops a reply', async () => {
  const full = await chatWithDeltas({ maxTokens: 24, thinking: false });
  const text = full.r.message.content;
  assert.ok(text.length >= 8, `content long enough: ${JSON.stringify(text)}`);
  const stop = text.slice(3, 6);
  const cut = await chatWithDeltas({ maxTokens: 24, thinking: false, stop: [stop, '<|close|>'] });
  assert.equal(cut.r.message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.content, cut.r.message.content);
  assert.equal(cut.r.finishReason, 'stop');
  assert.equal(cut.r.stopSequence, stop);
});

test('session: a K3 turn is parsed into reasoning and content, deltas as they come', async () => {
  const s = kimi.session({ maxTokens: 30 });
  const deltas: { reasoning_content?: string; content?: string }[] = [];
  const r = await s.turn('Hello', { onDelta: (d) => deltas.push(d) });
  assert.ok(r.reply, 'a K3 turn has its reply parsed');
  assert.equal(deltas.map((d) => d.reasoning_content ?? '').join(''), r.reply!.reasoning_content);
  assert.equal(deltas.map((d) => d.content ?? '').join(''), r.reply!.content);
  s.close();
});
