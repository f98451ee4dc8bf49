// A prompt fed to the model chunk by chunk, returning to the event loop between chunks: a signal
// handler, a closed client or another request is served within a chunk's time, however long the
// prompt (a forward pass itself never returns to the loop). The logits are those of one call
// over the whole prompt: the result does not depend on the chunk size.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import type { Taps } from '../model/taps.js';

const yieldToEvents = (): Promise<void> => new Promise((r) => setImmediate(r));

/** The next chunk of `prompt` into `state` (which holds its first state.position ids); the last
 *  position's logits once the prompt is all in, else null. */
export async function prefillStep(model: Model, state: SequenceState, prompt: readonly number[], chunk: number, taps?: Taps): Promise<Float32Array | null> {
  const from = state.position;
  if (from >= prompt.length) throw new Error(`prefill: the state holds ${from} of a prompt of ${prompt.length} ids`);
  const part = prompt.slice(from, from + chunk);
  const last = from + part.length >= prompt.length;
  const logits = await model.forward(state, part, last ? 'last' : 'none', chunk, taps);
  return last ? logits : null;
}

/** Feed `prompt` (from state.position on); the last position's logits, or null when `signal`
 *  aborted between two chunks (the state then holds part of the prompt). `taps`: see Model.forward. */
export async function prefill(model: Model, state: SequenceState, prompt: readonly number[], chunk = 64, signal?: AbortSignal, taps?: Taps): Promise<Float32Array | null> {
  for (;;) {
    const logits = await prefillStep(model, state, prompt, chunk, taps);
    if (logits) return logits;
    await yieldToEvents();
    if (signal?.aborted) return null;
  }
}
