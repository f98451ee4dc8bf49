// Ollama's /api/chat and /api/generate requests -> the OpenAI-shaped chat body that chat-turn.ts
// runs, and the sampling fields only Ollama's `options` have (top_k, min_p, repeat_penalty, more
// than 4 stop strings). Fields are checked here with a 400 naming them as Ollama's clients do
// (options.temperature, messages[1].tool_calls[0].function.arguments, think, format).

import type { TurnSampling } from './chat-turn.js';
import { ApiError, badField } from './errors.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;

const isObject = (v: unknown): v is Body => v !== null && typeof v === 'object' && !Array.isArray(v);
const present = (v: unknown): boolean => v !== undefined && v !== null;
const EFFORTS = ['low', 'high', 'max'];

/** Sampling an Ollama request sets beyond the OpenAI body's fields (only those it sets). */
export type OllamaSampling = TurnSampling;

/** The name /api/tags lists: Ollama's names carry a tag, `latest` when none is given. */
export const listedName = (s: Served): string => (s.name.includes(':') ? s.name : `${s.name}:latest`);

/** The model a request names (`model`, or the older `name`), as sent: the served one, with or without `:latest`. */
export function requestedModel(s: Served, b: Body): string {
  const m = b.model ?? b.name;
  if (!present(m) || m === '') throw badField('model', 'is required');
  if (typeof m !== 'string') throw badField('model', `must be a string, got ${JSON.stringify(m)}`);
  if (m !== s.name && m !== listedName(s)) throw new ApiError(404, `model "${m}" not found: this server serves "${listedName(s)}"`, 'not_found_error');
  return m;
}

function num(o: Body, k: string, lo: number, hi: number, integer = false): number | undefined {
  const v = o[k];
  const field = `options.${k}`;
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badField(field, `must be a number, got ${JSON.stringify(v)}`);
  if (integer && !Number.isInteger(v)) throw badField(field, `must be an integer, got ${v}`);
  if (v < lo || v > hi) throw badField(field, `must be in [${lo}, ${hi}], got ${v}`);
  return v;
}

/**
 * `options` -> OpenAI body fields (checked again by prepareTurn) and the extra sampling. Load-time
 * options (num_gpu, num_thread, use_mmap, ...) and num_ctx are accepted and have no effect: the
 * server's --ctx and memory plan are fixed when it starts. Unknown keys are ignored, as Ollama does.
 */
function optionsOf(b: Body, s: Served): { fields: Body; sampling: OllamaSampling } {
  const o = b.options ?? {};
  if (!isObject(o)) throw badField('options', 'must be an object');
  const fields: Body = {};
  const sampling: OllamaSampling = {};
  const set = (k: string, v: number | undefined) => v !== undefined && (fields[k] = v);
  set('temperature', num(o, 'temperature', 0, 2));
  set('top_p', num(o, 'top_p', Number.MIN_VALUE, 1));
  // Ollama's seed -1 means "random": the server's default seed stands in for it
  const seed = num(o, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true);
  if (seed !== undefined && seed >= 0) fields.seed = seed;
  // -1: until the reply ends, -2: fill the context; both are the server's default
  const predict = num(o, 'num_predict', -2, Number.MAX_SAFE_INTEGER, true);
  if (predict === 0) throw badField('options.num_predict', 'must be a positive number of tokens, or -1 / -2 (no limit but the context)');
  if (predict !== undefined && predict > 0) fields.max_tokens = predict;
  num(o, 'num_ctx', 1, Number.MAX_SAFE_INTEGER, true);
  const presence = num(o, 'presence_penalty', -2, 2);
  const frequency = num(o, 'frequency_penalty', -2, 2);
  const repeat = num(o, 'repeat_penalty', Number.MIN_VALUE, 100);
  const lastN = num(o, 'repeat_last_n', -1, Number.MAX_SAFE_INTEGER, true);
  // llama.cpp's rule, which Ollama keeps: the penalties look at the last repeat_last_n tokens
  // (64 unless sent; -1 the whole context; 0 turns them off)
  if (lastN !== 0 && (presence !== undefined || frequency !== undefined || repeat !== undefined)) {
    set('presence_penalty', presence);
    set('frequency_penalty', frequency);
    if (repeat !== undefined) sampling.repetitionPenalty = repeat;
    sampling.penaltyLastN = lastN === undefined ? 64 : lastN === -1 ? 0 : lastN;
  }
  const topK = num(o, 'top_k', 0, Number.MAX_SAFE_INTEGER, true);
  if (topK !== undefined) sampling.topK = topK;
  const minP = num(o, 'min_p', 0, 1);
  if (minP !== undefined) sampling.minP = minP;
  const stop = o.stop;
  if (present(stop)) {
    const list = typeof stop === 'string' ? [stop] : stop;
    if (!Array.isArray(list) || !list.every((x) => typeof x === 'string')) throw badField('options.stop', 'must be an array of strings');
    // an empty string (a form's blank field) would end every reply at once: it stops nothing
    const strings = (list as string[]).filter((x) => x !== '');
    if (strings.length > 0) sampling.stop = strings;
  }
  // the hosted API's fixed sampling leaves no room for samplers it does not have
  if (s.vendorParams) for (const k of ['topK', 'minP', 'repetitionPenalty', 'penaltyLastN'] as const) delete sampling[k];
  return { fields, sampling };
}

