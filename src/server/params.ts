// Request fields -> generation options, each checked with a 400 naming the field. The sampling
// fields are OpenAI's (temperature, top_p, stop, seed, presence_penalty, frequency_penalty,
// logprobs / top_logprobs, n = 1); max_tokens is bounded by the context the server was planned for.

import type { GenerateOptions } from '../api/index.js';
import { badField } from './errors.js';

type Body = Record<string, unknown>;

function num(b: Body, k: string, lo: number, hi: number): number | undefined {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badField(k, `must be a number, got ${JSON.stringify(v)}`);
  if (v < lo || v > hi) throw badField(k, `must be in [${lo}, ${hi}], got ${v}`);
  return v;
}

function int(b: Body, k: string, lo: number, hi: number): number | undefined {
  const v = num(b, k, lo, hi);
  if (v !== undefined && !Number.isInteger(v)) throw badField(k, `must be an integer, got ${v}`);
  return v;
}

export function bool(b: Body, k: string): boolean | undefined {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badField(k, `must be a boolean, got ${JSON.stringify(v)}`);
  return v;
}

/** The options every endpoint shares. `maxContext`: most tokens a request may generate. */
export function generationOptions(b: Body, maxContext: number, chat: boolean): GenerateOptions & { maxTokens: number; logprobs?: number } {
  const n = int(b, 'n', 1, 1);
  void n;
  const mt = int(b, 'max_completion_tokens', 1, Number.MAX_SAFE_INTEGER) ?? int(b, 'max_tokens', 1, Number.MAX_SAFE_INTEGER);
  const field = b.max_completion_tokens !== undefined && b.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens';
  if (mt !== undefined && mt > maxContext) throw badField(field, `${mt} is more than the ${maxContext} tokens of context this server holds`);
  let stop: string[] | undefined;
  const s = b.stop;
  if (typeof s === 'string') stop = [s];
  else if (Array.isArray(s)) {
    if (s.length > 4 || !s.every((x) => typeof x === 'string')) throw badField('stop', 'must be a string or an array of up to 4 strings');
    stop = s as string[];
  } else if (s !== undefined && s !== null) throw badField('stop', 'must be a string or an array of up to 4 strings');
  let logprobs: number | undefined;
  if (chat) {
    const top = int(b, 'top_logprobs', 0, 20);
    if (bool(b, 'logprobs')) logprobs = top ?? 0;
    else if (top !== undefined) throw badField('top_logprobs', 'needs logprobs: true');
  } else logprobs = int(b, 'logprobs', 0, 5);
  return {
    maxTokens: mt ?? Math.min(maxContext, chat ? 512 : 16),
    temperature: num(b, 'temperature', 0, 2) ?? 1, // OpenAI's default
    topP: num(b, 'top_p', Number.MIN_VALUE, 1),
    seed: int(b, 'seed', 0, Number.MAX_SAFE_INTEGER),
    presencePenalty: num(b, 'presence_penalty', -2, 2),
    frequencyPenalty: num(b, 'frequency_penalty', -2, 2),
    stop,
    logprobs,
  };
}
