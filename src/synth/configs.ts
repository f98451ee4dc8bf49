// config.json for each synthetic architecture, field for field in the official shape:
// K3 as shared/golden/k3/config.json (docs/spec/K3.md §2: top level + `text_config` with the transformers
// bookkeeping defaults + `linear_attn_config` + `quantization_config` + a vision_config stub),
// Kimi Linear as shared/golden/kimi-linear, K2 as shared/golden/k2-yarn (+ the INT4
// compressed-tensors block of k2-thinking-int4, or DeepSeek-V3's FP8 block), K2.5 as
// shared/realdata/k25/config.json with the K2 config (same values) as its `text_config`.

import type { ResolvedSynth, SynthDims } from './dims.js';

type Json = Record<string, unknown>;

/**
 * K3 special ids sit at fixed distances from the vocabulary's end (163584 / 163586 / 163839 /
 * 163605 of 163840). The demo model's built-in tokenizer has only the last 16 slots special
 * (src/tokenizer/demo.ts: [BOS], [EOS], <|end_of_msg|>, … , <|media_pad|> at +13, [PAD] last), so
 * its config points at those: eos is <|end_of_msg|>, as in the real config.
 */
export function k3TokenIds(vocab: number, preset?: string): { bos: number; eos: number; pad: number; media: number } {
  if (preset === 'demo') return { bos: vocab - 16, eos: vocab - 14, pad: vocab - 1, media: vocab - 3 };
  return { bos: vocab - 256, eos: vocab - 254, pad: vocab - 1, media: vocab - 235 };
}

function kdaLayers(d: SynthDims): number[] {
  const out: number[] = [];
  for (let l = 1; l <= d.layers; l++) if (!d.mlaLayers.includes(l)) out.push(l);
  return out;
}

/** The weights block of a compressed-tensors group (4 bits in groups of 32, symmetric) with `extra`, keys sorted as the files have them. */
function groupWeights(extra: Json): Json {
  const common: Json = { actorder: null, block_structure: null, dynamic: false, group_size: 32, num_bits: 4, observer: 'minmax', observer_kwargs: {}, strategy: 'group', symmetric: true };
  return Object.fromEntries(Object.entries({ ...common, ...extra }).sort(([a], [b]) => (a < b ? -1 : 1)));
}

export const K3_QUANTIZATION_CONFIG: Json = {
  config_groups: {
    group_0: {
      format: 'mxfp4-pack-quantized',
      input_activations: null,
      output_activations: null,
      targets: ['Linear'],
      weights: groupWeights({ scale_dtype: 'torch.uint8', type: 'float', zp_dtype: null }),
    },
  },
  format: 'mxfp4-pack-quantized',
  global_compression_ratio: null,
  ignore: ['re:.*self_attn.*', 're:.*shared_experts.*', 're:.*mlp\\.(gate|up|gate_up|down)_proj.*', 're:.*lm_head.*', 're:.*vision_tower.*', 're:.*mm_projector.*'],
  kv_cache_scheme: null,
  quant_method: 'compressed-tensors',
  quantization_status: 'compressed',
};

export const K2_INT4_QUANTIZATION_CONFIG: Json = {
  config_groups: {
    group_0: {
      input_activations: null,
      output_activations: null,
      targets: ['Linear'],
      weights: groupWeights({ type: 'int' }),
    },
  },
  format: 'pack-quantized',
  ignore: ['lm_head', 're:.*self_attn.*', 're:.*shared_experts.*', 're:.*mlp\\.(gate|up|gate_up|down)_proj.*'],
  kv_cache_scheme: null,
  quant_method: 'compressed-tensors',
  quantization_status: 'compressed',
};

export const K2_FP8_QUANTIZATION_CONFIG: Json = {
  activation_scheme: 'dynamic',
  fmt: 'e4m3',
  quant_method: 'fp8',
  weight_block_size: [128, 128],
};

/** Vision-tower stub dims (as the golden K3): 1 block of width 32, projector width 4 x 32. */
export const K3_VISION = { vtHidden: 32, mmHidden: 32, patch: 14 };

