// Errors in OpenAI's JSON shape: {"error": {"message", "type", "param", "code"}} with the HTTP
// status a client expects (400 bad request naming the field, 401 key, 404, 413, 429, 500).

import type { ServerResponse } from 'node:http';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = 'invalid_request_error',
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** 400 naming the field. */
export const badField = (param: string, message: string, code = 'invalid_value'): ApiError => new ApiError(400, `${param}: ${message}`, 'invalid_request_error', param, code);

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...headers });
  res.end(data);
}

export function sendError(res: ServerResponse, e: ApiError): void {
  sendJson(res, e.status, { error: { message: e.message, type: e.type, param: e.param, code: e.code } }, e.status === 401 ? { 'www-authenticate': 'Bearer' } : {});
}
