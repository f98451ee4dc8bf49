// One chat turn as every chat endpoint runs it: an OpenAI-shaped chat request is checked (400
// naming the field, before anything is sent), rendered, generated and parsed into the assistant
// message, with deltas as they come. /v1/chat/completions and /v1/messages are fronts of this.

import { declaredTools, type ChatDelta, type ChatOptions, type ChatResult, type GenerationResult, type K3ToolCall, type RenderedPrompt, type TokenEvent } from '../api/index.js';
import { UserError } from '../util/errors.js';
import { k3RequestFromBody, pyLoads } from '../api/tokens.js';
import { chatRequest } from './chat-request.js';
import { refuseTextPastContext } from './context-limit.js';
import { badField } from './errors.js';
import { generationOptions, type GenerationFields } from './params.js';
import type { Served } from './served.js';
import { vendorSampling } from './vendor-params.js';

type Body = Record<string, unknown>;

export type TurnToolCall = K3ToolCall;

export type TurnDelta = ChatDelta;

export interface TurnMessage {
  role: 'assistant';
  content: string;
  reasoning_content?: string;
  tool_calls?: TurnToolCall[];
}

export interface TurnUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface TurnOutcome {
  message: TurnMessage;
  finishReason: 'stop' | 'length' | 'tool_calls';
  /** The stop string that ended the reply, when one did. */
  stopSequence: string | null;
  usage: TurnUsage;
  result: GenerationResult;
}

export interface PreparedTurn {
  /** Prompt tokens as the usage reports them. */
  promptTokens: number;
  /** The generation options the request asked for (logprobs among them). */
  options: GenerationFields;
  /** Generate (once: a turn's constraint follows one reply); `onToken` sees each token (with
   *  its logprobs), `onDelta` each delta. */
  run(signal: AbortSignal, onDelta?: (d: TurnDelta) => void, onToken?: (e: TokenEvent) => void): Promise<TurnOutcome>;
}

/** Usage as OpenAI reports it; cached tokens never exceed the prompt tokens it counts. */
export function usageOf(r: GenerationResult, promptTokens: number): TurnUsage {
  const cached = Math.min(r.cachedTokens, promptTokens);
  return { prompt_tokens: promptTokens, completion_tokens: r.ids.length, total_tokens: promptTokens + r.ids.length, prompt_tokens_details: { cached_tokens: cached } };
}

/** The texts of a message's content (chatRequest has checked its shape). */
function contentTexts(m: { content?: unknown }): string[] {
  const c = m.content;
  if (typeof c === 'string') return [c];
  return Array.isArray(c) ? c.map((p: { text?: unknown }) => (typeof p.text === 'string' ? p.text : '')) : [];
}

/** The body with Python's number and key-order semantics (the renderer's), from its text. */
function pyBody(body: Body, text: string | undefined): unknown {
  if (text === undefined) return body;
  try {
    return pyLoads(text);
  } catch {
    return body; // JSON.parse read it; leave the rest to the renderer's checks
  }
}

/** Sampling a front sets beyond OpenAI's fields (Ollama's options: top_k, min_p, repeat_penalty, stop lists). */
export type TurnSampling = Pick<GenerationFields, 'topK' | 'minP' | 'repetitionPenalty' | 'penaltyLastN' | 'stop'>;

/**
 * Check and render an OpenAI chat request body (`text`: the body as sent, when there is one);
 * throws ApiError for a bad field. K3 renders through k3RequestFromBody, as `k3 render` does.
 * `sampling` (only the fields it sets) goes over the body's.
 */
export function prepareTurn(served: Served, body: Body, text?: string, sampling: TurnSampling = {}): PreparedTurn {
  const { kimi } = served;
  const { messages, turn } = chatRequest(body);
  refuseTextPastContext(served, 'messages', messages.flatMap(contentTexts));
  const options = generationOptions(body, served, true);
  Object.assign(options, sampling);
  let prompt: RenderedPrompt;
  try {
    if (kimi.format === 'k3') {
      const req = k3RequestFromBody(pyBody(body, text), { thinking: served.thinking });
      turn.thinking = req.thinking ?? true; // the reply is parsed in the channel the prompt opens
      prompt = kimi.renderK3(req, declaredTools(messages, turn.tools));
    } else prompt = kimi.renderPrompt(messages, turn);
  } catch (e) {
    if (e instanceof UserError) {
      const field = (e as UserError & { field?: string }).field ?? 'messages';
      throw badField(field, e.message.replace(/^[a-z_.[\]0-9]+: /i, ''), (e as UserError & { code?: string }).code);
    }
    throw e;
  }
  const room = served.maxContext - prompt.ids.length;
  if (room < 1) throw badField('messages', `the prompt is ${prompt.ids.length} tokens; this server holds ${served.maxContext} tokens of context`);
  if (served.vendorParams && kimi.format === 'k3') Object.assign(options, vendorSampling(turn.thinking !== false));
  // max_tokens past the context is accepted: the reply ends with finish_reason "length"
  const opts: ChatOptions = { ...options, ...turn, maxTokens: Math.min(options.maxTokens, room), ignoreEos: false };
  // made here, so a request it refuses gets its 400 before anything is streamed
  const constraint = kimi.replyConstraint(prompt, opts);
  if (constraint) opts.constraint = constraint;
  // --drafter: replies held to a structure (tools, response_format) are not drafted (spec and constraints are exclusive)
  else if (served.drafter) Object.assign(opts, served.drafter);
  // a server default (--max-tokens) never leaves a request without room for its structure
  const asked = body.max_tokens ?? body.max_completion_tokens;
  if (constraint && (asked === undefined || asked === null) && constraint.minTokens >= opts.maxTokens!) opts.maxTokens = Math.min(room, 2 * constraint.minTokens);
  return {
    promptTokens: prompt.promptTokens,
    options,
    async run(signal, onDelta, onToken) {
      const gen = kimi.chatRendered(prompt, { ...opts, signal });
      for await (const e of gen) {
        onToken?.(e);
        if (onDelta) for (const d of e.deltas) onDelta(d);
      }
      const r: ChatResult = await gen.result;
      if (onDelta) for (const d of r.lastDeltas) onDelta(d);
      const m = r.message;
      const calls = m.tool_calls ?? [];
      const message: TurnMessage = {
        role: 'assistant',
        content: m.content, // a string, '' with only tool calls (Moonshot's API; clients index it)
        ...(m.reasoning_content !== undefined ? { reasoning_content: m.reasoning_content } : {}),
        ...(calls.length > 0 ? { tool_calls: calls } : {}),
      };
      return { message, finishReason: r.finishReason, stopSequence: r.stopSequence, usage: usageOf(r, prompt.promptTokens), result: r };
    },
  };
}
