// `k3 serve`: an OpenAI-compatible HTTP server on node:http over one loaded model (src/api).
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages (Anthropic's, with
// its count_tokens), GET /v1/models, /api/* (Ollama's: chat, generate, tags, show, ps, version),
// GET /health, GET /metrics, GET / (the chat page). Every
// generation goes through the model's one engine loop, so forward passes never overlap and
// concurrent requests are decoded together. Each failure is answered in OpenAI's error shape
// (Anthropic's and Ollama's on theirs) and the server stays up.

import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KimiModel, ServeOptions, ServerHandle } from '../api/index.js';
import { ReadError, UserError } from '../util/errors.js';
import { isMessagesPath, messagesRoute, sendAnthropicError } from './anthropic.js';
import { readJson } from './body.js';
import { chatCompletions, completions } from './completions.js';
import { ApiError, sendError, sendJson } from './errors.js';
import { Counters, metricsText } from './metrics.js';
import { isOllamaPath, ollamaRoute, sendOllamaError } from './ollama.js';
import { loadPage, servePage } from './page.js';
import type { Served } from './served.js';

export interface RunningServer extends ServerHandle {
  server: http.Server;
}

export async function startServer(kimi: KimiModel, o: ServeOptions): Promise<RunningServer> {
  if (o.apiKey === '') throw new UserError('serve: the API key is empty: no request could pass it (give a key, or none to serve without one)');
  const served: Served = { kimi, name: o.name, maxContext: o.maxContext, defaults: o.defaults, vendorParams: o.vendorParams, thinking: o.thinking, defaultMaxTokens: o.defaultMaxTokens, drafter: o.drafter };
  const counters = new Counters();
  const bodyLimit = o.bodyLimit ?? 4 << 20;
  const maxQueue = o.maxQueue ?? 64;
  const created = Math.floor(Date.now() / 1000);
  const page = loadPage();

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://x');
    const route = `${req.method} ${url.pathname.replace(/\/+$/, '') || '/'}`;
    if (route === 'GET /health') return sendJson(res, 200, { status: 'ok' });
    if ((req.method === 'GET' || req.method === 'HEAD') && servePage(page, url.pathname, res)) return;
    if (isMessagesPath(req.url)) return messagesRoute(route, req, res, { served, apiKey: o.apiKey, bodyLimit, queueFull: () => kimi.engine.stats.queued >= maxQueue });
    // the counters tell who uses the server and how much: behind the key too, unless opened
    const keyed = url.pathname.startsWith('/v1/') || (route === 'GET /metrics' && !o.metricsOpen);
    if (keyed && o.apiKey !== undefined && req.headers.authorization !== `Bearer ${o.apiKey}`) {
      throw new ApiError(401, req.headers.authorization ? 'Incorrect API key provided' : 'Missing API key: send Authorization: Bearer KEY', 'invalid_request_error', null, 'invalid_api_key');
    }
    if (route === 'GET /metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      return void res.end(metricsText(kimi, counters));
    }
    if (isOllamaPath(req.url)) return ollamaRoute(route, req, res, { served, apiKey: o.apiKey, bodyLimit, queueFull: () => kimi.engine.stats.queued >= maxQueue });
    if (route === 'GET /v1/models') return sendJson(res, 200, { object: 'list', data: [{ id: o.name, object: 'model', created, owned_by: 'kimi-k3-ts', max_model_len: o.maxContext }] });
    if (route === 'POST /v1/chat/completions' || route === 'POST /v1/completions') {
      const { json: body, text } = await readJson(req, bodyLimit);
      if (kimi.engine.stats.queued >= maxQueue) throw new ApiError(429, `the server is busy: ${maxQueue} requests are waiting; retry later`, 'rate_limit_exceeded', null, 'queue_full');
      await (route === 'POST /v1/chat/completions' ? chatCompletions(served, req, res, body, text) : completions(served, req, res, body));
      return;
    }
    throw new ApiError(404, `no route ${req.method} ${url.pathname}`, 'invalid_request_error', null, 'not_found');
  };

  const server = http.createServer((req, res) => {
    res.on('finish', () => counters.count(res.statusCode));
    handle(req, res).catch((e: unknown) => {
      const err = toApiError(e);
      const answer = () => (res.headersSent ? res.end() : (isMessagesPath(req.url) ? sendAnthropicError : isOllamaPath(req.url) ? sendOllamaError : sendError)(res, err));
      // 413 before the upload was read: read the rest into nothing first, so that the client,
      // still sending, sees the answer instead of a reset connection
      if (err.status === 413 && !req.readableEnded && !req.destroyed) {
        req.once('end', answer);
        req.resume();
      } else answer();
    });
  });
  server.requestTimeout = 0; // long generations
  // Idle keep-alive sockets live 65 s (Node's default is 5 s): a client whose event loop was
  // busy longer than that (a script between two requests, e.g. test/server/serve.test.ts's spawnSync of
  // `k3 logits`) otherwise reuses a socket the server has just closed and sees "fetch failed".
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new UserError(`serve: cannot listen on ${o.host ?? '127.0.0.1'}:${o.port ?? 8080} (${e.code ?? e.message})`, 1)));
    server.listen(o.port ?? 8080, o.host ?? '127.0.0.1', () => resolve());
  });
  const a = server.address() as AddressInfo;
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return {
    server,
    url: `http://${host}:${a.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof ReadError) return new ApiError(500, `reading the weights failed: ${e.message}`, 'server_error', null, 'read_fault');
  if (e instanceof UserError) return new ApiError(400, e.message, 'invalid_request_error');
  return new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`, 'server_error');
}
