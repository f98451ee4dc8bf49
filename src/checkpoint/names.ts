// The name table: every tensor name of the three architectures, and the order in which one
// forward pass uses the trunk matrices. This is the only place a tensor name is spelled (in the
// spirit of llama.cpp's llama-arch.cpp); the model, the store, the packer, the config-only index
// and the synthetic-checkpoint writer all read it. Names follow the official Hugging Face
// layouts (docs/spec/K3.md §1, docs/spec/ARCHITECTURE.md §2-§4):
// - K3 and K2.5 put the decoder under `language_model.` (next to `vision_tower.` and `mm_projector.`);
// - K2 / DeepSeek-V3 call the MoE block `mlp.` and its experts gate/up/down_proj, Kimi Linear and
//   K3 call it `block_sparse_moe.` and their experts w1/w3/w2 (gate, up, down).
// A "base" is a linear layer's name without its format suffix (`.weight`, `.weight_packed`, ...;
// checkpoint/linear.ts resolves those); every other name here is a full tensor name.

import type { ModelConfig } from './config.js';

export type MoeNaming = 'k2' | 'kimi';

/** Gate, up and down linear bases of a gated MLP. */
export interface MlpNames {
  gate: string;
  up: string;
  down: string;
}

export interface KdaNames {
  q: string;
  k: string;
  v: string;
  qConv: string;
  kConv: string;
  vConv: string;
  fa: string;
  fb: string;
  b: string;
  /** Full-rank output gate (K3). */
  g: string;
  /** Low-rank output gate (Kimi Linear). */
  ga: string;
  gb: string;
  o: string;
  aLog: string;
  dtBias: string;
  oNorm: string;
}

export interface MlaNames {
  q: string;
  qa: string;
  qaNorm: string;
  qb: string;
  kva: string;
  kvaNorm: string;
  kvb: string;
  o: string;
  gate: string;
}

export interface MoeNames {
  router: string;
  bias: string;
  shared: MlpNames;
  latentDown: string;
  latentUp: string;
  latentNorm: string;
}

/** Norm weight and projection of one Attention Residuals mix (K3, docs/spec/ARCHITECTURE.md §4.7). */
export interface AttnResNames {
  norm: string;
  proj: string;
}

export class Names {
  /** `prefix`: 'language_model.' for K3 and K2.5, '' otherwise. */
  constructor(
    readonly prefix: string,
    readonly moeNaming: MoeNaming,
  ) {}

  private get model(): string {
    return `${this.prefix}model.`;
  }

  /** Embedding table (a linear base: the tensor is `<embed>.weight`). */
  get embed(): string {
    return `${this.model}embed_tokens`;
  }

  get finalNorm(): string {
    return `${this.model}norm.weight`;
  }

  get lmHead(): string {
    return `${this.prefix}lm_head`;
  }

  /** K3's mix of the block snapshots before the final norm. */
  get outputAttnRes(): AttnResNames {
    return this.attnRes(`${this.model}output_attn_res`);
  }

  /** Prefix of every tensor of decoder layer l. */
  layer(l: number): string {
    return `${this.model}layers.${l}.`;
  }

  inputNorm(l: number): string {
    return `${this.layer(l)}input_layernorm.weight`;
  }

  postAttentionNorm(l: number): string {
    return `${this.layer(l)}post_attention_layernorm.weight`;
  }

  /** K3's mix before the attention block ('attn') and before the FFN ('mlp') of layer l. */
  layerAttnRes(l: number, where: 'attn' | 'mlp'): AttnResNames {
    return this.attnRes(`${this.layer(l)}${where === 'attn' ? 'self_attention_res' : 'mlp_res'}`);
  }

  private attnRes(base: string): AttnResNames {
    return { norm: `${base}_norm.weight`, proj: `${base}_proj.weight` };
  }

  kda(l: number): KdaNames {
    const a = `${this.layer(l)}self_attn.`;
    return {
      q: `${a}q_proj`,
      k: `${a}k_proj`,
      v: `${a}v_proj`,
      qConv: `${a}q_conv1d.weight`,
      kConv: `${a}k_conv1d.weight`,
      vConv: `${a}v_conv1d.weight`,
      fa: `${a}f_a_proj`,
      fb: `${a}f_b_proj`,
      b: `${a}b_proj`,
      g: `${a}g_proj`,
      ga: `${a}g_a_proj`,
      gb: `${a}g_b_proj`,
      o: `${a}o_proj`,
      aLog: `${a}A_log`,
      dtBias: `${a}dt_bias`,
      oNorm: `${a}o_norm.weight`,
    };
  }

