// The per-block weight bundles, borrowed from the store. Tensor names come from the name table
// (checkpoint/names.ts); the shapes each block expects, and the A_log quirk, are here.

import type { ModelConfig } from '../checkpoint/config.js';
import { namesOf, type MlpNames } from '../checkpoint/names.js';
import type { WeightStore } from '../store/store.js';
import type { KdaWeights } from './kda.js';
import type { MlaWeights } from './mla.js';
import type { MoeWeights, ExpertFetch } from './moe.js';
import type { MlpWeights } from './ops.js';

/** Gate/up/down of a gated MLP with hidden width `inter`. */
export function mlpWeights(store: WeightStore, D: number, inter: number, n: MlpNames): MlpWeights {
  return {
    gate: store.mat(n.gate, inter, D),
    up: store.mat(n.up, inter, D),
    down: store.mat(n.down, D, inter),
  };
}

export async function denseMlpWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MlpWeights> {
  return mlpWeights(store, cfg.hiddenSize, cfg.intermediateSize, namesOf(cfg).denseMlp(l));
}

export async function kdaWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<KdaWeights> {
  const k = cfg.kda!;
  const D = cfg.hiddenSize;
  const d = k.headDim;
  const P = k.heads * d;
  const n = namesOf(cfg).kda(l);
  const W = k.convSize;
  const gate = k.fullRankGate ? { full: store.mat(n.g, P, D) } : { a: store.mat(n.ga, d, D), b: store.mat(n.gb, P, d) };
  return {
    q: store.mat(n.q, P, D),
    k: store.mat(n.k, P, D),
    v: store.mat(n.v, P, D),
    qConv: await store.vector(n.qConv, P * W),
    kConv: await store.vector(n.kConv, P * W),
    vConv: await store.vector(n.vConv, P * W),
    fa: store.mat(n.fa, d, D),
    fb: store.mat(n.fb, P, d),
    b: store.mat(n.b, k.heads, D),
    gate,
    o: store.mat(n.o, D, P),
    // Kimi Linear stores A_log as [1,1,H,1] (or flat [H]); K3 pads it to [head_dim]: use the first H.
    aLog: await store.vector(n.aLog, k.heads, true),
    dtBias: await store.vector(n.dtBias, P),
    oNorm: await store.vector(n.oNorm, d),
  };
}

export async function mlaWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MlaWeights> {
  const m = cfg.mla;
  const D = cfg.hiddenSize;
  const n = namesOf(cfg).mla(l);
  const dq = m.nopeDim + m.ropeDim;
  const q = m.qLoraRank
    ? {
        a: store.mat(n.qa, m.qLoraRank, D),
        norm: await store.vector(n.qaNorm, m.qLoraRank),
        b: store.mat(n.qb, m.heads * dq, m.qLoraRank),
      }
    : { direct: store.mat(n.q, m.heads * dq, D) };
  return {
    q,
    kva: store.mat(n.kva, m.kvLoraRank + m.ropeDim, D),
    kvaNorm: await store.vector(n.kvaNorm, m.kvLoraRank),
    kvb: store.mat(n.kvb, m.heads * (m.nopeDim + m.vDim), m.kvLoraRank),
    o: store.mat(n.o, D, m.heads * m.vDim),
    gate: m.outputGate ? store.mat(n.gate, m.heads * m.vDim, D) : null,
  };
}

export async function moeWeights(store: WeightStore, cfg: ModelConfig, l: number): Promise<MoeWeights> {
  const mo = cfg.moe;
  const D = cfg.hiddenSize;
  const n = namesOf(cfg).moe(l);
  const sharedW = mo.intermediate * mo.shared;
  return {
    gate: store.mat(n.router, mo.experts, D),
    bias: await store.vector(n.bias, mo.experts),
    shared: mo.shared > 0 ? mlpWeights(store, D, sharedW, n.shared) : null,
    latent: mo.latentDim
      ? {
          down: store.mat(n.latentDown, mo.latentDim, D),
          up: store.mat(n.latentUp, D, mo.latentDim),
          norm: mo.latentNorm ? await store.vector(n.latentNorm, mo.latentDim) : null,
        }
      : null,
  };
}

export function expertFetch(store: WeightStore, cfg: ModelConfig, l: number): ExpertFetch {
  return {
    begin: (ids) => store.beginExperts(l, ids),
    mayAllocate: () => !store.buffersMade,
    async next() {
      const n = store.lookaheadLayer(l);
      if (n === null) return null;
      const names = namesOf(cfg).moe(n);
      const gate = store.mat(names.router, cfg.moe.experts, cfg.hiddenSize);
      if (!gate.resident) return null;
      return { gate, bias: await store.vector(names.bias, cfg.moe.experts), guess: (ids) => store.guessExperts(n, ids) };
    },
  };
}
