// POST /v1/chat/completions and POST /v1/completions: OpenAI's request and response shapes over
// the library's generate / chat (src/api). A client that goes away aborts its generation (the
// engine drops it before the next token and gives its state back).

import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { ChatMessage, GenerationResult, KimiModel, TokenEvent } from '../api/index.js';
import { ReasoningSplitter } from '../api/reasoning.js';
import { ToolSectionHold, parseK2ToolCalls } from '../api/tool-calls.js';
import { ApiError, badField, sendJson } from './errors.js';
import { bool, generationOptions } from './params.js';
import { EventStream } from './sse.js';

type Body = Record<string, unknown>;

export interface Served {
  kimi: KimiModel;
  name: string;
  maxContext: number;
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool']);

function checkModel(s: Served, b: Body): void {
  if (b.model === undefined || b.model === null) return;
  if (typeof b.model !== 'string') throw badField('model', 'must be a string');
  if (b.model !== s.name) throw new ApiError(404, `The model \`${b.model}\` does not exist (this server serves \`${s.name}\`)`, 'invalid_request_error', 'model', 'model_not_found');
}

function messagesOf(b: Body): ChatMessage[] {
  const m = b.messages;
  if (!Array.isArray(m) || m.length === 0) throw badField('messages', 'must be a non-empty array of messages');
  return m.map((x, i) => {
    if (x === null || typeof x !== 'object' || Array.isArray(x)) throw badField(`messages[${i}]`, 'must be an object');
    const msg = x as Record<string, unknown>;
    if (typeof msg.role !== 'string' || !ROLES.has(msg.role)) throw badField(`messages[${i}].role`, `must be one of system, user, assistant, tool, got ${JSON.stringify(msg.role)}`);
    const c = msg.content;
    const okParts = Array.isArray(c) && c.every((p) => p !== null && typeof p === 'object' && (p as Body).type === 'text' && typeof (p as Body).text === 'string');
    if (!(typeof c === 'string' || c === null || (c === undefined && msg.role === 'assistant') || okParts)) throw badField(`messages[${i}].content`, 'must be a string or an array of text parts');
    return msg as unknown as ChatMessage;
  });
}

function finishReason(r: GenerationResult, toolCalls: boolean): string {
  if (toolCalls) return 'tool_calls';
  return r.stopReason === 'max_tokens' ? 'length' : 'stop';
}

function usage(r: GenerationResult) {
  return { prompt_tokens: r.promptTokens, completion_tokens: r.ids.length, total_tokens: r.promptTokens + r.ids.length, prompt_tokens_details: { cached_tokens: r.cachedTokens } };
}

/** An AbortSignal that fires when the client goes away before the reply is complete. */
function clientGone(req: IncomingMessage, res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) ac.abort();
  });
  req.on('aborted', () => ac.abort());
  return ac.signal;
}

function tokenLogprob(kimi: KimiModel, e: TokenEvent) {
  const piece = (id: number) => {
    const t = kimi.tokenizer ? kimi.detokenize([id]) : String(id);
    return { token: t, bytes: [...Buffer.from(t, 'utf8')] };
  };
  return { ...piece(e.id), logprob: e.logprob!, top_logprobs: (e.top ?? []).map((t) => ({ ...piece(t.id), logprob: t.logprob })) };
}