/** `think` -> K3's thinking switch and effort (chat_template_kwargs). */
function thinkOf(b: Body): Body | undefined {
  const t = b.think;
  if (!present(t)) return undefined;
  if (typeof t === 'boolean') return { thinking: t };
  if (typeof t === 'string' && EFFORTS.includes(t)) return { thinking: true, thinking_effort: t };
  if (t === 'medium') throw badField('think', 'K3 thinks with effort "low", "high" or "max"; it has no "medium" (send true, false, "low", "high" or "max")', 'invalid_thinking_effort');
  throw badField('think', `must be true, false, "low", "high" or "max", got ${JSON.stringify(t)}`);
}

/** `format` -> response_format: "json" a JSON object, a schema held by constrained decoding. */
function formatOf(b: Body): Body | undefined {
  const f = b.format;
  if (!present(f) || f === '') return undefined;
  if (f === 'json') return { type: 'json_object' };
  if (isObject(f)) return { type: 'json_schema', json_schema: { name: 'format', schema: f, strict: true } };
  throw badField('format', `must be "json" or a JSON schema object, got ${JSON.stringify(f)}`);
}

function noImages(v: unknown, field: string): void {
  if (present(v) && (!Array.isArray(v) || v.length > 0)) throw badField(field, 'images are not supported: this model reads text only');
}

/** A tool call of an assistant message: Ollama's arguments are an object; the id is ours when it has none. */
function toolCall(c: unknown, field: string, k: number): { id: string; name: string; call: Body } {
  if (!isObject(c)) throw badField(field, 'must be an object {"function": {"name", "arguments"}}');
  const fn = isObject(c.function) ? c.function : null;
  if (!fn) throw badField(`${field}.function`, 'must be an object with name and arguments');
  if (typeof fn.name !== 'string' || fn.name === '') throw badField(`${field}.function.name`, 'must be a non-empty string');
  const a = fn.arguments;
  if (present(a) && !isObject(a) && typeof a !== 'string') throw badField(`${field}.function.arguments`, 'must be an object');
  const id = typeof c.id === 'string' && c.id !== '' ? c.id : `call_${k + 1}`;
  const args = typeof a === 'string' ? a : JSON.stringify(a ?? {});
  return { id, name: fn.name, call: { id, type: 'function', function: { name: fn.name, arguments: args } } };
}

/**
 * Ollama's messages as OpenAI's. A tool message names its tool (`tool_name`), not its call: it
 * answers the first unanswered call of the assistant message before it with that name (or by
 * `tool_call_id` when it sends one, or the next unanswered call when it names none).
 */
function messagesOf(m: unknown): Body[] {
  if (!Array.isArray(m)) throw badField('messages', 'must be an array of {role, content} messages');
  let open: { id: string; name: string }[] = [];
  return m.map((x, i) => {
    const f = `messages[${i}]`;
    if (!isObject(x)) throw badField(f, 'must be an object with role and content');
    noImages(x.images, `${f}.images`);
    if (present(x.content) && typeof x.content !== 'string') throw badField(`${f}.content`, 'must be a string');
    const content = (x.content as string | undefined) ?? '';
    if (x.role === 'assistant') {
      if (present(x.thinking) && typeof x.thinking !== 'string') throw badField(`${f}.thinking`, 'must be a string');
      if (present(x.tool_calls) && !Array.isArray(x.tool_calls)) throw badField(`${f}.tool_calls`, 'must be an array');
      const calls = ((x.tool_calls as unknown[] | undefined) ?? []).map((c, k) => toolCall(c, `${f}.tool_calls[${k}]`, k));
      open = calls.map(({ id, name }) => ({ id, name }));
      return { role: 'assistant', content, ...(x.thinking ? { reasoning_content: x.thinking } : {}), ...(calls.length > 0 ? { tool_calls: calls.map((c) => c.call) } : {}) };
    }
    if (x.role !== 'tool') return { role: x.role, content };
    for (const k of ['tool_name', 'tool_call_id']) if (present(x[k]) && typeof x[k] !== 'string') throw badField(`${f}.${k}`, 'must be a string');
    const byId = x.tool_call_id as string | undefined;
    const name = x.tool_name as string | undefined;
    const at = byId ? open.findIndex((c) => c.id === byId) : name ? open.findIndex((c) => c.name === name) : open.length > 0 ? 0 : -1;
    if (at >= 0) return { role: 'tool', tool_call_id: open.splice(at, 1)[0]!.id, content };
    // no call of the last assistant message: the renderer takes the tool's name as it is
    return { role: 'tool', tool_call_id: byId || name || `unanswered_${i}`, ...(name ? { name } : {}), content };
  });
}

