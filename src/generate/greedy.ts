// Generation loop: prefill the prompt, then one forward call per new token. Greedy decoding is
// argmax with the first maximum winning ties (docs/spec/K3.md §10); other samplers plug in as `pick`.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { prefill } from './prefill.js';
import type { RunRecorder } from './report.js';

export function argmax(logits: ArrayLike<number>, offset = 0, n = logits.length - offset): number {
  let best = 0;
  let bestV = -Infinity;
  for (let i = 0; i < n; i++) {
    const v = logits[offset + i]!;
    if (v > bestV) {
      bestV = v;
      best = i;
    }
  }
  return best;
}

const yieldToEvents = (): Promise<void> => new Promise((r) => setImmediate(r));

export interface GenerateOptions {
  chunk?: number;
  /** Choose the next id from the logits of the last position (default: argmax). */
  pick?: (logits: Float32Array, generated: readonly number[]) => number;
  /** Sees each id as it is chosen; return true to stop after it. */
  onToken?: (id: number) => boolean | void;
  recorder?: RunRecorder;
  /** Stops the prompt at the next chunk (nothing is generated then). */
  signal?: AbortSignal;
}

export interface GreedyResult {
  generated: number[];
  prefillSeconds: number;
  /** Seconds of each decode step (the first generated token comes from the prefill). */
  stepSeconds: number[];
}

/** Prefill `prompt`, then generate up to `n` tokens. */
export async function greedy(model: Model, state: SequenceState, prompt: number[], n: number, opts: GenerateOptions = {}): Promise<GreedyResult> {
  const V = model.config.vocabSize;
  const pick = opts.pick ?? ((l: Float32Array) => argmax(l, 0, V));
  const t0 = performance.now();
  const first = await prefill(model, state, prompt, opts.chunk, opts.signal);
  const prefillSeconds = (performance.now() - t0) / 1000;
  const generated: number[] = [];
  const stepSeconds: number[] = [];
  // stopped within the prompt: the report counts the tokens that went in
  opts.recorder?.prefillDone(first ? prompt.length : state.position);
  if (!first) return { generated, prefillSeconds, stepSeconds };
  let logits = first;
  for (let i = 0; i < n; i++) {
    const id = pick(logits, generated);
    if (i === 0) opts.recorder?.firstToken();
    generated.push(id);
    if (opts.onToken?.(id) === true || i === n - 1) break;
    // Let the event loop run between tokens: a SIGINT handler or a closed stdout (EPIPE) is
    // only seen there (the forward pass itself never returns to the loop).
    await yieldToEvents();
    const s = performance.now();
    logits = await model.forward(state, [id], 'last');
    stepSeconds.push((performance.now() - s) / 1000);
    opts.recorder?.step(id);
  }
  return { generated, prefillSeconds, stepSeconds };
}
