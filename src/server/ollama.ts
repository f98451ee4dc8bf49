// Ollama's API under /api/ as a front of the one chat turn (chat-turn.ts), so chat front ends and
// editor plugins that speak Ollama can use K3: POST /api/chat and /api/generate (NDJSON streams by
// default, as Ollama), GET /api/tags, /api/ps, /api/version, POST /api/show. Every error on these
// routes is Ollama's `{"error": "..."}`, mid-stream as a last line.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { generationOptions } from './params.js';
import { readJson } from './body.js';
import { prepareTurn, type TurnDelta, type TurnOutcome } from './chat-turn.js';
import { ApiError, badField, sendJson } from './errors.js';
import { ChatLines, chatAnswer, generateAnswer, generateLine, head, stats } from './ollama-reply.js';
import { chatBody, generateRequest, requestedModel, streams, type OllamaSampling } from './ollama-request.js';
import { OLLAMA_API_VERSION, running, show, tags } from './ollama-models.js';
import { clientGone } from './sse.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;
type TurnSampling = Parameters<typeof prepareTurn>[3];

export interface OllamaContext {
  served: Served;
  /** Required as `Authorization: Bearer KEY` when set (Ollama's clients send it as a header). */
  apiKey?: string;
  bodyLimit: number;
  /** Whether the engine's queue is full: a new generation is then refused with 503, as Ollama's. */
  queueFull(): boolean;
}

/** Whether a request URL (path, maybe with a query) belongs to these routes. */
export function isOllamaPath(url: string | undefined): boolean {
  const p = new URL(url ?? '/', 'http://x').pathname;
  return p === '/api' || p.startsWith('/api/');
}

export function sendOllamaError(res: ServerResponse, e: ApiError): void {
  sendJson(res, e.status, { error: e.message });
}

/** Routes Ollama has and this server does not (it serves one model, loaded at start). */
const ELSEWHERE: Record<string, string> = {
  '/api/pull': 'pull models',
  '/api/push': 'push models',
  '/api/create': 'create models',
  '/api/copy': 'copy models',
  '/api/delete': 'delete models',
  '/api/embed': 'compute embeddings',
  '/api/embeddings': 'compute embeddings',
};

/** One NDJSON line per object, flushed as written. */
class Lines {
  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
    res.flushHeaders();
  }

  send(line: unknown): void {
    if (!this.res.writableEnded && !this.res.destroyed) this.res.write(`${JSON.stringify(line)}\n`);
  }

  end(): void {
    if (!this.res.writableEnded && !this.res.destroyed) this.res.end();
  }
}

