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

/** Gate/up/down of a gated MLP whose tensors are `<base>{g,u,d}`, hidden width `inter`. */
export async function mlpWeights(store: WeightStore, D: number, inter: number, g: string, u: string, d: string): Promise<MlpWeights> {
  return {
    gate: await store.linear(g, inter, D),
    up: await store.linear(u, inter, D),
    down: await store.linear(d, D, inter),
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
    ? { full: await store.linear(`${b}g_proj`, P, D) }
    : { a: await store.linear(`${b}g_a_proj`, d, D), b: await store.linear(`${b}g_b_proj`, P, d) };
  return {
    q: await store.linear(`${b}q_proj`, P, D),
    k: await store.linear(`${b}k_proj`, P, D),
    v: await store.linear(`${b}v_proj`, P, D),
    qConv: await store.vector(`${b}q_conv1d.weight`, P * W),
    kConv: await store.vector(`${b}k_conv1d.weight`, P * W),
    vConv: await store.vector(`${b}v_conv1d.weight`, P * W),
    fa: await store.linear(`${b}f_a_proj`, d, D),
    fb: await store.linear(`${b}f_b_proj`, P, d),
    b: await store.linear(`${b}b_proj`, k.heads, D),
    gate,
    o: await store.linear(`${b}o_proj`, D, P),
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
        a: await store.linear(`${b}q_a_proj`, m.qLoraRank, D),
        norm: await store.vector(`${b}q_a_layernorm.weight`, m.qLoraRank),
        b: await store.linear(`${b}q_b_proj`, m.heads * dq, m.qLoraRank),
      }
    : { direct: await store.linear(`${b}q_proj`, m.heads * dq, D) };
  return {
    q,
    kva: await store.linear(`${b}kv_a_proj_with_mqa`, m.kvLoraRank + m.ropeDim, D),
    kvaNorm: await store.vector(`${b}kv_a_layernorm.weight`, m.kvLoraRank),
    kvb: await store.linear(`${b}kv_b_proj`, m.heads * (m.nopeDim + m.vDim), m.kvLoraRank),
    o: await store.linear(`${b}o_proj`, D, m.heads * m.vDim),
    gate: m.outputGate ? await store.linear(`${b}g_proj`, m.heads * m.vDim, D) : null,
  };
}

export async function moeWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MoeWeights> {
  const mo = cfg.moe;
  const D = cfg.hiddenSize;
  const b = moeBlock(cfg, l);
  const sh = `${b}shared_experts.`;
  const sharedW = mo.intermediate * mo.shared;
  return {
    gate: await store.linear(`${b}gate`, mo.experts, D),
    bias: await store.vector(`${b}gate.e_score_correction_bias`, mo.experts),
    shared: mo.shared > 0 ? await mlpWeights(store, D, sharedW, `${sh}gate_proj`, `${sh}up_proj`, `${sh}down_proj`) : null,
    latent: mo.latentDim
      ? {
          down: await store.linear(`${b}routed_expert_down_proj`, mo.latentDim, D),
          up: await store.linear(`${b}routed_expert_up_proj`, D, mo.latentDim),
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
  const width = cfg.moe.latentDim ?? cfg.hiddenSize;
  return async (ids) => {
    const out: MlpWeights[] = [];
    for (const e of ids) {
      const [g, u, d] = expertNames(cfg, l, e);
      out.push(await mlpWeights(store, width, cfg.moe.intermediate, g, u, d));
    }
    return out;
  };
}
