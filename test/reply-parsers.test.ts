// Reply parsers of the API: K3 thinking split from the answer (reasoning.ts) however the text is
// cut into pieces, and K2 tool-call sections (tool-calls.ts), streamed and whole.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReasoningSplitter } from '../src/api/reasoning.js';
import { ToolSectionHold, parseK2ToolCalls } from '../src/api/tool-calls.js';
import { assistantMessage } from '../src/api/reply.js';

const K3_REPLY = 'Let me think <about> it.<|close|>think<|sep|><|open|>response<|sep|>The answer is 4.<|close|>response<|sep|>';

test('K3: reasoning and content apart, the same for every way of cutting the text into pieces', () => {
  const whole = new ReasoningSplitter(true).push(K3_REPLY, true);
  assert.deepEqual(whole, { reasoning: 'Let me think <about> it.', content: 'The answer is 4.' });
  for (let step = 1; step <= 7; step++) {
    const s = new ReasoningSplitter(true);
    let reasoning = '';
    let content = '';
    for (let i = 0; i < K3_REPLY.length; i += step) {
      const p = s.push(K3_REPLY.slice(i, i + step));
      reasoning += p.reasoning;
      content += p.content;
    }
    const end = s.push('', true);
    assert.deepEqual({ reasoning: reasoning + end.reasoning, content: content + end.content }, whole, `pieces of ${step}`);
  }
  // thinking off: all content; an unclosed think block: all reasoning
  assert.deepEqual(new ReasoningSplitter(false).push('plain <|close|', true), { reasoning: '', content: 'plain <|close|' });
  assert.deepEqual(assistantMessage('still thinking', 'k3', true), { role: 'assistant', content: '', reasoning_content: 'still thinking' });
});

const K2_REPLY = 'Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>';

test('K2: tool calls parsed from the section, content before it; streamed content stops at the section', () => {
  const p = parseK2ToolCalls(K2_REPLY);
  assert.equal(p.content, 'Checking.');
  assert.deepEqual(p.calls, [
    { id: 'functions.get_weather:0', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
    { id: 'functions.time:1', type: 'function', function: { name: 'time', arguments: '{}' } },
  ]);
  assert.deepEqual(parseK2ToolCalls('no tools here'), { content: 'no tools here', calls: [] });
  const hold = new ToolSectionHold();
  let shown = '';
  for (let i = 0; i < K2_REPLY.length; i += 3) shown += hold.push(K2_REPLY.slice(i, i + 3));
  shown += hold.finish();
  assert.equal(shown, 'Checking.');
  assert.equal(hold.all, K2_REPLY);
  const msg = assistantMessage(K2_REPLY, 'k2', false);
  assert.equal(msg.tool_calls?.length, 2);
});
