// K2's reply parser: tool-call sections (tool-calls.ts), streamed and whole. K3's parser, on ids,
// is tested in k3-reply.test.ts.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ToolSectionHold, parseK2ToolCalls } from '../../src/api/tool-calls.js';
import { heldPrefix } from '../../src/api/held-prefix.js';

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
});

test('a marker\'s possible start is held back, nothing more', () => {
  assert.equal(heldPrefix('text <|clo', '<|close|>'), 5);
  assert.equal(heldPrefix('text', '<|close|>'), 0);
  assert.equal(heldPrefix('<|close|>', '<|close|>'), 0);
});
