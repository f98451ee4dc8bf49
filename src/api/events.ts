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

/** What a generation may ask beyond its length, stops and sampling: the same for a library call and one job of the engine. */
export interface DecodeOptions {
  /** Report each token's logprob and this many alternatives (0 = just the token's). */
  logprobs?: number;
  signal?: AbortSignal;
  /** Speculative decoding: draft up to N tokens per step from the longest earlier match in the text so far (suffix-draft.ts),
   *  verify them in one forward (greedy output is the same bytes; sampled keeps its distribution). Runs alone. */
  spec?: number;
  /** A DSpark drafter directory (docs/DSPARK.md): its block proposals, drafted from K3's tapped states, verified in one
   *  forward per sweep (greedy output is the same bytes). Its forward runs on the float64 REFERENCE path: small
   *  drafters only. Runs alone; not with `spec` (the suffix drafter). */
  drafter?: string;
  /** With `drafter`: verify exactly this many proposals every sweep (at most its block; default the block, backing
   *  off while nothing is accepted). */
  specWidth?: number;
  /** Also record the run report in the result (`k3 run`'s: bytes read per token by kind, I/O wait, peak RSS). Runs
   *  alone, so the read counters are this run's. */
  report?: boolean;
  /** Hold the output to a grammar (e.g. k3ReplyConstraint): only ids it allows are chosen, as if the others' logits
   *  were -Infinity. One per generation (it keeps the reply's state); not with `spec`. */
  constraint?: TokenConstraint;
}

/** One job of the engine: the library's options resolved to ids and limits. */
export interface JobOptions extends DecodeOptions {
  sampling?: SamplingOptions;
  maxTokens: number;
  stopIds: readonly number[];
  stopStrings?: readonly string[];
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
