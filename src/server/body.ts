// Reading a request body: at most `limit` bytes (413 past it, the rest of the upload is not
// read), then JSON (400 when malformed, or not an object).

import type { IncomingMessage } from 'node:http';
import { ApiError } from './errors.js';

/** The body as an object, and its text (K3 renders from the text, read with Python's number
 *  and key-order semantics, as Moonshot's renderer reads it). */
export async function readJson(req: IncomingMessage, limit: number): Promise<{ json: Record<string, unknown>; text: string }> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) throw new ApiError(413, `request body is ${declared} bytes; the limit is ${limit}`, 'invalid_request_error', null, 'body_too_large');
  const parts: Buffer[] = [];
  let n = 0;
  for await (const chunk of req) {
    n += (chunk as Buffer).length;
    if (n > limit) throw new ApiError(413, `request body is over the limit of ${limit} bytes`, 'invalid_request_error', null, 'body_too_large');
    parts.push(chunk as Buffer);
  }
  let v: unknown;
  const text = Buffer.concat(parts).toString('utf8');
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, `request body is not valid JSON (${(e as Error).message})`, 'invalid_request_error', null, 'invalid_json');
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new ApiError(400, 'request body must be a JSON object', 'invalid_request_error', null, 'invalid_json');
  return { json: v as Record<string, unknown>, text };
}
