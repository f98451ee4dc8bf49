// config.json -> one typed ModelConfig for the three architectures (docs/spec/ARCHITECTURE.md §2.1, §3.1,
// docs/spec/ARCHITECTURE.md §4.1; docs/spec/K3.md §2). Every field the forward pass uses is read here and nowhere else. A missing or
// contradictory field is an error naming it; unknown extra fields are ignored.
//
// Checkpoint quirks live here too: K3 and K2.5 nest the decoder in `text_config` and prefix tensors
// with `language_model.` (K2.5's decoder is K2's, so it parses as arch k2); Kimi Linear / K3 rename
// DeepSeek's MoE fields; layer lists are 1-based.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../util/errors.js';

export type Arch = 'k2' | 'kimi_linear' | 'k3';
export type AttnKind = 'kda' | 'mla';
export type FfnKind = 'dense' | 'moe';

export interface LayerSpec {
  attn: AttnKind;
  ffn: FfnKind;
}

export interface YarnConfig {
  factor: number;
  originalMaxPosition: number;
  betaFast: number;
  betaSlow: number;
  mscale: number;
  mscaleAllDim: number;
}

export interface MlaConfig {
  heads: number;
  qLoraRank: number | null;
  kvLoraRank: number;
  nopeDim: number;
  ropeDim: number;
  vDim: number;
  /** RoPE on the rope slice (K2) or NoPE (Kimi Linear, K3). */
  rope: { theta: number; yarn: YarnConfig | null } | null;
  outputGate: boolean;
  /** Epsilon of q_a_layernorm / kv_a_layernorm: 1e-6 as Moonshot's HF code (default) or rms_norm_eps (docs/spec/ARCHITECTURE.md §1.7.6). */
  latentNormEps: number;
}

export interface KdaConfig {
  heads: number;
  headDim: number;
  convSize: number;
  /** K3's bounded gate λ·σ(...) when set; Kimi Linear's −exp(A_log)·softplus(...) when null (docs/spec/ARCHITECTURE.md §4.3). */
  gateLowerBound: number | null;
  fullRankGate: boolean;
}

export interface ActConfig {
  kind: 'silu' | 'situ';
  situBeta: number;
  /** null: the SiTU up factor is plain u (docs/spec/ARCHITECTURE.md §4.6). */
  situLinearBeta: number | null;
}

export interface MoeConfig {
  experts: number;
  topK: number;
  shared: number;
  intermediate: number;
  groups: number;
  topkGroup: number;
  renormalize: boolean;
  scaling: number;
  /** K3 latent MoE width (routed_expert_hidden_size), or null for plain MoE. */
  latentDim: number | null;
  latentNorm: boolean;
  /** Kimi Linear HF remote-code quirk: routing weights read the biased score (docs/spec/ARCHITECTURE.md §3.6). Default false. */
  biasedWeights: boolean;
  /** MoE tensor naming, K2's or Kimi's (checkpoint/names.ts spells both). */
  naming: 'k2' | 'kimi';
}

/** Routed-expert format a config's compressed-tensors `quantization_config` declares. */
export type DeclaredExperts = 'int4' | 'mxfp4';

export interface ModelConfig {
  arch: Arch;
  /** 'language_model.' for K3 and K2.5, '' otherwise. */
  prefix: string;
  /** Set for Kimi K2.5 (`model_type: kimi_k25`): K2's decoder in a multimodal wrapper. */
  variant?: 'k25';
  /** The experts' format quantization_config declares (the config-only index uses it); absent when none. */
  declaredExperts?: DeclaredExperts;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  rmsNormEps: number;
  intermediateSize: number;
  layers: LayerSpec[];
  /** 1-based MLA layer list as given (K3, Kimi Linear) or null (K2: every layer is MLA). */
  fullAttnLayers: number[] | null;
  mla: MlaConfig;
  kda: KdaConfig | null;
  act: ActConfig;
  moe: MoeConfig;
  /** Attention Residuals block size (K3), or null. */
  attnResBlock: number | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  maxPositions: number;
  /** DeepSeek-V3's multi-token-prediction layers after the decoder (num_nextn_predict_layers): present in checkpoints, never run. */
  mtpLayers?: number;
}

/** Switches for the places where sources disagree (docs/spec/ARCHITECTURE.md §8). Defaults follow shared/golden/README.md. */
export interface ConfigOverrides {
  /** 'reference' (1e-6, default) or 'config' (rms_norm_eps, as vLLM / llama.cpp / the C engine). */
  mlaLatentNormEps?: 'reference' | 'config';
  /** Kimi Linear: gather routing weights from the biased scores (HF remote code). Default false. */
  kimiLinearBiasedWeights?: boolean;
}

