// The pieces every architecture's forward pass is built from: embedding lookup, one attention
// block (KDA or MLA, by the layer map), one FFN block (dense or MoE), and the head. Weights are
// borrowed from the store per call; the model holds no weight arrays itself.

import type { ModelConfig } from '../checkpoint/config.js';
import { namesOf, type Names } from '../checkpoint/names.js';
import type { WeightStore } from '../store/store.js';
import type { FiniteWatch } from './finite.js';
import type { Compute } from '../graph/compute.js';
import { UserError } from '../util/errors.js';
import { blockInput, type BlockInput } from './block-input.js';
import { kdaForward, type KdaParams } from './kda.js';
import { mlaForward, type MlaParams } from './mla.js';
import { moeForward, type MoeParams } from './moe.js';
import { gatedMlp, linear, rmsNorm } from './ops.js';
import { makeRope, yarnScaleFactor } from './rope.js';
import { SequenceState, type Batch } from './state.js';
import { denseMlpWeights, expertFetch, kdaWeights, mlaWeights, moeWeights } from './weights.js';

export interface Block {
  cfg: ModelConfig;
  names: Names;
  store: WeightStore;
  /** The kernels (or the reference) this block's products run on: its model's. */
  compute: Compute;
  kda: KdaParams | null;
  mla: MlaParams;
  moe: MoeParams;
  /** Where non-finite layer outputs are noticed (finite.ts); set by the model. */
  watch?: FiniteWatch;
  /** Each layer's weight bundles, made on first use (see `bundle`), at kind * numLayers + layer. */
  bundles: (Promise<unknown> | undefined)[];
}

export function makeBlock(cfg: ModelConfig, store: WeightStore, compute: Compute): Block {
  const m = cfg.mla;
  const k = cfg.kda;
  return {
    cfg,
    names: namesOf(cfg),
    store,
    compute,
    kda: k ? { heads: k.heads, headDim: k.headDim, convSize: k.convSize, gateLowerBound: k.gateLowerBound, eps: cfg.rmsNormEps } : null,
    mla: {
      heads: m.heads,
      nopeDim: m.nopeDim,
      ropeDim: m.ropeDim,
      vDim: m.vDim,
      kvLoraRank: m.kvLoraRank,
      scale: (1 / Math.sqrt(m.nopeDim + m.ropeDim)) * (m.rope ? yarnScaleFactor(m.rope.yarn) : 1),
      latentNormEps: m.latentNormEps,
      rope: m.rope ? makeRope(m.ropeDim, m.rope.theta, m.rope.yarn) : null,
    },
    moe: { ...cfg.moe, act: cfg.act, eps: cfg.rmsNormEps },
    bundles: [],
  };
}

/** What a bundle holds: the attention block's weights, the FFN's, the MoE's expert fetch, the
 *  AttnRes folds before attention and before the FFN, the output fold (layer 0), the two norm
 *  gains, and the head's final norm and lm_head (layer 0). */
export const BundleKind = { Attention: 0, Ffn: 1, Experts: 2, FoldAttn: 3, FoldMlp: 4, FoldOut: 5, InputNorm: 6, PostNorm: 7, Head: 8 } as const;
export type BundleKind = (typeof BundleKind)[keyof typeof BundleKind];

/**
 * Layer l's bundle of `kind`, made by `make` on first use and kept: the weight bundles hold the
 * store's matrix handles (which lend their bytes per call, streamed or not) and its small tensors
 * (which the store keeps anyway), so keeping them holds no weight bytes; the folds are counted in
 * the plan (store/plan.ts derivedBytes). Kept because glue code is slow here: it runs right after
 * products that stream the weights through every cache, so rebuilding names, handles and awaits for
 * every layer of every token costs tens of microseconds each. A failed make is not kept.
 */
export function bundle<T>(b: Block, kind: BundleKind, l: number, make: () => Promise<T>): Promise<T> {
  const i = kind * b.cfg.numLayers + l;
  let p = b.bundles[i] as Promise<T> | undefined;
  if (!p) {
    p = make();
    b.bundles[i] = p;
    p.catch(() => {
      if (b.bundles[i] === p) b.bundles[i] = undefined;
    });
  }
  return p;
}

