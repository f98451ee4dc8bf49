// A chat turn's outcome in Ollama's shapes: /api/chat's message and /api/generate's response,
// whole or as NDJSON lines, and the counts and durations (nanoseconds) of the last line. Streamed
// lines concatenate to the whole answer: the same content, thinking and tool calls.

import type { GenerationResult } from '../api/index.js';
import { toolInput } from './anthropic-reply.js';
import type { TurnDelta, TurnOutcome, TurnToolCall } from './chat-turn.js';

type Body = Record<string, unknown>;

export type DoneReason = 'stop' | 'length';

const NS = 1e9;

/** Ollama ends a turn with calls as "stop"; "length" when the token limit or context cut it. */
export const doneReason = (r: GenerationResult): DoneReason => (r.stopReason === 'max_tokens' || r.stopReason === 'context' ? 'length' : 'stop');

/** The fields every line carries. */
export const head = (model: string): Body => ({ model, created_at: new Date().toISOString() });

/**
 * The last line's counts and durations. prompt_eval_count is the whole prompt (the usage's
 * count), cached tokens included; load_duration is the wait for a sequence slot (the model is
 * loaded once, at start). Durations are at least 1 ns, so that tokens/s never divides by zero.
 */
export function stats(r: GenerationResult, promptTokens: number, startedNs: bigint): Body {
  const ns = (s: number) => Math.max(1, Math.round(s * NS));
  return {
    done: true,
    done_reason: doneReason(r),
    total_duration: Math.max(1, Number(process.hrtime.bigint() - startedNs)),
    load_duration: ns(r.timings.queueSeconds),
    prompt_eval_count: promptTokens,
    prompt_eval_duration: ns(r.timings.promptSeconds),
    eval_count: r.ids.length,
    eval_duration: ns(r.timings.decodeSeconds),
  };
}

/** A K3 tool call as Ollama's: arguments an object, with the id and index newer clients read. */
export const ollamaToolCall = (c: TurnToolCall, index: number): Body => ({ id: c.id, function: { index, name: c.function.name, arguments: toolInput(c.function.arguments) } });

/** /api/chat's whole answer. */
export function chatAnswer(model: string, o: TurnOutcome, startedNs: bigint): Body {
  const m = o.message;
  const message: Body = { role: 'assistant', content: m.content };
  if (m.reasoning_content) message.thinking = m.reasoning_content;
  if (m.tool_calls?.length) message.tool_calls = m.tool_calls.map(ollamaToolCall);
  return { ...head(model), message, ...stats(o.result, o.usage.prompt_tokens, startedNs) };
}

/** /api/generate's whole answer (templated): the text as `response`, the reasoning as `thinking`. */
export function generateAnswer(model: string, o: TurnOutcome, startedNs: bigint): Body {
  const m = o.message;
  return { ...head(model), response: m.content, ...(m.reasoning_content ? { thinking: m.reasoning_content } : {}), ...stats(o.result, o.usage.prompt_tokens, startedNs) };
}

/** Turn deltas -> /api/chat's stream lines (`done: false`), each passed to `send`. */
export class ChatLines {
  constructor(
    private readonly model: string,
    private readonly send: (line: Body) => void,
  ) {}

  delta(d: TurnDelta): void {
    const message: Body = { role: 'assistant', content: '' };
    if ('reasoning_content' in d) {
      if (!d.reasoning_content) return;
      message.thinking = d.reasoning_content;
    } else if ('content' in d) {
      if (!d.content) return;
      message.content = d.content;
    } else message.tool_calls = [ollamaToolCall(d.tool_call, d.tool_call.index)];
    this.send({ ...head(this.model), message, done: false });
  }

  finish(o: TurnOutcome, startedNs: bigint): void {
    this.send({ ...head(this.model), message: { role: 'assistant', content: '' }, ...stats(o.result, o.usage.prompt_tokens, startedNs) });
  }
}

/** Turn deltas -> /api/generate's stream lines: text in `response`, reasoning in `thinking`. */
export function generateLine(model: string, d: TurnDelta): Body | null {
  if ('reasoning_content' in d) return d.reasoning_content ? { ...head(model), response: '', thinking: d.reasoning_content, done: false } : null;
  if ('content' in d) return d.content ? { ...head(model), response: d.content, done: false } : null;
  return null; // /api/generate declares no tools
}
