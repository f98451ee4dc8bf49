// Tensor names of each architecture and the per-block weight bundles, borrowed from the store.
// All checkpoint naming quirks are here: the `language_model.` prefix (K3), `mlp` vs
// `block_sparse_moe`, K2's gate/up/down_proj experts vs Kimi's w1/w3/w2, A_log shapes.

import type { ModelConfig } from '../checkpoint/config.js';
import type { WeightStore } from '../store/store.js';
import type { KdaWeights } from './kda.js';
import type { MlaWeights } from './mla.js';
import type { MoeWeights, ExpertFetch } from './moe.js';
import type { MlpWeights } from './ops.js';

export function layerPrefix(cfg: ModelConfig, l: number): string {
  return `${cfg.prefix}model.layers.${l}.`;
}

export function modelPrefix(cfg: ModelConfig): string {
  return `${cfg.prefix}model.`;
}

export function lmHeadName(cfg: ModelConfig): string {
  return `${cfg.prefix}lm_head`;
}

function moeBlock(cfg: ModelConfig, l: number): string {
  return layerPrefix(cfg, l) + (cfg.moe.naming === 'k2' ? 'mlp.' : 'block_sparse_moe.');
}

/** Gate/up/down of a gated MLP with tensors g, u, d and hidden width `inter`. */
export function mlpWeights(store: WeightStore, D: number, inter: number, g: string, u: string, d: string): MlpWeights {
  return {
    gate: store.mat(g, inter, D),
    up: store.mat(u, inter, D),
    down: store.mat(d, D, inter),
  };
}

export async function denseMlpWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MlpWeights> {
  const b = `${layerPrefix(cfg, l)}mlp.`;
  return mlpWeights(store, cfg.hiddenSize, cfg.intermediateSize, `${b}gate_proj`, `${b}up_proj`, `${b}down_proj`);
}

export async function kdaWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<KdaWeights> {
  const k = cfg.kda!;
  const D = cfg.hiddenSize;
  const d = k.headDim;
  const P = k.heads * d;
  const b = `${layerPrefix(cfg, l)}self_attn.`;
  const W = k.convSize;
  const gate = k.fullRankGate
    ? { full: store.mat(`${b}g_proj`, P, D) }
    : { a: store.mat(`${b}g_a_proj`, d, D), b: store.mat(`${b}g_b_proj`, P, d) };
  return {
    q: store.mat(`${b}q_proj`, P, D),
    k: store.mat(`${b}k_proj`, P, D),
    v: store.mat(`${b}v_proj`, P, D),
    qConv: await store.vector(`${b}q_conv1d.weight`, P * W),
    kConv: await store.vector(`${b}k_conv1d.weight`, P * W),
    vConv: await store.vector(`${b}v_conv1d.weight`, P * W),
    fa: store.mat(`${b}f_a_proj`, d, D),
    fb: store.mat(`${b}f_b_proj`, P, d),
    b: store.mat(`${b}b_proj`, k.heads, D),
    gate,
    o: store.mat(`${b}o_proj`, D, P),
    // Kimi Linear stores A_log as [1,1,H,1] (or flat [H]); K3 pads it to [head_dim]: use the first H.
    aLog: await store.vector(`${b}A_log`, k.heads, true),
    dtBias: await store.vector(`${b}dt_bias`, P),
    oNorm: await store.vector(`${b}o_norm.weight`, d),
  };
}

export async function mlaWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MlaWeights> {
  const m = cfg.mla;
  const D = cfg.hiddenSize;
  const b = `${layerPrefix(cfg, l)}self_attn.`;
  const dq = m.nopeDim + m.ropeDim;
  const q = m.qLoraRank
    ? {
        a: store.mat(`${b}q_a_proj`, m.qLoraRank, D),
        norm: await store.vector(`${b}q_a_layernorm.weight`, m.qLoraRank),
        b: store.mat(`${b}q_b_proj`, m.heads * dq, m.qLoraRank),
      }
    : { direct: store.mat(`${b}q_proj`, m.heads * dq, D) };
  return {
    q,
    kva: store.mat(`${b}kv_a_proj_with_mqa`, m.kvLoraRank + m.ropeDim, D),
    kvaNorm: await store.vector(`${b}kv_a_layernorm.weight`, m.kvLoraRank),
    kvb: store.mat(`${b}kv_b_proj`, m.heads * (m.nopeDim + m.vDim), m.kvLoraRank),
    o: store.mat(`${b}o_proj`, D, m.heads * m.vDim),
    gate: m.outputGate ? store.mat(`${b}g_proj`, m.heads * m.vDim, D) : null,
  };
}

export async function moeWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MoeWeights> {
  const mo = cfg.moe;
  const D = cfg.hiddenSize;
  const b = moeBlock(cfg, l);
  const sh = `${b}shared_experts.`;
  const sharedW = mo.intermediate * mo.shared;
  return {
    gate: store.mat(`${b}gate`, mo.experts, D),
    bias: await store.vector(`${b}gate.e_score_correction_bias`, mo.experts),
    shared: mo.shared > 0 ? mlpWeights(store, D, sharedW, `${sh}gate_proj`, `${sh}up_proj`, `${sh}down_proj`) : null,
    latent: mo.latentDim
      ? {
          down: store.mat(`${b}routed_expert_down_proj`, mo.latentDim, D),
          up: store.mat(`${b}routed_expert_up_proj`, D, mo.latentDim),
          norm: mo.latentNorm ? await store.vector(`${b}routed_expert_norm.weight`, mo.latentDim) : null,
        }
      : null,
  };
}