type Json = Record<string, unknown>;

class Reader {
  constructor(
    private readonly file: string,
    private readonly objs: { obj: Json; path: string }[],
  ) {}
  private find(names: string[]): { value: unknown; where: string } | undefined {
    for (const { obj, path: p } of this.objs) {
      for (const n of names) {
        if (Object.prototype.hasOwnProperty.call(obj, n) && obj[n] !== undefined) return { value: obj[n], where: p + n };
      }
    }
    return undefined;
  }
  private missing(names: string[]): never {
    throw new UserError(`${this.file}: missing required field ${this.objs[0]!.path}${names[0]}${names.length > 1 ? ` (or ${names.slice(1).join(', ')})` : ''}`);
  }
  has(...names: string[]): boolean {
    const f = this.find(names);
    return f !== undefined && f.value !== null;
  }
  num(...names: string[]): number {
    const f = this.find(names);
    if (!f || f.value === null) this.missing(names);
    if (typeof f.value !== 'number' || !Number.isFinite(f.value)) throw new UserError(`${this.file}: field ${f.where} must be a number, got ${JSON.stringify(f.value)}`);
    return f.value;
  }
  int(...names: string[]): number {
    const v = this.num(...names);
    if (!Number.isInteger(v) || v < 0) throw new UserError(`${this.file}: field ${names[0]} must be a non-negative integer, got ${v}`);
    return v;
  }
  pos(...names: string[]): number {
    const v = this.int(...names);
    if (v <= 0) throw new UserError(`${this.file}: field ${names[0]} must be positive, got ${v}`);
    return v;
  }
  optNum(def: number | null, ...names: string[]): number | null {
    return this.has(...names) ? this.num(...names) : def;
  }
  optInt(def: number, ...names: string[]): number {
    return this.has(...names) ? this.int(...names) : def;
  }
  bool(def: boolean, ...names: string[]): boolean {
    const f = this.find(names);
    if (!f || f.value === null) return def;
    if (typeof f.value !== 'boolean') throw new UserError(`${this.file}: field ${f.where} must be true or false`);
    return f.value;
  }
  str(def: string | null, ...names: string[]): string | null {
    const f = this.find(names);
    if (!f || f.value === null) return def;
    if (typeof f.value !== 'string') throw new UserError(`${this.file}: field ${f.where} must be a string`);
    return f.value;
  }
  obj(...names: string[]): Json | null {
    const f = this.find(names);
    if (!f || f.value === null) return null;
    if (typeof f.value !== 'object' || Array.isArray(f.value)) throw new UserError(`${this.file}: field ${f.where} must be an object`);
    return f.value as Json;
  }
  intList(...names: string[]): number[] | null {
    const f = this.find(names);
    if (!f || f.value === null) return null;
    if (!Array.isArray(f.value) || !f.value.every((x) => Number.isInteger(x))) throw new UserError(`${this.file}: field ${f.where} must be a list of integers`);
    return f.value as number[];
  }
  ids(...names: string[]): number[] {
    const f = this.find(names);
    if (!f || f.value === null) return [];
    if (typeof f.value === 'number') return [f.value];
    if (Array.isArray(f.value) && f.value.every((x) => Number.isInteger(x))) return f.value as number[];
    throw new UserError(`${this.file}: field ${f.where} must be an id or a list of ids`);
  }
  fail(msg: string): never {
    throw new UserError(`${this.file}: ${msg}`);
  }
  /** `v` (field `name`) must lie in [lo, hi]; `open` makes lo exclusive (a value that must be positive). */
  range(name: string, v: number, lo: number, hi: number, open = false): number {
    const aboveLo = open ? v > lo : v >= lo;
    if (!aboveLo || !(v <= hi)) this.fail(`field ${name} = ${v} is outside ${open ? '(' : '['}${lo}, ${hi}]`);
    return v;
  }
}

// Bounds that follow from the architectures (docs/spec/ARCHITECTURE.md §2.1, §3.1, §4.1) with wide
// margins; they exist so that a damaged or hand-edited config stops here, with a line naming the
// field, instead of allocating a billion layers or computing with a negative epsilon.
export const LIMITS = {
  layers: 1024,
  hidden: 1 << 17,
  vocab: 1 << 24,
  heads: 4096,
  headDim: 4096,
  rank: 1 << 17,
  intermediate: 1 << 20,
  experts: 1 << 14,
  convSize: 64,
  positions: 1 << 30,
  scaling: 1000,
} as const;