/** What /api/chat and /api/generate share: think, format, options; `keep_alive` is accepted and ignored. */
function common(b: Body, s: Served): { body: Body; sampling: OllamaSampling } {
  const { fields, sampling } = optionsOf(b, s);
  if (present(b.stream) && typeof b.stream !== 'boolean') throw badField('stream', 'must be a boolean');
  if (present(b.keep_alive) && typeof b.keep_alive !== 'string' && typeof b.keep_alive !== 'number') throw badField('keep_alive', 'must be a duration ("5m") or a number of seconds');
  if (b.logprobs === true || present(b.top_logprobs)) throw badField('logprobs', 'is not supported on Ollama\'s routes here; /v1/chat/completions has logprobs');
  const body: Body = { ...fields };
  const think = thinkOf(b);
  if (think) body.chat_template_kwargs = think;
  const format = formatOf(b);
  if (format) body.response_format = format;
  return { body, sampling };
}

/** Whether Ollama streams the answer: its default is true. */
export const streams = (b: Body): boolean => b.stream !== false;

/** An /api/chat body as the chat body for prepareTurn. */
export function chatBody(s: Served, b: Body): { body: Body; sampling: OllamaSampling } {
  const { body, sampling } = common(b, s);
  body.messages = messagesOf(b.messages);
  if (present(b.tools)) body.tools = b.tools;
  return { body, sampling };
}

export interface GenerateRequest {
  /** The chat body (templated), or null for `raw`. */
  body: Body | null;
  sampling: OllamaSampling;
  /** The OpenAI sampling fields (raw: for generationOptions). */
  fields: Body;
  prompt: string;
  /** Raw: token ids that go before the prompt's (a previous answer's `context`). */
  context: number[];
}

/** An /api/generate body: the prompt (and system) as one user turn, or the prompt as it is with `raw`. */
export function generateRequest(s: Served, b: Body): GenerateRequest {
  if (present(b.prompt) && typeof b.prompt !== 'string') throw badField('prompt', 'must be a string');
  const prompt = (b.prompt as string | undefined) ?? '';
  if (present(b.suffix) && b.suffix !== '') throw badField('suffix', 'is not supported: K3 has no fill-in-the-middle format');
  if (present(b.template) && b.template !== '') throw badField('template', 'is not supported: K3 renders its own chat format');
  noImages(b.images, 'images');
  if (present(b.raw) && typeof b.raw !== 'boolean') throw badField('raw', 'must be a boolean');
  if (present(b.system) && typeof b.system !== 'string') throw badField('system', 'must be a string');
  const ctx = b.context;
  if (present(ctx) && !(Array.isArray(ctx) && ctx.every((x) => Number.isInteger(x) && x >= 0 && x < s.kimi.vocabSize))) {
    throw badField('context', `must be an array of token ids (0 .. ${s.kimi.vocabSize - 1})`);
  }
  const context = (ctx as number[] | undefined) ?? [];
  const { body, sampling } = common(b, s);
  if (b.raw === true) {
    for (const k of ['system', 'think', 'format'] as const) if (present(b[k]) && b[k] !== '') throw badField(k, 'needs the chat template: with raw: true the prompt is sent as it is');
    return { body: null, sampling, fields: body, prompt, context };
  }
  if (context.length > 0) throw badField('context', 'is only taken with raw: true here (K3 has no plain continuation of a templated turn); send the conversation to /api/chat');
  const messages: Body[] = [];
  if (b.system) messages.push({ role: 'system', content: b.system });
  messages.push({ role: 'user', content: prompt });
  return { body: { ...body, messages }, sampling, fields: body, prompt, context };
}