  mla(l: number): MlaNames {
    const a = `${this.layer(l)}self_attn.`;
    return {
      q: `${a}q_proj`,
      qa: `${a}q_a_proj`,
      qaNorm: `${a}q_a_layernorm.weight`,
      qb: `${a}q_b_proj`,
      kva: `${a}kv_a_proj_with_mqa`,
      kvaNorm: `${a}kv_a_layernorm.weight`,
      kvb: `${a}kv_b_proj`,
      o: `${a}o_proj`,
      gate: `${a}g_proj`,
    };
  }

  denseMlp(l: number): MlpNames {
    return gatedMlpNames(`${this.layer(l)}mlp.`);
  }

  private moeBlock(l: number): string {
    return `${this.layer(l)}${this.moeNaming === 'k2' ? 'mlp.' : 'block_sparse_moe.'}`;
  }

  moe(l: number): MoeNames {
    const b = this.moeBlock(l);
    return {
      router: `${b}gate`,
      bias: `${b}gate.e_score_correction_bias`,
      shared: gatedMlpNames(`${b}shared_experts.`),
      latentDown: `${b}routed_expert_down_proj`,
      latentUp: `${b}routed_expert_up_proj`,
      latentNorm: `${b}routed_expert_norm.weight`,
    };
  }

  /** Prefix of every tensor of routed expert e of layer l. */
  expertPrefix(l: number, e: number): string {
    return `${this.moeBlock(l)}experts.${e}.`;
  }

  /** Linear bases of routed expert e of layer l: gate, up, down. */
  expert(l: number, e: number): [string, string, string] {
    const x = this.expertPrefix(l, e);
    return this.moeNaming === 'k2' ? [`${x}gate_proj`, `${x}up_proj`, `${x}down_proj`] : [`${x}w1`, `${x}w3`, `${x}w2`];
  }

  /** Whether a tensor belongs to a routed expert (any layer, any expert). */
  isExpert(name: string): boolean {
    return /\.experts\.\d+\./.test(name);
  }

  /** Whether a tensor belongs to the text decoder (not K3's vision tower or projector). */
  isDecoder(name: string): boolean {
    if (!name.startsWith(this.prefix) || name.includes(VISION_TOWER) || name.includes(MM_PROJECTOR)) return false;
    // Without a prefix, a multimodal checkpoint's own decoder tensors still are not ours.
    return this.prefix !== '' || !name.startsWith(K3_PREFIX);
  }
}

function gatedMlpNames(b: string): MlpNames {
  return { gate: `${b}gate_proj`, up: `${b}up_proj`, down: `${b}down_proj` };
}

const K3_PREFIX = 'language_model.';
const VISION_TOWER = 'vision_tower';
const MM_PROJECTOR = 'mm_projector';

/** The name scheme of an architecture, before any config is read (the checkpoint writer uses this); 'k25' is K2's under K3's prefix. */
export function namesForArch(arch: ModelConfig['arch'] | 'k25'): Names {
  return new Names(arch === 'k3' || arch === 'k25' ? K3_PREFIX : '', arch === 'k2' || arch === 'k25' ? 'k2' : 'kimi');
}

/** The name scheme of a loaded config (config.ts sets prefix and MoE naming from config.json). */
export function namesOf(cfg: Pick<ModelConfig, 'prefix' | 'moe'>): Names {
  return new Names(cfg.prefix, cfg.moe.naming);
}

/** The vision tower and projector tensors K3 ships next to its decoder (a text engine skips them; the synthetic writer stubs them). */
export const K3_VISION_NAMES = {
  patchEmbed: `${VISION_TOWER}.patch_embed.proj.weight`,
  towerNorm: `${VISION_TOWER}.encoder.final_layernorm.weight`,
  proj0: `${MM_PROJECTOR}.proj.0.weight`,
  proj2: `${MM_PROJECTOR}.proj.2.weight`,
  postNorm: `${MM_PROJECTOR}.post_norm.weight`,
} as const;

