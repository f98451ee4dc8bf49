// Request fields -> generation options, each checked with a 400 naming the field. The sampling
// fields are OpenAI's (temperature, top_p, stop, seed, presence_penalty, frequency_penalty,
// logprobs / top_logprobs, logit_bias, n = 1); max_tokens is bounded by the context the server was planned for.

import type { GenerateOptions } from '../api/index.js';
import { badField } from './errors.js';
import type { Served } from './served.js';
import { checkVendorParams } from './vendor-params.js';

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

/** OpenAI's logit_bias: {"token id": bias in [-100, 100]}, ids within the vocabulary. */
function logitBias(b: Body, vocabSize: number): Map<number, number> | undefined {
  const v = b.logit_bias;
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw badField('logit_bias', 'must be an object mapping token ids to biases in [-100, 100]');
  const out = new Map<number, number>();
  for (const [k, x] of Object.entries(v as Body)) {
    if (!/^(0|[1-9]\d*)$/.test(k) || Number(k) >= vocabSize) throw badField('logit_bias', `key ${JSON.stringify(k)} is not a token id (0 .. ${vocabSize - 1})`);
    if (typeof x !== 'number' || !Number.isFinite(x) || x < -100 || x > 100) throw badField('logit_bias', `bias of token ${k} must be a number in [-100, 100], got ${JSON.stringify(x)}`);
    out.set(Number(k), x);
  }
  return out;
}

export type GenerationFields = GenerateOptions & { maxTokens: number; logprobs?: number };

/** The options every endpoint shares. A max_tokens past the context is accepted: the reply
 *  then ends at the context with finish_reason "length", as Moonshot's API does. */
export function generationOptions(b: Body, served: Served, chat: boolean): GenerationFields {
  const { maxContext } = served;
  const vocabSize = served.kimi.vocabSize;
  if (served.vendorParams && chat) checkVendorParams(b);
  const n = int(b, 'n', 1, 1);
  void n;
  const mt = int(b, 'max_completion_tokens', 1, Number.MAX_SAFE_INTEGER) ?? int(b, 'max_tokens', 1, Number.MAX_SAFE_INTEGER);
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
  const d = served.defaults ?? {};
  return {
    // a chat reply may take the rest of the context (a thinking model needs room), as vLLM
    maxTokens: Math.min(mt ?? (chat ? (served.defaultMaxTokens ?? maxContext) : 16), maxContext),
    temperature: num(b, 'temperature', 0, 2) ?? d.temperature ?? 1, // the model's recommended value, else OpenAI's default
    topP: num(b, 'top_p', Number.MIN_VALUE, 1) ?? d.top_p,
    seed: int(b, 'seed', 0, Number.MAX_SAFE_INTEGER),
    presencePenalty: num(b, 'presence_penalty', -2, 2),
    frequencyPenalty: num(b, 'frequency_penalty', -2, 2),
    logitBias: logitBias(b, vocabSize),
    stop,
    logprobs,
  };
}
