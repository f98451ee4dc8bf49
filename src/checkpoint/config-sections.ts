// The parts of config.json the three architectures share, one reader per part, called by
// config-k2.ts / config-kimi.ts / config-k3.ts in one fixed order (the order decides which error a
// config with several bad fields reports first).

import type { ActConfig, AttnKind, ConfigOverrides, DeclaredExperts, KdaConfig, LayerSpec, MlaConfig, ModelConfig, MoeConfig } from './config-types.js';
import { LIMITS, Reader, type Json } from './config-reader.js';

/** One config.json opened for reading: the decoder's object, its readers and where it sits. */
export interface ConfigSource {
  file: string;
  modelType: string;
  /** The decoder's fields: text_config (K3, K2.5) or the top level. */
  text: Json;
  /** 'text_config.' or ''. */
  textPath: string;
  prefix: string;
  linearAttn: Json | null;
  /** Decoder fields: text_config, then linear_attn_config, then the top level. */
  r: Reader;
  /** KDA fields: linear_attn_config first (the decoder's own `head_dim` is an unused derived value). */
  rk: Reader;
  overrides: ConfigOverrides;
}

export function openSource(top: Json, file: string, modelType: string, nested: boolean, overrides: ConfigOverrides): ConfigSource {
  const text = nested ? (top.text_config as Json) : top;
  const textPath = nested ? 'text_config.' : '';
  const lac = (text.linear_attn_config ?? null) as Json | null;
  const textObj = { obj: text, path: textPath };
  const lacObj = lac && typeof lac === 'object' ? [{ obj: lac, path: `${textPath}linear_attn_config.` }] : [];
  const r = new Reader(file, [textObj, ...lacObj, ...(nested ? [{ obj: top, path: '' }] : [])]);
  const rk = new Reader(file, [...lacObj, textObj]);
  return { file, modelType, text, textPath, prefix: nested ? 'language_model.' : '', linearAttn: lac, r, rk, overrides };
}

export interface Trunk {
  numLayers: number;
  hiddenSize: number;
  vocabSize: number;
  rmsNormEps: number;
  mtpLayers: number;
  firstDense: number;
}

/** Sizes every decoder has, and the layouts the engine refuses. */
export function readTrunk(r: Reader): Trunk {
  const numLayers = r.range('num_hidden_layers', r.pos('num_hidden_layers'), 1, LIMITS.layers);
  const hiddenSize = r.range('hidden_size', r.pos('hidden_size'), 1, LIMITS.hidden);
  const vocabSize = r.range('vocab_size', r.pos('vocab_size'), 1, LIMITS.vocab);
  const rmsNormEps = r.range('rms_norm_eps', r.num('rms_norm_eps'), 0, 0.1, true);
  const mtpLayers = r.range('num_nextn_predict_layers', r.optInt(0, 'num_nextn_predict_layers'), 0, 16);
  const firstDense = r.range('first_k_dense_replace', r.int('first_k_dense_replace'), 0, numLayers);
  const moeFreq = r.optInt(1, 'moe_layer_freq');
  if (moeFreq !== 1) r.fail(`moe_layer_freq ${moeFreq} is not supported (every Kimi / DeepSeek-V3 config uses 1)`);
  if (r.bool(false, 'tie_word_embeddings')) r.fail('tie_word_embeddings = true is not a Kimi checkpoint (lm_head is separate)');
  return { numLayers, hiddenSize, vocabSize, rmsNormEps, mtpLayers, firstDense };
}