/** The decoder fields Kimi Linear's config and K3's text_config share (same names and values). */
function kimiDecoderFields(d: SynthDims): Json {
  return {
    first_k_dense_replace: d.firstDense,
    hidden_size: d.hidden,
    initializer_range: 0.02,
    intermediate_size: d.intermediate,
    kv_lora_rank: d.kvLoraRank,
    mla_use_nope: true,
    model_type: 'kimi_linear',
    moe_intermediate_size: d.moeIntermediate,
    moe_layer_freq: 1,
    moe_renormalize: true,
    moe_router_activation_func: 'sigmoid',
    num_attention_heads: d.heads,
    num_expert_group: d.groups,
    num_experts: d.experts,
    num_experts_per_token: d.topK,
    num_hidden_layers: d.layers,
    num_key_value_heads: d.heads,
    num_nextn_predict_layers: 0,
    num_shared_experts: d.sharedExperts,
    q_lora_rank: d.qLoraRank,
    qk_nope_head_dim: d.nopeDim,
    qk_rope_head_dim: d.ropeDim,
    rms_norm_eps: 1e-5,
    tie_word_embeddings: false,
    topk_group: d.topkGroup,
    use_cache: true,
    use_grouped_topk: true,
    v_head_dim: d.vDim,
    vocab_size: d.vocab,
  };
}

/** The transformers PretrainedConfig bookkeeping a nested `text_config` carries (K3, K2.5: saved by transformers 4.56). */
const TRANSFORMERS_TEXT_DEFAULTS: Json = {
  _name_or_path: '',
  add_cross_attention: false,
  bad_words_ids: null,
  begin_suppress_tokens: null,
  chunk_size_feed_forward: 0,
  cross_attention_hidden_size: null,
  decoder_start_token_id: null,
  diversity_penalty: 0.0,
  do_sample: false,
  early_stopping: false,
  encoder_no_repeat_ngram_size: 0,
  exponential_decay_length_penalty: null,
  finetuning_task: null,
  forced_bos_token_id: null,
  forced_eos_token_id: null,
  id2label: { '0': 'LABEL_0', '1': 'LABEL_1' },
  is_decoder: false,
  is_encoder_decoder: false,
  label2id: { LABEL_0: 0, LABEL_1: 1 },
  length_penalty: 1.0,
  max_length: 20,
  min_length: 0,
  no_repeat_ngram_size: 0,
  num_beam_groups: 1,
  num_beams: 1,
  num_return_sequences: 1,
  output_attentions: false,
  output_hidden_states: false,
  output_scores: false,
  prefix: null,
  problem_type: null,
  pruned_heads: {},
  remove_invalid_values: false,
  repetition_penalty: 1.0,
  return_dict: true,
  return_dict_in_generate: false,
  sep_token_id: null,
  suppress_tokens: null,
  task_specific_params: null,
  temperature: 1.0,
  tf_legacy_loss: false,
  tie_encoder_decoder: false,
  tokenizer_class: null,
  top_k: 50,
  top_p: 1.0,
  torchscript: false,
  typical_p: 1.0,
  use_bfloat16: false,
};

/** K3's vision_config: the stub tower's dims (K3_VISION) in the real config's fields. */
function k3VisionConfig(d: SynthDims): Json {
  return {
    _attn_implementation: 'flash_attention_2',
    activation_func: 'gelu_pytorch_tanh',
    attn_bias: false,
    init_pos_emb_height: 4,
    init_pos_emb_time: 4,
    init_pos_emb_width: 4,
    linear_bias: false,
    merge_kernel_size: [2, 2],
    merge_type: 'sd2_tpool',
    mlp_type: 'mlp2',
    mm_hidden_size: K3_VISION.mmHidden,
    mm_projector_type: 'patchmergerv2',
    norm_type: 'rmsnorm',
    patch_embed_proj_bias: false,
    patch_size: K3_VISION.patch,
    pos_emb_interpolation_mode: 'bilinear',
    pos_emb_type: 'divided_fixed',
    projector_hidden_act: 'gelu',
    projector_ln_eps: 1e-5,
    qkv_hidden_size: 3 * K3_VISION.vtHidden,
    text_hidden_size: d.hidden,
    vt_hidden_size: K3_VISION.vtHidden,
    vt_intermediate_size: 4 * K3_VISION.vtHidden,
    vt_num_attention_heads: 2,
    vt_num_hidden_layers: 1,
  };
}