/** Embedding rows of `ids`: [T, D] (plain row lookup, no scaling; docs/spec/ARCHITECTURE.md §1.3). */
export async function embed(b: Block, ids: number[]): Promise<Float32Array> {
  const { cfg } = b;
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id >= cfg.vocabSize) throw new UserError(`token id ${id} is outside the vocabulary (0 .. ${cfg.vocabSize - 1})`);
  }
  return b.store.embedRows(ids);
}

/** The gain of layer l's input norm (before attention) or post-attention norm (before the FFN). */
export function normGain(b: Block, which: 'input' | 'post', l: number): Promise<Float32Array> {
  const D = b.cfg.hiddenSize;
  return which === 'input'
    ? bundle(b, BundleKind.InputNorm, l, () => b.store.vector(b.names.inputNorm(l), D))
    : bundle(b, BundleKind.PostNorm, l, () => b.store.vector(b.names.postAttentionNorm(l), D));
}

/** RMSNorm of layer l with its input norm (before attention) or its post-attention norm (before the FFN). */
export async function layerNorm(b: Block, which: 'input' | 'post', l: number, x: Float32Array, T: number): Promise<Float32Array> {
  return rmsNorm(x, T, b.cfg.hiddenSize, await normGain(b, which, l), b.cfg.rmsNormEps);
}

/**
 * Attention block of layer l on normalized input xn [T, D] (or the input still to compute, which
 * a chained KDA or MLA block computes in its first step): one sequence, or a batch of them (rows
 * back to back, each its own state).
 */
export async function attention(b: Block, l: number, xn: Float32Array | BlockInput, T: number, state: SequenceState | Batch): Promise<Float32Array> {
  const seqs = state instanceof SequenceState ? [{ state, T }] : state;
  if (b.cfg.layers[l]!.attn === 'kda') {
    const w = await bundle(b, BundleKind.Attention, l, () => kdaWeights(b.store, b.cfg, l));
    return kdaForward(b.compute, b.kda!, w, xn, T, seqs.map((s) => ({ T: s.T, state: s.state.kda[l]! })));
  }
  const w = await bundle(b, BundleKind.Attention, l, () => mlaWeights(b.store, b.cfg, l));
  return mlaForward(b.compute, b.mla, w, xn, T, seqs.map((s) => ({ T: s.T, cache: s.state.mla[l]! })));
}

/** FFN block of layer l on normalized input xn [T, D] (or the input still to compute, which a chained MoE head computes first). */
export async function ffn(b: Block, l: number, xn: Float32Array | BlockInput, T: number): Promise<Float32Array> {
  if (b.cfg.layers[l]!.ffn === 'dense') return gatedMlp(b.compute, await bundle(b, BundleKind.Ffn, l, () => denseMlpWeights(b.store, b.cfg, l)), blockInput(b.compute, xn), T, b.cfg.act);
  const w = await bundle(b, BundleKind.Ffn, l, () => moeWeights(b.store, b.cfg, l));
  return moeForward(b.compute, b.moe, w, xn, T, await bundle(b, BundleKind.Experts, l, async () => expertFetch(b.store, b.cfg, l)));
}

/** Final norm and lm_head for the given rows of h [T, D]: returns [rows.length, V]. */
export async function head(b: Block, h: Float32Array, T: number, rows: number[]): Promise<Float32Array> {
  const { cfg } = b;
  const D = cfg.hiddenSize;
  const { w, lm } = await bundle(b, BundleKind.Head, 0, async () => ({
    w: await b.store.vector(b.names.finalNorm, D),
    lm: b.store.mat(b.names.lmHead, cfg.vocabSize, D),
  }));
  const sel = new Float32Array(rows.length * D);
  rows.forEach((t, i) => sel.set(h.subarray(t * D, (t + 1) * D), i * D));
  return linear(b.compute, lm, rmsNorm(sel, rows.length, D, w, cfg.rmsNormEps), rows.length);
}
