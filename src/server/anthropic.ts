// POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API as a front of
// the one chat turn (chat-turn.ts), so the Anthropic SDK and agents that speak it can use K3.
// The key may come as `x-api-key` (Anthropic's) or `Authorization: Bearer`; every error on these
// routes is answered in Anthropic's shape, mid-stream ones as an `error` event.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { readJson } from './body.js';
import { prepareTurn, type PreparedTurn } from './chat-turn.js';
import { ApiError, sendJson } from './errors.js';
import { toChatBody } from './anthropic-request.js';
import { MessageEvents, anthropicMessage } from './anthropic-reply.js';
import { EventStream, clientGone } from './sse.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;

export interface MessagesContext {
  served: Served;
  /** Required (x-api-key or Bearer) when set. */
  apiKey?: string;
  bodyLimit: number;
  /** Whether the engine's queue is full: a new message is then refused with 529 overloaded_error. */
  queueFull(): boolean;
  /** The turn to run; tests pass a scripted one. */
  prepare?: (s: Served, body: Body) => PreparedTurn;
}

/** Whether a request URL (path, maybe with a query) belongs to these routes. */
export function isMessagesPath(url: string | undefined): boolean {
  const p = new URL(url ?? '/', 'http://x').pathname.replace(/\/+$/, '');
  return p === '/v1/messages' || p.startsWith('/v1/messages/');
}

/** Anthropic's error type for an HTTP status. */
function errorType(status: number): string {
  const known: Record<number, string> = { 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error', 529: 'overloaded_error' };
  return known[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

const errorBody = (e: ApiError) => ({ type: 'error', error: { type: errorType(e.status), message: e.message } });

export function sendAnthropicError(res: ServerResponse, e: ApiError): void {
  sendJson(res, e.status, errorBody(e));
}

function checkKey(req: IncomingMessage, key: string | undefined): void {
  if (key === undefined) return;
  const bearer = req.headers.authorization?.replace(/^Bearer /, '');
  const given = req.headers['x-api-key'];
  if (given === undefined && bearer === undefined) throw new ApiError(401, 'missing API key: send x-api-key: KEY (or Authorization: Bearer KEY)');
  if (given !== key && bearer !== key) throw new ApiError(401, 'invalid x-api-key');
}

/** `route` is the server's "METHOD /path" (trailing slashes dropped). Throws ApiError for the server to answer. */
export async function messagesRoute(route: string, req: IncomingMessage, res: ServerResponse, ctx: MessagesContext): Promise<void> {
  const count = route === 'POST /v1/messages/count_tokens';
  if (!count && route !== 'POST /v1/messages') throw new ApiError(404, `no route ${route}`);
  checkKey(req, ctx.apiKey);
  const { json: body } = await readJson(req, ctx.bodyLimit);
  const turn = (ctx.prepare ?? prepareTurn)(ctx.served, toChatBody(ctx.served, body, count));
  if (count) return sendJson(res, 200, { input_tokens: turn.promptTokens });
  if (ctx.queueFull()) throw new ApiError(529, 'the server is overloaded: its queue is full; retry later');
  const id = `msg_${randomUUID().replace(/-/g, '')}`;
  const model = ctx.served.name;
  const signal = clientGone(req, res);
  if (body.stream !== true) {
    const outcome = await turn.run(signal);
    if (!signal.aborted) sendJson(res, 200, anthropicMessage(id, model, outcome));
    return;
  }
  const out = new EventStream(res);
  const events = new MessageEvents((type, data) => out.send(data, type));
  events.start(id, model, turn.promptTokens);
  try {
    events.finish(await turn.run(signal, (d) => events.delta(d)));
  } catch (e) {
    const err = e instanceof ApiError ? e : new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`);
    if (!signal.aborted) out.send(errorBody(err), 'error');
  }
  out.end();
}
