// Greedy decoding: argmax of the logits, the first maximum winning ties (K3.md §10).

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';

export function argmax(logits: Float32Array, offset = 0, n = logits.length - offset): number {
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

export interface GreedyResult {
  generated: number[];
  prefillSeconds: number;
  /** Seconds of each decode step (the first generated token comes from the prefill). */
  stepSeconds: number[];
}

/**
 * Prefill `prompt`, then generate `n` tokens greedily, one forward call per token.
 * `onToken` sees each id as it is chosen.
 */
export async function greedy(model: Model, state: SequenceState, prompt: number[], n: number, opts: { chunk?: number; onToken?: (id: number) => void } = {}): Promise<GreedyResult> {
  const V = model.config.vocabSize;
  const t0 = performance.now();
  let logits = await model.forward(state, prompt, 'last', opts.chunk);
  const prefillSeconds = (performance.now() - t0) / 1000;
  const generated: number[] = [];
  const stepSeconds: number[] = [];
  for (let i = 0; i < n; i++) {
    const id = argmax(logits, 0, V);
    generated.push(id);
    opts.onToken?.(id);
    if (i === n - 1) break;
    const s = performance.now();
    logits = await model.forward(state, [id], 'last');
    stepSeconds.push((performance.now() - s) / 1000);
  }
  return { generated, prefillSeconds, stepSeconds };
}