/** Layer map (docs/spec/ARCHITECTURE.md §3.2, §4.2): 0-based layer l is MLA iff l+1 is in full_attn_layers (1-based). */
export function readLayerMap(src: ConfigSource, numLayers: number): { attnOf: AttnKind[]; fullAttnLayers: number[] } {
  const { r, rk, textPath } = src;
  const attnOf: AttnKind[] = new Array(numLayers).fill('mla');
  if (!src.linearAttn) r.fail(`missing required field ${textPath}linear_attn_config`);
  let fullAttnLayers = rk.intList('full_attn_layers');
  const kdaLayers = rk.intList('kda_layers');
  if (!fullAttnLayers && !kdaLayers) r.fail(`missing required field ${textPath}linear_attn_config.full_attn_layers (or kda_layers)`);
  for (const [nm, list] of [['full_attn_layers', fullAttnLayers], ['kda_layers', kdaLayers]] as const) {
    for (const x of list ?? []) if (x < 1 || x > numLayers) r.fail(`linear_attn_config.${nm} entry ${x} is outside 1..${numLayers} (the lists are 1-based)`);
  }
  if (fullAttnLayers) {
    for (let l = 0; l < numLayers; l++) attnOf[l] = fullAttnLayers.includes(l + 1) ? 'mla' : 'kda';
  } else {
    for (let l = 0; l < numLayers; l++) attnOf[l] = kdaLayers!.includes(l + 1) ? 'kda' : 'mla';
    fullAttnLayers = attnOf.flatMap((a, l) => (a === 'mla' ? [l + 1] : []));
  }
  if (kdaLayers) {
    for (let l = 0; l < numLayers; l++) {
      const inF = fullAttnLayers.includes(l + 1);
      const inK = kdaLayers.includes(l + 1);
      if (inF === inK) r.fail(`linear_attn_config: layer ${l + 1} (1-based) is ${inF ? 'in both' : 'in neither'} full_attn_layers and kda_layers`);
    }
  }
  return { attnOf, fullAttnLayers };
}

export function layerSpecs(attnOf: AttnKind[], firstDense: number): LayerSpec[] {
  return attnOf.map((attn, l) => ({ attn, ffn: l < firstDense ? 'dense' : 'moe' }));
}

/** Kimi Linear and K3 MLA has no rotary part; refuse a config that says otherwise. */
export function readNoPE(r: Reader): null {
  if (!r.bool(true, 'mla_use_nope')) r.fail('mla_use_nope = false is not supported for Kimi Linear / K3 (they use NoPE MLA)');
  return null;
}

/** MLA (docs/spec/ARCHITECTURE.md §1.7); `readRope` runs after q_lora_rank, as the rope fields follow it. */
export function readMla(src: ConfigSource, rmsNormEps: number, gateByDefault: boolean, readRope: (r: Reader) => MlaConfig['rope']): MlaConfig {
  const { r } = src;
  const qLora = r.has('q_lora_rank') ? r.pos('q_lora_rank') : null;
  const rope = readRope(r);
  const mla: MlaConfig = {
    heads: r.pos('num_attention_heads'),
    qLoraRank: qLora,
    kvLoraRank: r.pos('kv_lora_rank'),
    nopeDim: r.pos('qk_nope_head_dim'),
    ropeDim: r.pos('qk_rope_head_dim'),
    vDim: r.pos('v_head_dim'),
    rope,
    outputGate: r.bool(gateByDefault, 'mla_use_output_gate'),
    latentNormEps: src.overrides.mlaLatentNormEps === 'config' ? rmsNormEps : 1e-6,
  };
  r.range('num_attention_heads', mla.heads, 1, LIMITS.heads);
  if (qLora !== null) r.range('q_lora_rank', qLora, 1, LIMITS.rank);
  r.range('kv_lora_rank', mla.kvLoraRank, 1, LIMITS.rank);
  for (const [nm, v] of [['qk_nope_head_dim', mla.nopeDim], ['qk_rope_head_dim', mla.ropeDim], ['v_head_dim', mla.vDim]] as const) r.range(nm, v, 1, LIMITS.headDim);
  if (mla.ropeDim % 2 !== 0) r.fail(`field qk_rope_head_dim = ${mla.ropeDim} must be even (rope rotates pairs)`);
  return mla;
}