const internal = (e: unknown): ApiError => (e instanceof ApiError ? e : new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`, 'server_error'));

/** Ollama's answer to a request with nothing to generate: the model is (already) loaded. */
const loaded = (model: string, b: Body, text: Body): Body => ({ ...head(model), ...text, done: true, done_reason: b.keep_alive === 0 || b.keep_alive === '0' ? 'unload' : 'load' });

interface LineSink {
  delta(d: TurnDelta): void;
  finish(o: TurnOutcome): void;
}

/**
 * Prepare the turn of a chat `body`, refuse it while the queue is full, run it, and answer it whole
 * or as lines (as request `b` asks): `lines` maps the deltas and the end, `whole` the outcome.
 */
async function answerTurn(
  ctx: OllamaContext, req: IncomingMessage, res: ServerResponse, b: Body, body: Body, sampling: TurnSampling,
  lines: (send: (l: Body) => void) => LineSink, whole: (o: TurnOutcome) => Body,
): Promise<void> {
  const turn = prepareTurn(ctx.served, body, undefined, sampling);
  if (ctx.queueFull()) throw busy();
  const signal = clientGone(req, res);
  if (!streams(b)) {
    const o = await turn.run(signal);
    if (o.result.stopReason === 'aborted' && o.stopSequence === null) return;
    return sendJson(res, 200, whole(o));
  }
  const out = new Lines(res);
  const l = lines((x) => out.send(x));
  try {
    const o = await turn.run(signal, (d) => l.delta(d));
    if (!(o.result.stopReason === 'aborted' && o.stopSequence === null)) l.finish(o);
  } catch (e) {
    if (!signal.aborted) out.send({ error: internal(e).message });
  }
  out.end();
}

async function chat(ctx: OllamaContext, req: IncomingMessage, res: ServerResponse, b: Body, started: bigint): Promise<void> {
  const model = requestedModel(ctx.served, b);
  if (Array.isArray(b.messages) && b.messages.length === 0) return sendJson(res, 200, loaded(model, b, { message: { role: 'assistant', content: '' } }));
  const { body, sampling } = chatBody(ctx.served, b);
  await answerTurn(
    ctx, req, res, b, body, sampling,
    (send) => {
      const c = new ChatLines(model, send);
      return { delta: (d) => c.delta(d), finish: (o) => c.finish(o, started) };
    },
    (o) => chatAnswer(model, o, started),
  );
}

async function generate(ctx: OllamaContext, req: IncomingMessage, res: ServerResponse, b: Body, started: bigint): Promise<void> {
  const s = ctx.served;
  const model = requestedModel(s, b);
  const g = generateRequest(s, b);
  if (g.prompt === '' && g.context.length === 0 && !b.system) return sendJson(res, 200, loaded(model, b, { response: '' }));
  if (g.body === null) return raw(ctx, req, res, model, g.prompt, g.context, g.fields, g.sampling, streams(b), started);
  await answerTurn(
    ctx, req, res, b, g.body, g.sampling,
    (send) => ({
      delta: (d) => {
        const line = generateLine(model, d);
        if (line) send(line);
      },
      finish: (o) => send({ ...head(model), response: '', ...stats(o.result, o.usage.prompt_tokens, started) }),
    }),
    (o) => generateAnswer(model, o, started),
  );
}

/** /api/generate with raw: the prompt's tokens as they are (after `context`'s), no template, no reply parsing. */
async function raw(ctx: OllamaContext, req: IncomingMessage, res: ServerResponse, model: string, prompt: string, context: number[], fields: Body, sampling: OllamaSampling, stream: boolean, started: bigint): Promise<void> {
  const s = ctx.served;
  if (!s.kimi.tokenizer && prompt !== '') throw badField('prompt', 'text prompts need the tokenizer files (tiktoken.model, tokenizer_config.json)');
  const ids = [...context, ...(prompt === '' ? [] : s.kimi.tokenize(prompt))];
  const room = s.maxContext - ids.length;
  if (room < 1) throw badField('prompt', `the prompt is ${ids.length} tokens; this server holds ${s.maxContext} tokens of context`);
  const opts = { ...generationOptions(fields, s, true), ...sampling };
  if (ctx.queueFull()) throw busy();
  const signal = clientGone(req, res);
  const gen = s.kimi.generate(ids, { ...opts, maxTokens: Math.min(opts.maxTokens, room), ignoreEos: false, signal });
  const out = stream ? new Lines(res) : null;
  try {
    for await (const e of gen) if (e.text) out?.send({ ...head(model), response: e.text, done: false });
    const r = await gen.result;
    if (r.stopReason === 'aborted') return out?.end();
    const last = { ...head(model), response: out ? '' : r.text, ...stats(r, ids.length, started), context: [...ids, ...r.ids] };
    if (out) out.send(last);
    else sendJson(res, 200, last);
  } catch (e) {
    if (!out) throw e;
    if (!signal.aborted) out.send({ error: internal(e).message });
  }
  out?.end();
}

const busy = () => new ApiError(503, 'server busy, please try again: the queue of waiting requests is full', 'server_error');

function checkKey(req: IncomingMessage, key: string | undefined): void {
  if (key === undefined) return;
  if (req.headers.authorization === `Bearer ${key}`) return;
  throw new ApiError(401, req.headers.authorization ? 'unauthorized: wrong API key' : 'unauthorized: send Authorization: Bearer KEY');
}

/** `route` is the server's "METHOD /path" (trailing slashes dropped). Throws ApiError for the server to answer. */
export async function ollamaRoute(route: string, req: IncomingMessage, res: ServerResponse, ctx: OllamaContext): Promise<void> {
  const started = process.hrtime.bigint();
  checkKey(req, ctx.apiKey);
  const [method, path] = route.split(' ') as [string, string];
  const get = method === 'GET' || method === 'HEAD';
  const s = ctx.served;
  if (get && path === '/api/version') return sendJson(res, 200, { version: OLLAMA_API_VERSION });
  if (get && path === '/api/tags') return sendJson(res, 200, tags(s));
  if (get && path === '/api/ps') return sendJson(res, 200, running(s));
  if (method === 'POST' && path === '/api/show') {
    const { json } = await readJson(req, ctx.bodyLimit);
    requestedModel(s, json);
    return sendJson(res, 200, show(s));
  }
  if (method === 'POST' && (path === '/api/chat' || path === '/api/generate')) {
    const { json } = await readJson(req, ctx.bodyLimit);
    return (path === '/api/chat' ? chat : generate)(ctx, req, res, json, started);
  }
  const what = ELSEWHERE[path];
  if (what) throw new ApiError(501, `k3 serve does not ${what}: it serves one model, "${s.name}", loaded at start`, 'not_implemented');
  throw new ApiError(404, `no route ${method} ${path}`, 'not_found_error');
}
