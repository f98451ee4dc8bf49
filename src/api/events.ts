// What a generation reports: its tokens as they come, its final result, the options of one job,
// and the log-probabilities of a token (shared by the batched loop and generations run alone).

import type { TokenConstraint } from '../generate/constrain/index.js';
import type { RunSummary } from '../generate/report.js';
import type { SamplingOptions } from '../generate/sampling.js';
import type { StopReason } from '../generate/stop.js';

export interface TopLogprob {
  id: number;
  logprob: number;
}

/** One generated token. */
export interface TokenEvent {
  id: number;
  /** The text this token makes safe to show (may be '' while a character or stop string is incomplete). */
  text: string;
  /** log p(id) under the model's distribution (raw logits, before penalties and temperature), when asked for. */
  logprob?: number;
  top?: TopLogprob[];
}

export interface GenerationResult {
  /** Generated ids (a stop id included when one ended the reply). */
  ids: number[];
  text: string;
  stopReason: StopReason | 'aborted';
  promptTokens: number;
  /** Prompt tokens taken from a held state, not processed again. */
  cachedTokens: number;
  timings: { queueSeconds: number; promptSeconds: number; decodeSeconds: number; firstTokenSeconds: number; tokensPerSecond: number };
  /** With `report`: the run report of `k3 run` (bytes read per token by kind, I/O wait, peak RSS, per-step rows). */
  report?: RunSummary;
}

export interface JobOptions {
  sampling?: SamplingOptions;
  maxTokens: number;
  stopIds: readonly number[];
  stopStrings?: readonly string[];
  /** Also report the logprob of each token and this many alternatives (0 = just the token's). */
  logprobs?: number;
  signal?: AbortSignal;
  /** Speculative decoding: draft up to this many tokens per step (the longest earlier match in the text: suffix-draft.ts), verified in one forward. Runs alone. */
  spec?: number;
  /** A DSpark drafter directory, drafting on the reference path (GenerateOptions.drafter). Runs alone. */
  drafter?: string;
  /** With drafter: proposals verified every sweep (GenerateOptions.specWidth). */
  specWidth?: number;
  /** Record the run report (GenerationResult.report). Runs alone, so the read counters are this run's. */
  report?: boolean;
  /** Only ids it allows are chosen (as if the others' logits were -Infinity); one per request, it keeps the reply's state. */
  constraint?: TokenConstraint;
}

/** log-softmax of the raw logits in double, at `id` and for the `k` most likely ids (ties by id). */
export function logprobsOf(logits: Float32Array, V: number, id: number, k: number): { logprob: number; top: TopLogprob[] } {
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(logits[i]! - max);
  const lse = max + Math.log(sum);
  const top: TopLogprob[] = [];
  if (k > 0) {
    const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => logits[b]! - logits[a]! || a - b);
    for (const i of order.slice(0, k)) top.push({ id: i, logprob: logits[i]! - lse });
  }
  return { logprob: logits[id]! - lse, top };
}