/** KDA (docs/spec/ARCHITECTURE.md §3.3, §4.3), or null when no layer is KDA. */
export function readKda(src: ConfigSource, attnOf: AttnKind[]): KdaConfig | null {
  const { r, rk } = src;
  if (!attnOf.includes('kda')) return null;
  const kda: KdaConfig = {
    heads: rk.pos('num_heads', 'kda_num_heads'),
    headDim: rk.pos('head_dim', 'kda_head_dim'),
    convSize: rk.pos('short_conv_kernel_size'),
    gateLowerBound: rk.optNum(null, 'gate_lower_bound'),
    fullRankGate: rk.bool(false, 'use_full_rank_gate'),
  };
  if (kda.headDim === 0) r.fail('linear_attn_config.head_dim must be positive');
  rk.range('linear_attn_config.num_heads', kda.heads, 1, LIMITS.heads);
  rk.range('linear_attn_config.head_dim', kda.headDim, 1, LIMITS.headDim);
  rk.range('linear_attn_config.short_conv_kernel_size', kda.convSize, 1, LIMITS.convSize);
  if (kda.gateLowerBound !== null) rk.range('linear_attn_config.gate_lower_bound', kda.gateLowerBound, -1e4, 0);
  return kda;
}

/** Activation (docs/spec/ARCHITECTURE.md §1.2, §4.6). */
export function readAct(r: Reader): ActConfig {
  const hiddenAct = r.str('silu', 'hidden_act');
  if (hiddenAct === 'situ') {
    return { kind: 'situ', situBeta: r.num('activation_situ_beta', 'situ_beta'), situLinearBeta: r.optNum(null, 'activation_situ_linear_beta', 'situ_linear_beta') };
  }
  if (hiddenAct === 'silu') return { kind: 'silu', situBeta: 0, situLinearBeta: null };
  return r.fail(`hidden_act ${JSON.stringify(hiddenAct)} is not supported (silu or situ)`);
}

/** What sets one architecture's MoE apart from the others'. */
export interface MoeFlavour {
  /** DeepSeek's field names (k2) or Moonshot's renames (kimi). */
  naming: 'k2' | 'kimi';
  /** K3's latent MoE: routed_expert_hidden_size and latent_moe_use_norm. */
  latent: boolean;
  biasedWeights: boolean;
}

/** The MoE field names of one naming: DeepSeek's, or Moonshot's renames of them. */
const MOE_NAMES = {
  k2: { experts: 'n_routed_experts', topK: 'num_experts_per_tok', groups: 'n_group', scoring: 'scoring_func', shared: 'n_shared_experts', renorm: 'norm_topk_prob' },
  kimi: { experts: 'num_experts', topK: 'num_experts_per_token', groups: 'num_expert_group', scoring: 'moe_router_activation_func', shared: 'num_shared_experts', renorm: 'moe_renormalize' },
} as const;

/** MoE (docs/spec/ARCHITECTURE.md §1.5): experts, routing and, for K3, the latent width. */
export function readMoe(r: Reader, f: MoeFlavour): MoeConfig {
  const n = MOE_NAMES[f.naming];
  const experts = r.range(n.experts, r.pos(n.experts), 1, LIMITS.experts);
  const topK = r.pos(n.topK);
  if (topK > experts) r.fail(`${n.topK} ${topK} exceeds the ${experts} experts`);
  const groups = r.optInt(1, n.groups);
  const topkGroup = r.optInt(1, 'topk_group');
  if (groups < 1 || experts % groups !== 0) r.fail(`expert groups ${groups} do not divide ${experts} experts`);
  if (topkGroup < 1 || topkGroup > groups) r.fail(`topk_group ${topkGroup} is outside 1..${groups}`);
  // Group-limited routing keeps topk_group groups of experts/groups each: they must hold top-k.
  if (groups > 1 && topkGroup < groups && topK > topkGroup * (experts / groups)) {
    r.fail(`top-k ${topK} exceeds the ${topkGroup * (experts / groups)} experts of the ${topkGroup} groups routing keeps (topk_group x experts / groups)`);
  }
  const scoring = r.str('sigmoid', n.scoring);
  if (scoring !== 'sigmoid') r.fail(`router scoring ${JSON.stringify(scoring)} is not supported (sigmoid)`);
  const latentDim = f.latent ? r.pos('routed_expert_hidden_size') : null;
  const moe: MoeConfig = {
    experts,
    topK,
    shared: r.int(n.shared),
    intermediate: r.pos('moe_intermediate_size'),
    groups,
    topkGroup,
    renormalize: r.bool(true, n.renorm),
    scaling: r.range('routed_scaling_factor', r.num('routed_scaling_factor'), 0, LIMITS.scaling, true),
    latentDim,
    latentNorm: f.latent ? r.bool(true, 'latent_moe_use_norm') : false,
    biasedWeights: f.biasedWeights,
    naming: f.naming,
  };
  r.range('moe_intermediate_size', moe.intermediate, 1, LIMITS.intermediate);
  r.range(n.shared, moe.shared, 0, 64);
  if (latentDim !== null) r.range('routed_expert_hidden_size', latentDim, 1, LIMITS.hidden);
  return moe;
}