export async function chatCompletions(s: Served, req: IncomingMessage, res: ServerResponse, b: Body): Promise<GenerationResult | null> {
  checkModel(s, b);
  const messages = messagesOf(b);
  const opts = generationOptions(b, s.maxContext, true, s.kimi.vocabSize);
  const stream = bool(b, 'stream') ?? false;
  const kwargs = (b.chat_template_kwargs ?? {}) as Body;
  const thinking = bool(kwargs, 'thinking') ?? false;
  const tools = b.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw badField('tools', 'must be an array');
  const hasTools = Array.isArray(tools) && tools.length > 0;
  if (hasTools && s.kimi.format === 'k3') throw badField('tools', 'K3 tool calls are not supported yet: the K3 tool-call format is unpublished');
  for (const m of messages) if (m.tool_calls?.length && s.kimi.format === 'k3') throw badField('messages', 'K3 tool calls are not supported yet: the K3 tool-call format is unpublished');
  let ids: number[];
  try {
    ids = s.kimi.renderChat(messages, { thinking, tools: hasTools ? tools : undefined });
  } catch (e) {
    throw badField('messages', (e as Error).message);
  }
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const base = { id, created, model: s.name, system_fingerprint: 'kimi-k3-ts' };
  const signal = clientGone(req, res);
  const gen = s.kimi.generate(ids, { ...opts, ignoreEos: false, signal });
  const logprobs: unknown[] = [];
  if (!stream) {
    for await (const e of gen) if (opts.logprobs !== undefined) logprobs.push(tokenLogprob(s.kimi, e));
    const r = await gen.result;
    if (r.stopReason === 'aborted') return r;
    const msg = s.kimi.format === 'k3' ? splitAll(r.text, thinking) : k2Message(r.text);
    const calls = 'tool_calls' in msg && msg.tool_calls !== undefined;
    sendJson(res, 200, { ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', ...msg }, logprobs: opts.logprobs !== undefined ? { content: logprobs } : null, finish_reason: finishReason(r, calls) }], usage: usage(r) });
    return r;
  }
  const includeUsage = bool((b.stream_options ?? {}) as Body, 'include_usage') ?? false;
  const out = new EventStream(res);
  const chunk = (delta: Body, finish: string | null = null, lp: unknown = null) => out.send({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: lp, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) });
  chunk({ role: 'assistant', content: '' });
  const splitter = s.kimi.format === 'k3' ? new ReasoningSplitter(thinking) : null;
  const hold = s.kimi.format === 'k3' ? null : new ToolSectionHold();
  const send = (text: string, final: boolean, lp: unknown = null) => {
    if (splitter) {
      const p = splitter.push(text, final);
      if (p.reasoning) chunk({ reasoning_content: p.reasoning }, null, lp);
      if (p.content || (lp && !p.reasoning)) chunk({ content: p.content }, null, lp);
    } else {
      const c = hold!.push(text) + (final ? hold!.finish() : '');
      if (c || lp) chunk({ content: c }, null, lp);
    }
  };
  for await (const e of gen) send(e.text, false, opts.logprobs !== undefined ? { content: [tokenLogprob(s.kimi, e)] } : null);
  const r = await gen.result;
  if (r.stopReason === 'aborted') return r;
  send('', true);
  let calls = false;
  if (hold) {
    const parsed = parseK2ToolCalls(hold.all);
    if (parsed.calls.length > 0) {
      calls = true;
      chunk({ tool_calls: parsed.calls.map((c, index) => ({ index, ...c })) });
    }
  }
  chunk({}, finishReason(r, calls));
  if (includeUsage) out.send({ ...base, object: 'chat.completion.chunk', choices: [], usage: usage(r) });
  out.done();
  return r;
}

function splitAll(text: string, thinking: boolean): { content: string; reasoning_content?: string } {
  const p = new ReasoningSplitter(thinking).push(text, true);
  return { content: p.content, ...(thinking ? { reasoning_content: p.reasoning } : {}) };
}

function k2Message(text: string): { content: string | null; tool_calls?: unknown[] } {
  const p = parseK2ToolCalls(text);
  return p.calls.length > 0 ? { content: p.content || null, tool_calls: p.calls } : { content: p.content };
}

export async function completions(s: Served, req: IncomingMessage, res: ServerResponse, b: Body): Promise<GenerationResult | null> {
  checkModel(s, b);
  let p = b.prompt;
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0];
  let ids: number[];
  if (typeof p === 'string') {
    if (!s.kimi.tokenizer) throw badField('prompt', 'text prompts need the tokenizer files; give token ids');
    ids = s.kimi.tokenize(p);
  } else if (Array.isArray(p) && p.length > 0 && p.every((x) => Number.isInteger(x))) ids = p as number[];
  else throw badField('prompt', 'must be a string or a non-empty array of token ids (one prompt: n = 1)');
  if (ids.length === 0) throw badField('prompt', 'is empty');
  const V = s.kimi.vocabSize;
  const bad = ids.find((x) => x < 0 || x >= V);
  if (bad !== undefined) throw badField('prompt', `token id ${bad} is out of range (vocabulary ${V})`);
  const opts = generationOptions(b, s.maxContext, false, s.kimi.vocabSize);
  const stream = bool(b, 'stream') ?? false;
  const id = `cmpl-${randomUUID()}`;
  const base = { id, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: s.name };
  const gen = s.kimi.generate(ids, { ...opts, ignoreEos: false, signal: clientGone(req, res) });
  const lp = { tokens: [] as string[], token_logprobs: [] as number[], top_logprobs: [] as Record<string, number>[], text_offset: [] as number[] };
  let text = '';
  const note = (e: TokenEvent) => {
    if (opts.logprobs === undefined) return;
    lp.tokens.push(tokenLogprob(s.kimi, e).token);
    lp.token_logprobs.push(e.logprob!);
    lp.top_logprobs.push(Object.fromEntries((e.top ?? []).map((t) => [tokenLogprob(s.kimi, { id: t.id, text: '', logprob: t.logprob }).token, t.logprob])));
    lp.text_offset.push(text.length);
  };
  const out = stream ? new EventStream(res) : null;
  for await (const e of gen) {
    note(e);
    text += e.text;
    out?.send({ ...base, choices: [{ index: 0, text: e.text, logprobs: null, finish_reason: null }] });
  }
  const r = await gen.result;
  if (r.stopReason === 'aborted') return r;
  const choice = { index: 0, text: r.text, logprobs: opts.logprobs !== undefined ? lp : null, finish_reason: finishReason(r, false) };
  if (out) {
    out.send({ ...base, choices: [{ ...choice, text: '' }], usage: usage(r) });
    out.done();
  } else sendJson(res, 200, { ...base, choices: [choice], usage: usage(r) });
  return r;
}