/** Tensor base names of routed expert e: gate, up, down. */
export function expertNames(cfg: ModelConfig, l: number, e: number): [string, string, string] {
  const b = `${moeBlock(cfg, l)}experts.${e}.`;
  return cfg.moe.naming === 'k2' ? [`${b}gate_proj`, `${b}up_proj`, `${b}down_proj`] : [`${b}w1`, `${b}w3`, `${b}w2`];
}

export function expertFetch(store: WeightStore, cfg: ModelConfig, l: number): ExpertFetch {
  return (ids, use) => store.experts(l, ids, use);
}

/** The routed experts' tensors as the store must read them: names and [rows, cols] of gate, up, down. */
export function expertLayout(cfg: ModelConfig): { names: (l: number, e: number) => [string, string, string]; gateShape: [number, number]; downShape: [number, number] } {
  const width = cfg.moe.latentDim ?? cfg.hiddenSize;
  const I = cfg.moe.intermediate;
  return { names: (l, e) => expertNames(cfg, l, e), gateShape: [I, width], downShape: [width, I] };
}

/** One trunk matrix: a 2-D weight the forward pass multiplies by, in the order it does so. */
export interface TrunkMatrix {
  base: string;
  rows: number;
  cols: number;
  /** Read by rows (MLA kv_b): must be held whole, never split into streamed pieces. */
  whole: boolean;
  layer: number | 'head';
}

/**
 * Every non-expert matrix in the order one forward pass uses it (layer by layer, attention then
 * FFN, then lm_head). The streaming store reads ahead in this order; the order matches the block
 * code (a test records the real order and compares), but correctness never depends on it.
 */
export function trunkOrder(cfg: ModelConfig): TrunkMatrix[] {
  const D = cfg.hiddenSize;
  const out: TrunkMatrix[] = [];
  const add = (layer: number | 'head', base: string, rows: number, cols: number, whole = false) => out.push({ base, rows, cols, whole, layer });
  for (let l = 0; l < cfg.numLayers; l++) {
    const L = cfg.layers[l]!;
    const b = `${layerPrefix(cfg, l)}self_attn.`;
    if (L.attn === 'kda') {
      const k = cfg.kda!;
      const d = k.headDim;
      const P = k.heads * d;
      add(l, `${b}q_proj`, P, D);
      add(l, `${b}k_proj`, P, D);
      add(l, `${b}v_proj`, P, D);
      add(l, `${b}f_a_proj`, d, D);
      add(l, `${b}b_proj`, k.heads, D);
      add(l, k.fullRankGate ? `${b}g_proj` : `${b}g_a_proj`, k.fullRankGate ? P : d, D);
      add(l, `${b}f_b_proj`, P, d);
      if (!k.fullRankGate) add(l, `${b}g_b_proj`, P, d);
      add(l, `${b}o_proj`, D, P);
    } else {
      const m = cfg.mla;
      const dq = m.nopeDim + m.ropeDim;
      if (m.qLoraRank) add(l, `${b}q_a_proj`, m.qLoraRank, D);
      else add(l, `${b}q_proj`, m.heads * dq, D);
      add(l, `${b}kv_a_proj_with_mqa`, m.kvLoraRank + m.ropeDim, D);
      if (m.outputGate) add(l, `${b}g_proj`, m.heads * m.vDim, D);
      if (m.qLoraRank) add(l, `${b}q_b_proj`, m.heads * dq, m.qLoraRank);
      add(l, `${b}kv_b_proj`, m.heads * (m.nopeDim + m.vDim), m.kvLoraRank, true);
      add(l, `${b}o_proj`, D, m.heads * m.vDim);
    }
    if (L.ffn === 'dense') {
      const mb = `${layerPrefix(cfg, l)}mlp.`;
      add(l, `${mb}gate_proj`, cfg.intermediateSize, D);
      add(l, `${mb}up_proj`, cfg.intermediateSize, D);
      add(l, `${mb}down_proj`, D, cfg.intermediateSize);
    } else {
      const mo = cfg.moe;
      const mb = moeBlock(cfg, l);
      add(l, `${mb}gate`, mo.experts, D);
      if (mo.latentDim) add(l, `${mb}routed_expert_down_proj`, mo.latentDim, D);
      if (mo.latentDim) add(l, `${mb}routed_expert_up_proj`, D, mo.latentDim);
      if (mo.shared > 0) {
        const w = mo.intermediate * mo.shared;
        add(l, `${mb}shared_experts.gate_proj`, w, D);
        add(l, `${mb}shared_experts.up_proj`, w, D);
        add(l, `${mb}shared_experts.down_proj`, D, w);
      }
    }
  }
  add('head', lmHeadName(cfg), cfg.vocabSize, D);
  return out;
}
