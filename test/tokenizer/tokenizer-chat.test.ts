// Chat formats: K2 "im" envelope (Jinja template from tokenizer_config.json and the built-in
// fallback) against chat.jsonl; K3 rendering options (goldens: k3-render.test.ts); stop tokens.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Tokenizer, renderChat, stopTokenIds, type ChatMessage } from '../../src/tokenizer/index.js';
import { UserError } from '../../src/util/errors.js';
import { TOKENIZER, readFixture, readJsonl } from '../helpers.js';

const F = TOKENIZER;
const read = (f: string): string => readFixture(F, f);
const jsonl = <T>(f: string): T[] => readJsonl<T>(F, f);

const MODEL = read('tiktoken.model');
const k2 = new Tokenizer(MODEL, read('k2/tokenizer_config.json'));
const k3 = new Tokenizer(MODEL, read('k3/tokenizer_config.json'));

interface ChatCase {
  name: string;
  messages: ChatMessage[];
  tools?: unknown[];
  add_generation_prompt: boolean;
  rendered: string;
  ids: number[];
}

const chats = jsonl<ChatCase>('chat.jsonl');

test('chat.jsonl: K2 template (Jinja) renders and ids identical', () => {
  assert.equal(chats.length, 36);
  for (const c of chats) {
    const r = renderChat(k2, c.messages, { addGenerationPrompt: c.add_generation_prompt, tools: c.tools });
    assert.equal(r.text, c.rendered, `${c.name} gen=${c.add_generation_prompt}`);
    assert.deepEqual(r.ids, c.ids, `${c.name} gen=${c.add_generation_prompt}`);
  }
});

test('chat.jsonl: built-in K2 envelope (no template) identical too', () => {
  const cfg = JSON.parse(read('k2/tokenizer_config.json')) as Record<string, unknown>;
  delete cfg.chat_template;
  const bare = new Tokenizer(MODEL, cfg);
  assert.equal(bare.chatTemplate, undefined);
  for (const c of chats) {
    const r = renderChat(bare, c.messages, { addGenerationPrompt: c.add_generation_prompt, tools: c.tools });
    assert.equal(r.text, c.rendered, `${c.name} gen=${c.add_generation_prompt}`);
    assert.deepEqual(r.ids, c.ids, `${c.name} gen=${c.add_generation_prompt}`);
    const forced = renderChat(k2, c.messages, { addGenerationPrompt: c.add_generation_prompt, tools: c.tools, ignoreTemplate: true });
    assert.equal(forced.text, c.rendered);
  }
});

test('K2: tools are deep-sorted before rendering (as the reference class does)', () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} }, description: 'd' } }];
  const r = renderChat(k2, [{ role: 'user', content: 'x' }], { tools });
  assert.ok(r.text.startsWith('<|im_system|>tool_declare<|im_middle|>[{"function":{"description":"d","name":"f","parameters":{"properties":{},"type":"object"}},"type":"function"}]<|im_end|>'));
  const bare = renderChat(k2, [{ role: 'user', content: 'x' }], { tools, ignoreTemplate: true });
  assert.equal(bare.text, r.text);
});

// K3 XTML itself is tested against the release renderer's goldens in k3-render.test.ts
// (k3/xtml_examples.jsonl is superseded by ../shared/golden/k3-chat, K3-CHAT.md §9).
test('K3: format follows the tokenizer; generation prompt on/off; thinking prefix; tools', () => {
  const msgs: ChatMessage[] = [{ role: 'user', content: 'hi' }];
  const off = renderChat(k3, msgs, { thinking: false });
  assert.equal(off.text, '<|open|>message role="user"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>');
  const on = renderChat(k3, msgs, { addGenerationPrompt: true, thinking: false });
  assert.equal(on.text, off.text + '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>');
  assert.deepEqual(on.ids.slice(0, off.ids.length), off.ids);
  assert.deepEqual(on.ids.slice(off.ids.length, off.ids.length + 1), [6147]);
  const think = renderChat(k3, msgs, { addGenerationPrompt: true, thinking: true });
  assert.ok(think.text.endsWith('<|open|>think<|sep|>'));
  assert.ok(think.text.startsWith('<|open|>message role="system" type="thinking-effort"<|sep|>'));
  const tool = renderChat(k3, [{ role: 'tool', name: 'f', content: '42' }], { thinking: false });
  assert.equal(tool.text, '<|open|>message role="tool" tool="f" index="1"<|sep|>42<|close|>message<|sep|><|end_of_msg|>');
  assert.ok(renderChat(k3, msgs, { tools: [{}], thinking: false }).text.startsWith('<|open|>message role="system" type="tool-declare"<|sep|>'));
  assert.throws(() => renderChat(k3, [{ role: 'tool', content: '42' }]), UserError);
  // Wrong format for the tokenizer's special table: a clear error, not garbage.
  assert.throws(() => renderChat(k3, msgs, { format: 'k2' }), /im_system/);
  assert.throws(() => renderChat(k2, msgs, { format: 'k3' }), /<\|open\|>/);
});

test('K2: generation prompt appends exactly the assistant prefix', () => {
  const msgs: ChatMessage[] = [{ role: 'user', content: 'Hello' }];
  const a = renderChat(k2, msgs);
  const b = renderChat(k2, msgs, { addGenerationPrompt: true });
  assert.equal(b.text, a.text + '<|im_assistant|>assistant<|im_middle|>');
  assert.deepEqual(b.ids.slice(a.ids.length), [6148, ...k2.encode('assistant'), 6161]);
});

test('stop tokens per family and model eos', () => {
  assert.deepEqual(stopTokenIds(k3), [6145, 6146]);
  assert.deepEqual(stopTokenIds(k3, 6146), [6145, 6146]);
  assert.deepEqual(stopTokenIds(k2), [6145, 6146, 6153]);
  assert.deepEqual(stopTokenIds(k2, [6146, 7000]), [6145, 6146, 6153, 7000]);
});
