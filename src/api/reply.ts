// A finished reply's text -> the assistant message an API returns: K3 thinking as
// `reasoning_content` (reasoning.ts), K2 tool calls as `tool_calls` (tool-calls.ts).

import type { TokenizerFamily } from '../tokenizer/index.js';
import { ReasoningSplitter } from './reasoning.js';
import { parseK2ToolCalls, type ParsedToolCall } from './tool-calls.js';

export interface AssistantMessage {
  role: 'assistant';
  content: string;
  reasoning_content?: string;
  tool_calls?: ParsedToolCall[];
}

export function assistantMessage(text: string, format: TokenizerFamily, thinking: boolean): AssistantMessage {
  if (format === 'k3') {
    const s = new ReasoningSplitter(thinking).push(text, true);
    return { role: 'assistant', content: s.content, ...(thinking ? { reasoning_content: s.reasoning } : {}) };
  }
  const { content, calls } = parseK2ToolCalls(text);
  return { role: 'assistant', content, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}