function k3Config(r: ResolvedSynth): Json {
  const d = r.dims;
  const ids = k3TokenIds(d.vocab, r.preset);
  const text: Json = {
    ...TRANSFORMERS_TEXT_DEFAULTS,
    activation_situ_beta: 4.0,
    activation_situ_linear_beta: 25.0,
    architectures: ['KimiLinearForCausalLM'],
    attn_res_block_size: d.attnResBlock,
    auto_map: {
      AutoConfig: 'configuration_kimi_k3.KimiLinearConfig',
      AutoModel: 'modeling_kimi_linear.KimiLinearModel',
      AutoModelForCausalLM: 'modeling_kimi_linear.KimiLinearForCausalLM',
    },
    bos_token_id: ids.bos,
    dtype: 'bfloat16',
    eos_token_id: ids.eos,
    ...kimiDecoderFields(d),
    hidden_act: 'situ',
    latent_moe_use_norm: true,
    linear_attn_config: {
      full_attn_layers: d.mlaLayers,
      gate_lower_bound: -5.0,
      head_dim: d.kdaHeadDim,
      kda_layers: kdaLayers(d),
      num_heads: d.kdaHeads,
      short_conv_kernel_size: d.convSize,
      use_full_rank_gate: true,
    },
    max_position_embeddings: 1048576,
    mla_use_output_gate: true,
    pad_token_id: ids.pad,
    quantization_config: K3_QUANTIZATION_CONFIG,
    routed_expert_hidden_size: d.latent,
    routed_scaling_factor: 1.0,
    topk_method: 'noaux_tc',
    transformers_version: '4.56.2',
  };
  // Unquantized experts: no compressed-tensors block (it would claim MXFP4 experts).
  if (r.expertsFormat !== 'mxfp4') delete text.quantization_config;
  return {
    architectures: ['KimiK3ForConditionalGeneration'],
    auto_map: {
      AutoConfig: 'configuration_kimi_k3.KimiK3Config',
      AutoModel: 'modeling_kimi_k3.KimiK3ForConditionalGeneration',
      AutoModelForCausalLM: 'modeling_kimi_k3.KimiK3ForConditionalGeneration',
    },
    bos_token_id: ids.bos,
    dtype: 'bfloat16',
    eos_token_id: ids.eos,
    ignore_index: -100,
    image_placeholder: '<|kimi_image_placeholder|>',
    media_placeholder_token_id: ids.media,
    model_type: 'kimi_k3',
    pad_token_id: ids.pad,
    text_config: text,
    tie_word_embeddings: false,
    vision_config: k3VisionConfig(d),
  };
}

function kimiLinearConfig(r: ResolvedSynth): Json {
  const d = r.dims;
  return {
    architectures: ['KimiLinearForCausalLM'],
    auto_map: {
      AutoConfig: 'configuration_kimi.KimiLinearConfig',
      AutoModel: 'modeling_kimi.KimiLinearModel',
      AutoModelForCausalLM: 'modeling_kimi.KimiLinearForCausalLM',
    },
    bos_token_id: 1,
    dtype: 'bfloat16',
    eos_token_id: 2,
    ...kimiDecoderFields(d),
    head_dim: d.kdaHeadDim,
    hidden_act: 'silu',
    linear_attn_config: {
      full_attn_layers: d.mlaLayers,
      head_dim: d.kdaHeadDim,
      kda_layers: kdaLayers(d),
      num_heads: d.kdaHeads,
      short_conv_kernel_size: d.convSize,
    },
    model_max_length: 1048576,
    pad_token_id: 0,
    rope_scaling: null,
    rope_theta: 10000.0,
    routed_scaling_factor: 2.446,
    transformers_version: '4.56.0',
  };
}

