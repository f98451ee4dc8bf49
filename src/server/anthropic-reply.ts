// A chat turn's outcome as an Anthropic Message, whole or as its stream of events. The stream
// is built so that the message the SDK accumulates from it is the non-streamed one, field for
// field: the same blocks in the same order, and the final usage restated in message_delta.

import type { TurnDelta, TurnOutcome, TurnToolCall } from './chat-turn.js';

type Body = Record<string, unknown>;

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

export function stopReason(o: TurnOutcome): StopReason {
  if (o.finishReason === 'tool_calls') return 'tool_use';
  if (o.finishReason === 'length') return 'max_tokens';
  return o.stopSequence !== null ? 'stop_sequence' : 'end_turn';
}

/** Anthropic counts cached prompt tokens apart from input_tokens; OpenAI's prompt_tokens holds both. */
export function usageOf(o: TurnOutcome): AnthropicUsage {
  const cached = o.usage.prompt_tokens_details.cached_tokens;
  return { input_tokens: o.usage.prompt_tokens - cached, output_tokens: o.usage.completion_tokens, cache_read_input_tokens: cached, cache_creation_input_tokens: 0 };
}

/** A tool call's arguments as tool_use input, which must be an object: other JSON is kept under `arguments`. */
export function toolInput(args: string): Body {
  try {
    const v: unknown = JSON.parse(args === '' ? '{}' : args);
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) return v as Body;
  } catch {
    // not JSON: kept as text below
  }
  return { arguments: args };
}

const toolUse = (c: TurnToolCall) => ({ type: 'tool_use', id: c.id, name: c.function.name, input: toolInput(c.function.arguments) });
const thinkingBlock = (thinking: string) => ({ type: 'thinking', thinking, signature: '' });
const textBlock = (text: string) => ({ type: 'text', text, citations: null });

/** The fields every message carries, before its content and stop reason are known. */
function shell(id: string, model: string) {
  return { id, type: 'message', role: 'assistant', model, container: null, stop_details: null };
}

export function anthropicMessage(id: string, model: string, o: TurnOutcome): Body {
  const m = o.message;
  const content: Body[] = [];
  if (m.reasoning_content) content.push(thinkingBlock(m.reasoning_content));
  if (m.content) content.push(textBlock(m.content));
  for (const c of m.tool_calls ?? []) content.push(toolUse(c));
  return { ...shell(id, model), content, stop_reason: stopReason(o), stop_sequence: o.stopSequence, usage: usageOf(o) };
}

/** Turn deltas -> Anthropic's server-sent events, each passed to `send(event type, data)`. */
export class MessageEvents {
  private index = -1;
  /** The kind of the block open now, if one is. */
  private open: 'thinking' | 'text' | 'tool_use' | null = null;

  constructor(private readonly send: (type: string, data: Body) => void) {}

  start(id: string, model: string, promptTokens: number): void {
    const usage: AnthropicUsage = { input_tokens: promptTokens, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    this.send('message_start', { type: 'message_start', message: { ...shell(id, model), content: [], stop_reason: null, stop_sequence: null, usage } });
    this.send('ping', { type: 'ping' });
  }

  delta(d: TurnDelta): void {
    if ('reasoning_content' in d) {
      if (d.reasoning_content) this.text('thinking', d.reasoning_content);
    } else if ('content' in d) {
      if (d.content) this.text('text', d.content);
    } else {
      this.close();
      const { input, ...block } = toolUse(d.tool_call);
      this.begin({ ...block, input: {} }, 'tool_use');
      this.send('content_block_delta', { type: 'content_block_delta', index: this.index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(input) } });
      this.close();
    }
  }

  /** The last events: message_delta restates the whole usage (input and cache counts are known only now). */
  finish(o: TurnOutcome): void {
    this.close();
    this.send('message_delta', { type: 'message_delta', delta: { stop_reason: stopReason(o), stop_sequence: o.stopSequence, stop_details: null }, usage: usageOf(o) });
    this.send('message_stop', { type: 'message_stop' });
  }

  private text(kind: 'thinking' | 'text', s: string): void {
    if (this.open !== kind) {
      this.close();
      this.begin(kind === 'thinking' ? thinkingBlock('') : textBlock(''), kind);
    }
    const delta = kind === 'thinking' ? { type: 'thinking_delta', thinking: s } : { type: 'text_delta', text: s };
    this.send('content_block_delta', { type: 'content_block_delta', index: this.index, delta });
  }

  private begin(block: Body, kind: 'thinking' | 'text' | 'tool_use'): void {
    this.index++;
    this.open = kind;
    this.send('content_block_start', { type: 'content_block_start', index: this.index, content_block: block });
  }

  private close(): void {
    if (this.open !== null) this.send('content_block_stop', { type: 'content_block_stop', index: this.index });
    this.open = null;
  }
}