/** The parts an architecture reads; finishConfig adds the rest and assembles the ModelConfig. */
export interface ConfigParts extends Pick<ModelConfig, 'arch' | 'layers' | 'fullAttnLayers' | 'mla' | 'kda' | 'act' | 'moe'> {
  trunk: Trunk;
  /** Read attn_res_block_size (K3). */
  attnRes: boolean;
}

/** Token ids, context length and the declared expert format, then the ModelConfig (fixed key order). */
export function finishConfig(src: ConfigSource, p: ConfigParts): ModelConfig {
  const { r } = src;
  if (p.act.kind === 'situ') r.range('activation_situ_beta', p.act.situBeta, 0, 1e4, true);
  const attnResBlock = p.attnRes ? r.range('attn_res_block_size', r.pos('attn_res_block_size'), 1, LIMITS.layers) : null;
  const eos = r.ids('eos_token_id');
  const bos = r.has('bos_token_id') ? r.int('bos_token_id') : null;
  const maxPositions = r.range('max_position_embeddings', r.optInt(0, 'max_position_embeddings', 'model_max_length'), 0, LIMITS.positions) || 1 << 20;
  for (const id of [...eos, ...(bos !== null ? [bos] : [])]) if (id < 0 || id >= LIMITS.vocab) r.fail(`token id ${id} (bos / eos) is not a vocabulary id`);
  const declaredExperts = readDeclaredExperts(r);
  const { trunk } = p;
  return {
    arch: p.arch,
    prefix: src.prefix,
    ...(src.modelType === 'kimi_k25' ? { variant: 'k25' as const } : {}),
    ...(declaredExperts ? { declaredExperts } : {}),
    vocabSize: trunk.vocabSize,
    hiddenSize: trunk.hiddenSize,
    numLayers: trunk.numLayers,
    rmsNormEps: trunk.rmsNormEps,
    intermediateSize: r.range('intermediate_size', r.pos('intermediate_size'), 1, LIMITS.intermediate),
    mtpLayers: trunk.mtpLayers,
    layers: p.layers,
    fullAttnLayers: p.fullAttnLayers,
    mla: p.mla,
    kda: p.kda,
    act: p.act,
    moe: p.moe,
    attnResBlock,
    bosTokenId: bos,
    eosTokenIds: eos,
    maxPositions,
  };
}

/**
 * The experts' format a compressed-tensors `quantization_config` declares (text_config first, then
 * the top level): K2-Thinking / K2.5 `pack-quantized` INT4, K3 `mxfp4-pack-quantized`. Only the
 * config-only index reads it; real tensors say their own format (linear.ts).
 */
function readDeclaredExperts(r: Reader): DeclaredExperts | null {
  const q = r.obj('quantization_config');
  if (!q || q.quant_method !== 'compressed-tensors') return null;
  if (q.format === 'mxfp4-pack-quantized') return 'mxfp4';
  if (q.format !== 'pack-quantized') return null;
  const groups = q.config_groups && typeof q.config_groups === 'object' ? Object.values(q.config_groups as Json) : [];
  const w = (groups[0] as Json | undefined)?.weights as Json | undefined;
  if (!w || w.num_bits !== 4 || w.type !== 'int') return null;
  if (w.group_size !== 32) r.fail(`quantization_config group_size ${JSON.stringify(w.group_size)} is not supported (INT4 experts are read in groups of 32)`);
  return 'int4';
}