/** A few of K2.5's MoonViT tower and patch-merger projector tensors (the synthetic writer's stubs; a text engine skips them). */
export const K25_VISION_NAMES = {
  patchEmbed: `${VISION_TOWER}.patch_embed.proj.weight`,
  towerNorm: `${VISION_TOWER}.encoder.final_layernorm.weight`,
  preNorm: `${MM_PROJECTOR}.pre_norm.weight`,
  preNormBias: `${MM_PROJECTOR}.pre_norm.bias`,
  proj0: `${MM_PROJECTOR}.proj.0.weight`,
  proj2: `${MM_PROJECTOR}.proj.2.weight`,
} as const;

/** One trunk matrix: a 2-D weight the forward pass multiplies by, in the order it does so. */
export interface TrunkMatrix {
  base: string;
  rows: number;
  cols: number;
  /** Read by rows (MLA kv_b): must be held whole, never split into streamed pieces. */
  whole: boolean;
  layer: number | 'head';
  /** Kept exact under `--fast` (the MoE router: a rounding there flips expert choices). */
  exact?: boolean;
}

/**
 * Every non-expert matrix in the order one forward pass uses it (layer by layer, attention then
 * FFN, then lm_head). The streaming store reads ahead in this order; the order matches the block
 * code (a test records the real order and compares), but correctness never depends on it.
 */
export function trunkOrder(cfg: ModelConfig): TrunkMatrix[] {
  const n = namesOf(cfg);
  const D = cfg.hiddenSize;
  const out: TrunkMatrix[] = [];
  const add = (layer: number | 'head', base: string, rows: number, cols: number, whole = false, exact = false) => out.push({ base, rows, cols, whole, layer, ...(exact ? { exact } : {}) });
  for (let l = 0; l < cfg.numLayers; l++) {
    const L = cfg.layers[l]!;
    if (L.attn === 'kda') {
      const k = cfg.kda!;
      const a = n.kda(l);
      const d = k.headDim;
      const P = k.heads * d;
      add(l, a.q, P, D);
      add(l, a.k, P, D);
      add(l, a.v, P, D);
      add(l, a.fa, d, D);
      add(l, a.b, k.heads, D);
      add(l, k.fullRankGate ? a.g : a.ga, k.fullRankGate ? P : d, D);
      add(l, a.fb, P, d);
      if (!k.fullRankGate) add(l, a.gb, P, d);
      add(l, a.o, D, P);
    } else {
      const m = cfg.mla;
      const a = n.mla(l);
      const dq = m.nopeDim + m.ropeDim;
      if (m.qLoraRank) add(l, a.qa, m.qLoraRank, D);
      else add(l, a.q, m.heads * dq, D);
      add(l, a.kva, m.kvLoraRank + m.ropeDim, D);
      if (m.outputGate) add(l, a.gate, m.heads * m.vDim, D);
      if (m.qLoraRank) add(l, a.qb, m.heads * dq, m.qLoraRank);
      add(l, a.kvb, m.heads * (m.nopeDim + m.vDim), m.kvLoraRank, true);
      add(l, a.o, D, m.heads * m.vDim);
    }
    if (L.ffn === 'dense') {
      const f = n.denseMlp(l);
      add(l, f.gate, cfg.intermediateSize, D);
      add(l, f.up, cfg.intermediateSize, D);
      add(l, f.down, D, cfg.intermediateSize);
    } else {
      const mo = cfg.moe;
      const f = n.moe(l);
      add(l, f.router, mo.experts, D, false, true);
      if (mo.latentDim) add(l, f.latentDown, mo.latentDim, D);
      // The shared expert runs while the routed experts are read, before the latent up (model/moe.ts).
      if (mo.shared > 0) {
        const w = mo.intermediate * mo.shared;
        add(l, f.shared.gate, w, D);
        add(l, f.shared.up, w, D);
        add(l, f.shared.down, D, w);
      }
      if (mo.latentDim) add(l, f.latentUp, D, mo.latentDim);
    }
  }
  add('head', n.lmHead, cfg.vocabSize, D);
  return out;
}

/** The routed experts' tensors as the store must read them: names and [rows, cols] of gate, up, down. */
export function expertLayout(cfg: ModelConfig): { names: (l: number, e: number) => [string, string, string]; gateShape: [number, number]; downShape: [number, number] } {
  const n = namesOf(cfg);
  const width = cfg.moe.latentDim ?? cfg.hiddenSize;
  const I = cfg.moe.intermediate;
  return { names: (l, e) => n.expert(l, e), gateShape: [I, width], downShape: [width, I] };
}