function k2Config(r: ResolvedSynth): Json {
  const d = r.dims;
  const c: Json = {
    architectures: ['DeepseekV3ForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    auto_map: {
      AutoConfig: 'configuration_deepseek.DeepseekV3Config',
      AutoModel: 'modeling_deepseek.DeepseekV3Model',
      AutoModelForCausalLM: 'modeling_deepseek.DeepseekV3ForCausalLM',
    },
    aux_loss_alpha: 0.001,
    bos_token_id: 1,
    eos_token_id: 2,
    ep_size: 1,
    first_k_dense_replace: d.firstDense,
    hidden_act: 'silu',
    hidden_size: d.hidden,
    initializer_range: 0.02,
    intermediate_size: d.intermediate,
    kv_lora_rank: d.kvLoraRank,
    max_position_embeddings: 131072,
    model_type: 'kimi_k2',
    moe_intermediate_size: d.moeIntermediate,
    moe_layer_freq: 1,
    n_group: d.groups,
    n_routed_experts: d.experts,
    n_shared_experts: d.sharedExperts,
    norm_topk_prob: true,
    num_attention_heads: d.heads,
    num_experts_per_tok: d.topK,
    num_hidden_layers: d.layers,
    num_key_value_heads: d.heads,
    num_nextn_predict_layers: 0,
    pretraining_tp: 1,
    q_lora_rank: d.qLoraRank,
    qk_nope_head_dim: d.nopeDim,
    qk_rope_head_dim: d.ropeDim,
    rms_norm_eps: 1e-6,
    rope_scaling: {
      beta_fast: 1.0,
      beta_slow: 1.0,
      factor: 32.0,
      mscale: 1.0,
      mscale_all_dim: 1.0,
      original_max_position_embeddings: 4096,
      type: 'yarn',
    },
    rope_theta: 50000.0,
    routed_scaling_factor: 2.827,
    scoring_func: 'sigmoid',
    seq_aux: true,
    tie_word_embeddings: false,
    topk_group: d.topkGroup,
    topk_method: 'noaux_tc',
    torch_dtype: 'bfloat16',
    transformers_version: '4.48.3',
    use_cache: true,
    v_head_dim: d.vDim,
    vocab_size: d.vocab,
  };
  if (r.expertsFormat === 'int4') c.quantization_config = K2_INT4_QUANTIZATION_CONFIG;
  if (r.expertsFormat === 'fp8') c.quantization_config = K2_FP8_QUANTIZATION_CONFIG;
  return c;
}

function k25Config(r: ResolvedSynth): Json {
  const d = r.dims;
  const { torch_dtype: _dtype, transformers_version: _version, ...k2 } = k2Config(r);
  const text: Json = { ...TRANSFORMERS_TEXT_DEFAULTS, ...k2, dtype: 'bfloat16', pad_token_id: d.vocab - 1, transformers_version: '4.56.2' };
  return {
    architectures: ['KimiK25ForConditionalGeneration'],
    auto_map: {
      AutoConfig: 'configuration_kimi_k25.KimiK25Config',
      AutoModel: 'modeling_kimi_k25.KimiK25ForConditionalGeneration',
      AutoModelForCausalLM: 'modeling_kimi_k25.KimiK25ForConditionalGeneration',
    },
    bos_token_id: text.bos_token_id,
    dtype: 'bfloat16',
    eos_token_id: text.eos_token_id,
    ignore_index: -100,
    media_placeholder_token_id: k3TokenIds(d.vocab).media,
    model_type: 'kimi_k25',
    pad_token_id: d.vocab - 1,
    text_config: text,
    tie_word_embeddings: false,
    use_unified_vision_chunk: true,
    video_placeholder: '<|kimi_k25_video_placeholder|>',
    vision_config: {
      _attn_implementation: 'flash_attention_2',
      init_pos_emb_height: 4,
      init_pos_emb_time: 4,
      init_pos_emb_width: 4,
      merge_kernel_size: [2, 2],
      merge_type: 'sd2_tpool',
      mm_hidden_size: K3_VISION.mmHidden,
      mm_projector_type: 'patchmerger',
      patch_size: K3_VISION.patch,
      pos_emb_type: 'divided_fixed',
      projector_hidden_act: 'gelu',
      projector_ln_eps: 1e-5,
      text_hidden_size: d.hidden,
      video_attn_type: 'spatial_temporal',
      vt_hidden_size: K3_VISION.vtHidden,
      vt_intermediate_size: 4 * K3_VISION.vtHidden,
      vt_num_attention_heads: 2,
      vt_num_hidden_layers: 1,
    },
  };
}

export function buildConfig(r: ResolvedSynth): Json {
  switch (r.arch) {
    case 'k3':
      return k3Config(r);
    case 'kimi_linear':
      return kimiLinearConfig(r);
    case 'k2':
      return k2Config(r);
    case 'k25':
      return k25Config(r);
  }
}
