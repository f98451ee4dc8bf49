// A chat turn: a conversation and its options -> the prompt in the model's chat format, a
// generation (constrained where the request asks for structure), and the reply parsed into the
// assistant message as it comes: reasoning, content and tool calls as deltas, then the message.
// K3 replies are parsed on ids (k3-reply.ts); K2 ones on text (tool-calls.ts). Stop strings
// apply to the content channel only, so markup and reasoning never end a reply early.

import type { ChatMessage, Tokenizer, TokenizerFamily } from '../tokenizer/index.js';
import type { GenerationResult, TokenEvent } from './events.js';
import { K3ReplyParser, type K3Delta, type K3ToolCall } from './k3-reply.js';
import { ToolSectionHold, parseK2ToolCalls } from './tool-calls.js';
import { heldPrefix } from './held-prefix.js';

export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

export type ResponseFormat = { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; json_schema: { name?: string; schema?: unknown; strict?: boolean; [k: string]: unknown } };

export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown; strict?: boolean };
}

export interface ChatTurnOptions {
  /** K3: reason in the think channel first (default true, as K3's release entry point). */
  thinking?: boolean;
  /** K3: low | high | max (default max); null: no thinking-effort message. */
  thinkingEffort?: 'low' | 'high' | 'max' | null;
  /** K3: keep the reasoning of earlier assistant turns in the prompt (default true). */
  preserveThinking?: boolean;
  /** OpenAI function tools. */
  tools?: readonly ToolSpec[];
  toolChoice?: ToolChoice;
  responseFormat?: ResponseFormat;
  /** false: at most one tool call a reply (default true). */
  parallelToolCalls?: boolean;
}

export type ChatDelta = { reasoning_content: string } | { content: string } | { tool_call: K3ToolCall & { index: number } };

export interface ChatTokenEvent extends TokenEvent {
  /** What this token adds to the assistant message. */
  deltas: ChatDelta[];
}

export interface AssistantMessage {
  role: 'assistant';
  content: string;
  reasoning_content?: string;
  tool_calls?: K3ToolCall[];
}

export interface ChatResult extends GenerationResult {
  message: AssistantMessage;
  /** stop (the turn ended), tool_calls (it ended with calls), length (cut off). */
  finishReason: 'stop' | 'tool_calls' | 'length';
  /** The stop string that ended the reply. */
  stopSequence: string | null;
  /** A tool call still open when the reply was cut off: never to be executed. */
  truncatedCall: { name: string | null; arguments_partial: Record<string, unknown> } | null;
  /** Deltas only the end of the reply settles (text held as a possible stop string or tag,
   *  K2's tool calls), after the last token's: a stream sends them last. */
  lastDeltas: ChatDelta[];
}

/** The reply parser of one chat turn: ids in, deltas out, then the message. */
export class ChatReply {
  private readonly k3: K3ReplyParser | null;
  private readonly k2: ToolSectionHold | null;
  private readonly stops: string[];
  private held = '';
  private content = '';
  private reasoning = '';
  private cut = false;
  stopSequence: string | null = null;

  constructor(
    tok: Tokenizer,
    readonly format: TokenizerFamily,
    readonly thinking: boolean,
    stop: readonly string[] = [],
    /** Called once when a stop string has ended the content. */
    private readonly onStop: () => void = () => {},
    /** false (no tools declared, or tool_choice none): calls the model writes are dropped. */
    private readonly toolsAllowed = true,
  ) {
    this.k3 = format === 'k3' ? new K3ReplyParser(tok, thinking ? 'think' : 'response') : null;
    this.k2 = format === 'k3' ? null : new ToolSectionHold();
    this.stops = stop.filter((s) => s.length > 0);
  }