/** Read `config.json` from a checkpoint directory (or a path to the file itself). */
export function loadConfig(dirOrFile: string, overrides: ConfigOverrides = {}): ModelConfig {
  const file = dirOrFile.endsWith('.json') ? dirOrFile : path.join(dirOrFile, 'config.json');
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UserError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? String(e)})`, (e as NodeJS.ErrnoException).code === 'ENOENT' ? 2 : 1);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new UserError(`${file}: not valid JSON`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new UserError(`${file}: not a JSON object`);
  return parseConfig(json as Json, file, overrides);
}

export function parseConfig(top: Json, file: string, overrides: ConfigOverrides = {}): ModelConfig {
  const modelType = typeof top.model_type === 'string' ? top.model_type : null;
  let arch: Arch;
  let text: Json = top;
  let prefix = '';
  let textPath = '';
  if (modelType === 'kimi_k3' || modelType === 'kimi_k25') {
    const tc = top.text_config;
    if (typeof tc !== 'object' || tc === null || Array.isArray(tc)) throw new UserError(`${file}: missing required field text_config (model_type ${modelType})`);
    text = tc as Json;
    arch = modelType === 'kimi_k3' ? 'k3' : 'k2';
    prefix = 'language_model.';
    textPath = 'text_config.';
    const inner = text.model_type;
    if (arch === 'k2' && inner !== undefined && inner !== 'kimi_k2' && inner !== 'deepseek_v3') {
      throw new UserError(`${file}: text_config.model_type ${JSON.stringify(inner)} is not kimi_k2 or deepseek_v3 (model_type kimi_k25)`);
    }
  } else if (modelType === 'kimi_linear') {
    arch = 'kimi_linear';
  } else if (modelType === 'deepseek_v3' || modelType === 'kimi_k2') {
    arch = 'k2';
  } else {
    throw new UserError(`${file}: model_type ${JSON.stringify(modelType)} is not one of kimi_k3, kimi_k25, kimi_linear, kimi_k2, deepseek_v3`);
  }
  const lac = (text.linear_attn_config ?? null) as Json | null;
  const textObj = { obj: text, path: textPath };
  const lacObj = lac && typeof lac === 'object' ? [{ obj: lac, path: `${textPath}linear_attn_config.` }] : [];
  // Decoder fields come from text_config first (K3, K2.5), then the top level; KDA fields from
  // linear_attn_config first, because the decoder's own `head_dim` (74 for K3, 72 for Kimi
  // Linear) is an unused derived value.
  const r = new Reader(file, [textObj, ...lacObj, ...(text !== top ? [{ obj: top, path: '' }] : [])]);
  const rk = new Reader(file, [...lacObj, textObj]);

  const numLayers = r.range('num_hidden_layers', r.pos('num_hidden_layers'), 1, LIMITS.layers);
  const hiddenSize = r.range('hidden_size', r.pos('hidden_size'), 1, LIMITS.hidden);
  const vocabSize = r.range('vocab_size', r.pos('vocab_size'), 1, LIMITS.vocab);
  const rmsNormEps = r.range('rms_norm_eps', r.num('rms_norm_eps'), 0, 0.1, true);
  const mtpLayers = r.range('num_nextn_predict_layers', r.optInt(0, 'num_nextn_predict_layers'), 0, 16);
  const firstDense = r.range('first_k_dense_replace', r.int('first_k_dense_replace'), 0, numLayers);
  const moeFreq = r.optInt(1, 'moe_layer_freq');
  if (moeFreq !== 1) r.fail(`moe_layer_freq ${moeFreq} is not supported (every Kimi / DeepSeek-V3 config uses 1)`);
  if (r.bool(false, 'tie_word_embeddings')) r.fail('tie_word_embeddings = true is not a Kimi checkpoint (lm_head is separate)');

  // Layer map (docs/spec/ARCHITECTURE.md §3.2, §4.2): 0-based layer l is MLA iff l+1 is in full_attn_layers (1-based).
  let fullAttnLayers: number[] | null = null;
  const attnOf: AttnKind[] = new Array(numLayers).fill('mla');
  if (arch !== 'k2') {
    if (!lac) r.fail(`missing required field ${textPath}linear_attn_config`);
    fullAttnLayers = rk.intList('full_attn_layers');
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
    if (fullAttnLayers && kdaLayers) {
      for (let l = 0; l < numLayers; l++) {
        const inF = fullAttnLayers.includes(l + 1);
        const inK = kdaLayers.includes(l + 1);
        if (inF === inK) r.fail(`linear_attn_config: layer ${l + 1} (1-based) is ${inF ? 'in both' : 'in neither'} full_attn_layers and kda_layers`);
      }
    }
  }
  const layers: LayerSpec[] = attnOf.map((attn, l) => ({ attn, ffn: l < firstDense ? 'dense' : 'moe' }));

  // MLA (docs/spec/ARCHITECTURE.md §1.7).
  const qLora = r.has('q_lora_rank') ? r.pos('q_lora_rank') : null;
  let rope: MlaConfig['rope'] = null;
  if (arch === 'k2') {
    const theta = r.range('rope_theta', r.num('rope_theta'), 0, 1e12, true);
    const rs = r.obj('rope_scaling');
    let yarn: YarnConfig | null = null;
    if (rs) {
      const type = rs.type ?? rs.rope_type;
      if (type !== 'yarn') r.fail(`rope_scaling.type ${JSON.stringify(type)} is not supported (only "yarn")`);
      const rr = new Reader(file, [{ obj: rs, path: 'rope_scaling.' }]);
      yarn = {
        factor: rr.range('rope_scaling.factor', rr.num('factor'), 0, 1e4, true),
        originalMaxPosition: rr.range('rope_scaling.original_max_position_embeddings', rr.pos('original_max_position_embeddings'), 1, LIMITS.positions),
        // Rotations per wavelength bounds; a negative mscale would shrink (or flip) the rope amplitude.
        betaFast: rr.range('rope_scaling.beta_fast', rr.optNum(32, 'beta_fast')!, 0, 1e4, true),
        betaSlow: rr.range('rope_scaling.beta_slow', rr.optNum(1, 'beta_slow')!, 0, 1e4, true),
        mscale: rr.range('rope_scaling.mscale', rr.optNum(1, 'mscale')!, 0, 100),
        mscaleAllDim: rr.range('rope_scaling.mscale_all_dim', rr.optNum(0, 'mscale_all_dim')!, 0, 100),
      };
      if (yarn.betaFast < yarn.betaSlow) r.fail(`field rope_scaling.beta_fast = ${yarn.betaFast} must be at least rope_scaling.beta_slow = ${yarn.betaSlow}`);
    }
    rope = { theta, yarn };
  } else if (!r.bool(true, 'mla_use_nope')) {
    r.fail('mla_use_nope = false is not supported for Kimi Linear / K3 (they use NoPE MLA)');
  }
  const mla: MlaConfig = {
    heads: r.pos('num_attention_heads'),
    qLoraRank: qLora,
    kvLoraRank: r.pos('kv_lora_rank'),
    nopeDim: r.pos('qk_nope_head_dim'),
    ropeDim: r.pos('qk_rope_head_dim'),
    vDim: r.pos('v_head_dim'),
    rope,
    outputGate: arch === 'k3' ? r.bool(true, 'mla_use_output_gate') : r.bool(false, 'mla_use_output_gate'),
    latentNormEps: overrides.mlaLatentNormEps === 'config' ? rmsNormEps : 1e-6,
  };
  r.range('num_attention_heads', mla.heads, 1, LIMITS.heads);
  if (qLora !== null) r.range('q_lora_rank', qLora, 1, LIMITS.rank);
  r.range('kv_lora_rank', mla.kvLoraRank, 1, LIMITS.rank);
  for (const [nm, v] of [['qk_nope_head_dim', mla.nopeDim], ['qk_rope_head_dim', mla.ropeDim], ['v_head_dim', mla.vDim]] as const) r.range(nm, v, 1, LIMITS.headDim);
  if (mla.ropeDim % 2 !== 0) r.fail(`field qk_rope_head_dim = ${mla.ropeDim} must be even (rope rotates pairs)`);

  // KDA (docs/spec/ARCHITECTURE.md §3.3, §4.3).
  let kda: KdaConfig | null = null;
  if (attnOf.includes('kda')) {
    kda = {
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
  }
  if (arch === 'k3' && (!kda || kda.gateLowerBound === null)) r.fail('K3 needs linear_attn_config.gate_lower_bound');

  // Activation (docs/spec/ARCHITECTURE.md §1.2, §4.6).
  const hiddenAct = r.str('silu', 'hidden_act');
  let act: ActConfig;
  if (hiddenAct === 'situ') {
    act = { kind: 'situ', situBeta: r.num('activation_situ_beta', 'situ_beta'), situLinearBeta: r.optNum(null, 'activation_situ_linear_beta', 'situ_linear_beta') };
  } else if (hiddenAct === 'silu') {
    act = { kind: 'silu', situBeta: 0, situLinearBeta: null };
  } else {
    return r.fail(`hidden_act ${JSON.stringify(hiddenAct)} is not supported (silu or situ)`);
  }

  // MoE (docs/spec/ARCHITECTURE.md §1.5; Kimi renames: num_experts <-> n_routed_experts, ...).
  const kimiNames = arch !== 'k2';
  const experts = r.range(kimiNames ? 'num_experts' : 'n_routed_experts', kimiNames ? r.pos('num_experts') : r.pos('n_routed_experts'), 1, LIMITS.experts);
  const topK = kimiNames ? r.pos('num_experts_per_token') : r.pos('num_experts_per_tok');
  if (topK > experts) r.fail(`${kimiNames ? 'num_experts_per_token' : 'num_experts_per_tok'} ${topK} exceeds the ${experts} experts`);
  const groups = kimiNames ? r.optInt(1, 'num_expert_group') : r.optInt(1, 'n_group');
  const topkGroup = r.optInt(1, 'topk_group');
  if (groups < 1 || experts % groups !== 0) r.fail(`expert groups ${groups} do not divide ${experts} experts`);
  if (topkGroup < 1 || topkGroup > groups) r.fail(`topk_group ${topkGroup} is outside 1..${groups}`);
  // Group-limited routing keeps topk_group groups of experts/groups each: they must hold top-k.
  if (groups > 1 && topkGroup < groups && topK > topkGroup * (experts / groups)) {
    r.fail(`top-k ${topK} exceeds the ${topkGroup * (experts / groups)} experts of the ${topkGroup} groups routing keeps (topk_group x experts / groups)`);
  }
  const scoring = kimiNames ? r.str('sigmoid', 'moe_router_activation_func') : r.str('sigmoid', 'scoring_func');
  if (scoring !== 'sigmoid') r.fail(`router scoring ${JSON.stringify(scoring)} is not supported (sigmoid)`);
  const latentDim = arch === 'k3' ? r.pos('routed_expert_hidden_size') : null;
  const moe: MoeConfig = {
    experts,
    topK,
    shared: kimiNames ? r.int('num_shared_experts') : r.int('n_shared_experts'),
    intermediate: r.pos('moe_intermediate_size'),
    groups,
    topkGroup,
    renormalize: kimiNames ? r.bool(true, 'moe_renormalize') : r.bool(true, 'norm_topk_prob'),
    scaling: r.range('routed_scaling_factor', r.num('routed_scaling_factor'), 0, LIMITS.scaling, true),
    latentDim,
    latentNorm: arch === 'k3' ? r.bool(true, 'latent_moe_use_norm') : false,
    biasedWeights: arch === 'kimi_linear' && overrides.kimiLinearBiasedWeights === true,
    naming: kimiNames ? 'kimi' : 'k2',
  };

  r.range('moe_intermediate_size', moe.intermediate, 1, LIMITS.intermediate);
  r.range(kimiNames ? 'num_shared_experts' : 'n_shared_experts', moe.shared, 0, 64);
  if (latentDim !== null) r.range('routed_expert_hidden_size', latentDim, 1, LIMITS.hidden);
  if (act.kind === 'situ') r.range('activation_situ_beta', act.situBeta, 0, 1e4, true);
  const attnResBlock = arch === 'k3' ? r.range('attn_res_block_size', r.pos('attn_res_block_size'), 1, LIMITS.layers) : null;
  const eos = r.ids('eos_token_id');
  const bos = r.has('bos_token_id') ? r.int('bos_token_id') : null;
  const maxPositions = r.range('max_position_embeddings', r.optInt(0, 'max_position_embeddings', 'model_max_length'), 0, LIMITS.positions) || 1 << 20;
  for (const id of [...eos, ...(bos !== null ? [bos] : [])]) if (id < 0 || id >= LIMITS.vocab) r.fail(`token id ${id} (bos / eos) is not a vocabulary id`);

  const declaredExperts = readDeclaredExperts(r);
  return {
    arch,
    prefix,
    ...(modelType === 'kimi_k25' ? { variant: 'k25' as const } : {}),
    ...(declaredExperts ? { declaredExperts } : {}),
    vocabSize,
    hiddenSize,
    numLayers,
    rmsNormEps,
    intermediateSize: r.range('intermediate_size', r.pos('intermediate_size'), 1, LIMITS.intermediate),
    mtpLayers,
    layers,
    fullAttnLayers,
    mla,
    kda,
    act,
    moe,
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
