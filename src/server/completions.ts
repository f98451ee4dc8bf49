// POST /v1/chat/completions and POST /v1/completions: OpenAI's request and response shapes over
// the library's generate / chat (src/api). A client that goes away aborts its generation (the
// engine drops it before the next token and gives its state back).

import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { GenerationResult, KimiModel, TokenEvent } from '../api/index.js';
import { ApiError, badField, sendJson } from './errors.js';
import { bool, generationOptions } from './params.js';
import { prepareTurn, usageOf, type TurnDelta } from './chat-turn.js';
import { refuseTextPastContext } from './context-limit.js';
import { EventStream, clientGone } from './sse.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;

export type { Served } from './served.js';

function checkModel(s: Served, b: Body): void {
  if (b.model === undefined || b.model === null) return;
  if (typeof b.model !== 'string') throw badField('model', 'must be a string');
  if (b.model !== s.name) throw new ApiError(404, `The model \`${b.model}\` does not exist (this server serves \`${s.name}\`)`, 'invalid_request_error', 'model', 'model_not_found');
}

function finishReason(r: GenerationResult): string {
  return r.stopReason === 'max_tokens' || r.stopReason === 'context' ? 'length' : 'stop';
}

function usage(r: GenerationResult) {
  return usageOf(r, r.promptTokens);
}

function tokenLogprob(kimi: KimiModel, e: TokenEvent) {
  const piece = (id: number) => {
    const t = kimi.tokenizer ? kimi.detokenize([id]) : String(id);
    return { token: t, bytes: [...Buffer.from(t, 'utf8')] };
  };
  return { ...piece(e.id), logprob: e.logprob!, top_logprobs: (e.top ?? []).map((t) => ({ ...piece(t.id), logprob: t.logprob })) };
}

/** A token's deltas as one chunk delta: its reasoning and content text; tool calls apart. */
function textDelta(ds: readonly TurnDelta[]): { delta: Body | null; calls: Body[] } {
  let reasoning = '';
  let content = '';
  const calls: Body[] = [];
  for (const d of ds) {
    if ('reasoning_content' in d) reasoning += d.reasoning_content;
    else if ('content' in d) content += d.content;
    else calls.push({ tool_calls: [d.tool_call] });
  }
  if (!reasoning && !content) return { delta: null, calls };
  return { delta: { ...(reasoning ? { reasoning_content: reasoning } : {}), ...(content ? { content } : {}) }, calls };
}

export async function chatCompletions(s: Served, req: IncomingMessage, res: ServerResponse, b: Body, text?: string): Promise<GenerationResult | null> {
  checkModel(s, b);
  const turn = prepareTurn(s, b, text);
  const stream = bool(b, 'stream') ?? false;
  const wantLogprobs = turn.options.logprobs !== undefined;
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const base = { id, created, model: s.name, system_fingerprint: 'kimi-k3-ts' };
  const signal = clientGone(req, res);
  if (!stream) {
    const logprobs: unknown[] = [];
    const o = await turn.run(signal, undefined, wantLogprobs ? (e) => logprobs.push(tokenLogprob(s.kimi, e)) : undefined);
    if (o.result.stopReason === 'aborted' && o.stopSequence === null) return o.result;
    sendJson(res, 200, { ...base, object: 'chat.completion', choices: [{ index: 0, message: o.message, logprobs: wantLogprobs ? { content: logprobs } : null, finish_reason: o.finishReason }], usage: o.usage });
    return o.result;
  }
  // usage comes at the end of every stream (Moonshot's API sends it without include_usage too)
  const includeUsage = bool((b.stream_options ?? {}) as Body, 'include_usage') ?? false;
  const out = new EventStream(res);
  const chunk = (delta: Body, finish: string | null = null, lp: unknown = null) => out.send({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, logprobs: lp, finish_reason: finish }], ...(includeUsage ? { usage: null } : {}) });
  chunk({ role: 'assistant', content: '' });
  let pending: TurnDelta[] = [];
  const flush = (lp: unknown = null) => {
    const { delta, calls } = textDelta(pending);
    pending = [];
    if (delta || lp) chunk(delta ?? { content: '' }, null, lp);
    for (const c of calls) chunk(c);
  };
  const o = await turn.run(
    signal,
    (d) => pending.push(d),
    (e) => flush(wantLogprobs ? { content: [tokenLogprob(s.kimi, e)] } : null),
  );
  if (o.result.stopReason === 'aborted' && o.stopSequence === null) return o.result;
  flush();
  chunk({}, o.finishReason);
  out.send({ ...base, object: 'chat.completion.chunk', choices: [], usage: o.usage });
  out.done();
  return o.result;
}

export async function completions(s: Served, req: IncomingMessage, res: ServerResponse, b: Body): Promise<GenerationResult | null> {
  checkModel(s, b);
  let p = b.prompt;
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0];
  let ids: number[];
  if (typeof p === 'string') {
    if (!s.kimi.tokenizer) throw badField('prompt', 'text prompts need the tokenizer files; give token ids');
    refuseTextPastContext(s, 'prompt', [p]);
    ids = s.kimi.tokenize(p);
  } else if (Array.isArray(p) && p.length > 0 && p.every((x) => Number.isInteger(x))) ids = p as number[];
  else throw badField('prompt', 'must be a string or a non-empty array of token ids (one prompt: n = 1)');
  if (ids.length === 0) throw badField('prompt', 'is empty');
  const V = s.kimi.vocabSize;
  const bad = ids.find((x) => x < 0 || x >= V);
  if (bad !== undefined) throw badField('prompt', `token id ${bad} is out of range (vocabulary ${V})`);
  const room = s.maxContext - ids.length;
  if (room < 1) throw badField('prompt', `the prompt is ${ids.length} tokens; this server holds ${s.maxContext} tokens of context`);
  const opts = generationOptions(b, s, false);
  opts.maxTokens = Math.min(opts.maxTokens, room); // past the context: finish_reason "length", as chat
  const stream = bool(b, 'stream') ?? false;
  const id = `cmpl-${randomUUID()}`;
  const base = { id, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: s.name };
  const gen = s.kimi.generate(ids, { ...opts, ...s.drafter, ignoreEos: false, signal: clientGone(req, res) });
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
  const choice = { index: 0, text: r.text, logprobs: opts.logprobs !== undefined ? lp : null, finish_reason: finishReason(r) };
  if (out) {
    out.send({ ...base, choices: [{ ...choice, text: '' }], usage: usage(r) });
    out.done();
  } else sendJson(res, 200, { ...base, choices: [choice], usage: usage(r) });
  return r;
}