  /** The deltas one generated token makes. */
  push(e: TokenEvent): ChatDelta[] {
    if (this.cut) return [];
    const raw: K3Delta[] = this.k3 ? this.k3.push(e.id) : [{ content: this.k2!.push(e.text) }];
    const out: ChatDelta[] = [];
    for (const d of raw) {
      if (d.reasoning_content) {
        this.reasoning += d.reasoning_content;
        out.push({ reasoning_content: d.reasoning_content });
      }
      if (d.content) this.addContent(d.content, out);
      if (d.tool_call && this.toolsAllowed) out.push({ tool_call: d.tool_call });
      if (this.cut) break;
    }
    return out;
  }

  /** Content with the stop strings applied: what may be the start of one is held back. */
  private addContent(text: string, out: ChatDelta[]): void {
    if (this.stops.length === 0) return this.release(text, out);
    const p = this.held + text;
    let at = -1;
    for (const s of this.stops) {
      const i = p.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        this.stopSequence = s;
      }
    }
    if (at >= 0) {
      this.release(p.slice(0, at), out);
      this.held = '';
      this.cut = true;
      this.onStop();
      return;
    }
    const hold = Math.max(0, ...this.stops.map((s) => heldPrefix(p, s)));
    this.release(p.slice(0, p.length - hold), out);
    this.held = p.slice(p.length - hold);
  }

  private release(text: string, out: ChatDelta[]): void {
    if (!text) return;
    this.content += text;
    out.push({ content: text });
  }

  /** The end of the reply: the deltas still held, and the message. */
  finish(r: GenerationResult): { deltas: ChatDelta[]; result: Omit<ChatResult, 'lastDeltas'> } {
    const deltas: ChatDelta[] = [];
    if (!this.cut && this.held) this.release(this.held, deltas);
    this.held = '';
    if (this.k2) {
      const rest = this.k2.finish();
      if (!this.cut) this.release(rest, deltas);
      const calls = parseK2ToolCalls(this.k2.all).calls;
      calls.forEach((c, index) => deltas.push({ tool_call: { ...c, index } }));
      const finishReason = calls.length > 0 ? 'tool_calls' : r.stopReason === 'max_tokens' || r.stopReason === 'context' ? 'length' : 'stop';
      const message: AssistantMessage = { role: 'assistant', content: this.content, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
      return { deltas, result: { ...r, message, finishReason, stopSequence: this.stopSequence, truncatedCall: null } };
    }
    const parsed = this.k3!.finish();
    // a call no tool allows is never returned (nor counted as one)
    const p = this.toolsAllowed ? parsed : { ...parsed, tool_calls: [], finish_reason: parsed.finish_reason === 'tool_calls' ? ('stop' as const) : parsed.finish_reason, truncated_call: null };
    const stopped = this.cut; // the parser's deltas add up to its fields: this.content and this.reasoning hold them
    const message: AssistantMessage = {
      role: 'assistant',
      content: this.content,
      ...(this.thinking ? { reasoning_content: this.reasoning } : {}),
      ...(p.tool_calls.length > 0 && !stopped ? { tool_calls: p.tool_calls } : {}),
    };
    const finishReason = stopped ? 'stop' : p.finish_reason;
    return { deltas, result: { ...r, ...(stopped ? { stopReason: 'stop_string' as const } : {}), message, finishReason, stopSequence: this.stopSequence, truncatedCall: stopped ? null : p.truncated_call } };
  }
}

/** The conversation with earlier turns' reasoning dropped (preserve_thinking false). */
export function withoutReasoning(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((m) => {
    if (m.role !== 'assistant') return m;
    const { reasoning_content: _r, ...rest } = m as ChatMessage & { reasoning?: unknown };
    delete (rest as { reasoning?: unknown }).reasoning;
    return rest;
  });
}

/** Every tool a conversation declares: the request's, then those of its system messages. */
export function declaredTools(messages: readonly ChatMessage[], tools: readonly ToolSpec[] = []): ToolSpec[] {
  const out = [...tools];
  for (const m of messages) {
    const t = (m as { tools?: unknown }).tools;
    if (m.role === 'system' && Array.isArray(t)) out.push(...(t as ToolSpec[]));
  }
  return out;
}
