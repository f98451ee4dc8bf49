// Kimi K3 (docs/spec/ARCHITECTURE.md §4.7, docs/spec/K3.md §6.2): Kimi Linear's blocks with Attention Residuals in
// place of the residual stream. Per token: a running partial sum `prefix` and the list of block
// snapshots B; a layer mixes them before attention and before the FFN.

import type { AttnResNames } from '../checkpoint/names.js';
import { foldWeights } from './attnres.js';
import type { BlockInput } from './block-input.js';
import { attention, bundle, BundleKind, embed, ffn, head, normGain, type Block } from './decoder.js';
import { addInPlace } from './ops.js';
import type { Batch, SequenceState } from './state.js';
import type { Taps } from './taps.js';

/** The fold of an AttnRes site (attention or FFN of layer l, or the output), made once. */
function fold(b: Block, kind: BundleKind, l: number, names: () => AttnResNames): Promise<Float32Array> {
  return bundle(b, kind, l, async () => {
    const D = b.cfg.hiddenSize, n = names();
    return foldWeights(await b.store.vector(n.norm, D), await b.store.vector(n.proj, D));
  });
}

/**
 * Layer l (S1–S8) for T tokens: `p` is the previous layer's output [T, D]; `B` the snapshots
 * (each [T, D]), appended to at block boundaries. Returns the layer's output.
 */
export async function k3Layer(b: Block, l: number, p: Float32Array, B: Float32Array[], T: number, state: SequenceState | Batch): Promise<Float32Array> {
  const { cfg } = b;
  const D = cfg.hiddenSize;
  const eps = cfg.rmsNormEps;
  let prefix: Float32Array | null = p;
  // each block's input: RMSNorm of the mix of the snapshots and the stream (the stream alone
  // before the first snapshot), computed by the block (block-input.ts)
  const input = (cands: Float32Array[], f: Float32Array | null, norm: Float32Array): BlockInput => ({ cands, fold: f, mixEps: eps, norm, normEps: eps, T, D });
  const xa = input([...B, prefix], B.length > 0 ? await fold(b, BundleKind.FoldAttn, l, () => b.names.layerAttnRes(l, 'attn')) : null, await normGain(b, 'input', l));
  if (l % cfg.attnResBlock! === 0) {
    B.push(prefix); // snapshot the pre-mix stream, then start a new block
    prefix = null;
  }
  const a = await attention(b, l, xa, T, state);
  // In place: the stream `prefix` is this layer's to change. It is p, the last layer's own new
  // output, only between block boundaries (at one, p went into B and prefix started afresh), or a
  // block output (attention's, the FFN's: new arrays each).
  prefix = prefix ? addInPlace(prefix, a) : a;
  const f = await ffn(b, l, input([...B, prefix], await fold(b, BundleKind.FoldMlp, l, () => b.names.layerAttnRes(l, 'mlp')), await normGain(b, 'post', l)), T);
  return addInPlace(prefix, f);
}

/**
 * The state after layer l in the tapped stream: a copy of the running sum `p`, or the mixture layer
 * l+1's attention reads (its fold, already made or made for that layer anyway; the stream alone
 * before the first snapshot, as k3Layer), or the output mixture `hL` after the last layer.
 */
async function tapState(b: Block, stream: Taps['stream'], l: number, p: Float32Array, B: Float32Array[], T: number): Promise<Float32Array | null> {
  if (stream === 'prefix') return p.slice();
  if (l === b.cfg.numLayers - 1) return null; // hL: taken after the output mix
  if (B.length === 0) return p.slice();
  const f = await fold(b, BundleKind.FoldAttn, l + 1, () => b.names.layerAttnRes(l + 1, 'attn'));
  return b.compute.attnResMix([...B, p], T, b.cfg.hiddenSize, f, b.cfg.rmsNormEps);
}

export async function forwardK3(b: Block, state: SequenceState | Batch, ids: number[], rows: number[], taps?: Taps, pos = 0): Promise<Float32Array> {
  const { cfg } = b;
  const T = ids.length;
  let p = await embed(b, ids);
  const B: Float32Array[] = [];
  const tapped: (Float32Array | null)[] = [];
  for (let l = 0; l < cfg.numLayers; l++) {
    p = await k3Layer(b, l, p, B, T, state);
    b.watch?.layer(l, p);
    // copied now: the next layer adds into p in place
    if (taps?.layers.includes(l)) tapped.push(await tapState(b, taps.stream, l, p, B, T));
  }
  const hL = b.compute.attnResMix([...B, p], T, cfg.hiddenSize, await fold(b, BundleKind.FoldOut, 0, () => b.names.outputAttnRes), cfg.rmsNormEps);
  if (taps) taps.take(pos, T, tapped.map((x) => x ?? hL.slice()));
  return head(b, hL, T, rows);
}
