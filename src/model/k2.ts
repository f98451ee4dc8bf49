// Kimi K2 / DeepSeek-V3 (docs/spec/ARCHITECTURE.md §2.4): pre-norm residual layers, MLA with YaRN rope on
// every layer, dense MLP for the first layers then MoE.

import { attention, embed, ffn, head, layerNorm, type Block } from './decoder.js';
import { addInPlace } from './ops.js';
import type { Batch, SequenceState } from './state.js';

/** Forward T new tokens; returns logits [rows.length, V] for the requested chunk rows. */
export async function forwardK2(b: Block, state: SequenceState | Batch, ids: number[], rows: number[]): Promise<Float32Array> {
  const T = ids.length;
  const h = await embed(b, ids);
  for (let l = 0; l < b.cfg.numLayers; l++) {
    addInPlace(h, await attention(b, l, await layerNorm(b, 'input', l, h, T), T, state));
    addInPlace(h, await ffn(b, l, await layerNorm(b, 'post', l, h, T), T));
    b.watch?.layer(l, h);
  }
  return head(b, h, T, rows);
}
