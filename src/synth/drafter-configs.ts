// config.json of the four published K3 DSpark drafters, as the loader reads them
// (docs/DSPARK.md §1 says which values come from which public source and which ones this project
// chose), at the real sizes or shrunk to `tiny` for tests. Only the sizes change between the two;
// every field that says how the drafter attaches to K3 (format, slot layout, stream, block, heads)
// is kept.

import type { Json } from '../checkpoint/config-reader.js';

export const DRAFTER_LAYOUTS = ['inferact', 'inferact-block5', 'radixark', 'redhatai'] as const;
export type DrafterLayout = (typeof DRAFTER_LAYOUTS)[number];
export type DrafterDims = 'real' | 'tiny';

/** K3's vocabulary has 163840 ids; the drafters' mask token is a reserved id near its end. */
const K3_VOCAB = 163840;
const MASK = 163837;

/** Sizes of one drafter: real (the published checkpoints) or tiny (a 4-layer, 64-wide target). */
interface Sizes {
  hidden: number;
  inter: number;
  vocab: number;
  mask: number;
  targetLayers: number;
  mla: { heads: number; q: number; kv: number; nope: number; rope: number; v: number };
  gqa: { heads: number; kv: number; dim: number };
  gqaWide: { heads: number; kv: number; dim: number };
  markov: number;
  markovWide: number;
  window: number;
  /** Taps per layout (0-based target layers; speculators ids are these + 1). */
  taps: Record<DrafterLayout, number[]>;
}

const REAL: Sizes = {
  hidden: 7168, inter: 14336, vocab: K3_VOCAB, mask: MASK, targetLayers: 93,
  mla: { heads: 64, q: 1536, kv: 512, nope: 128, rope: 64, v: 128 },
  gqa: { heads: 64, kv: 16, dim: 64 },
  gqaWide: { heads: 96, kv: 16, dim: 64 },
  markov: 256, markovWide: 512, window: 2048,
  taps: { inferact: [2, 23, 47, 71, 89], 'inferact-block5': [23, 47, 71], radixark: [7, 23, 51, 67, 83], redhatai: [23, 47, 71, 87, 91] },
};

const TINY: Sizes = {
  hidden: 64, inter: 96, vocab: 512, mask: 509, targetLayers: 4,
  mla: { heads: 2, q: 24, kv: 16, nope: 8, rope: 8, v: 8 },
  gqa: { heads: 4, kv: 2, dim: 16 },
  gqaWide: { heads: 6, kv: 2, dim: 16 },
  markov: 8, markovWide: 12, window: 16,
  taps: { inferact: [0, 1, 2, 3], 'inferact-block5': [1, 2, 3], radixark: [0, 2, 3], redhatai: [1, 2, 3] },
};

export function drafterSizes(dims: DrafterDims): Sizes {
  return dims === 'real' ? REAL : TINY;
}

/** A target to fit a drafter to: K3's hidden size, depth and vocabulary. */
export interface DrafterTarget {
  hidden: number;
  layers: number;
  vocab: number;
}

/**
 * Tiny sizes fitted to `t`: its width (the drafter shares its embedding and lm_head), depth and
 * vocabulary (mask token 3 from the end, as tiny's), and the tiny taps spread over its depth (the
 * first and the last layer included).
 */
function fitted(t: DrafterTarget): Sizes {
  if (t.layers < 4) throw new Error(`synth: a drafter needs a target of at least 4 layers (its taps), this one has ${t.layers}`);
  const spread = (taps: number[]): number[] => taps.map((x) => Math.round((x * (t.layers - 1)) / 3));
  const taps = Object.fromEntries(Object.entries(TINY.taps).map(([k, v]) => [k, spread(v)])) as Sizes['taps'];
  return { ...TINY, hidden: t.hidden, vocab: t.vocab, mask: t.vocab - 3, targetLayers: t.layers, taps };
}

/** The drafter's config.json for a layout at some sizes (tiny fitted to `target` when given). */
export function drafterConfigJson(layout: DrafterLayout, dims: DrafterDims, target?: DrafterTarget): Json {
  const s = target ? fitted(target) : drafterSizes(dims);
  if (layout === 'inferact' || layout === 'inferact-block5') return k3Dspark(s, layout);
  if (layout === 'radixark') return radixark(s);
  return redhatai(s);
}

function k3Dspark(s: Sizes, layout: 'inferact' | 'inferact-block5'): Json {
  const b5 = layout === 'inferact-block5';
  const taps = s.taps[layout];
  return {
    architectures: ['K3DSparkModel'],
    model_type: 'k3_dspark',
    hidden_size: s.hidden, intermediate_size: s.inter, num_hidden_layers: b5 ? 3 : 5,
    num_attention_heads: s.mla.heads, num_key_value_heads: s.mla.heads,
    q_lora_rank: s.mla.q, kv_lora_rank: s.mla.kv, qk_nope_head_dim: s.mla.nope, qk_rope_head_dim: s.mla.rope, v_head_dim: s.mla.v,
    mla_use_nope: false, mla_use_output_gate: false,
    vocab_size: s.vocab, rms_norm_eps: 1e-5, hidden_act: 'silu', tie_word_embeddings: false,
    max_position_embeddings: 1048576,
    rope_parameters: { rope_type: 'yarn', rope_theta: 50000, factor: 16, original_max_position_embeddings: 65536, beta_fast: 32, beta_slow: 1, mscale: 1, mscale_all_dim: 1 },
    num_target_layers: taps.length, target_hidden_size: s.hidden, target_num_hidden_layers: s.targetLayers, target_layer_ids: taps,
    fc_norm: false, aux_hidden_stream: 'prefix', mask_token_id: s.mask,
    markov_rank: b5 ? s.markovWide : s.markov, markov_head_type: 'vanilla',
    enable_confidence_head: true, confidence_head_with_markov: true,
    block_size: b5 ? 5 : 7,
    ...(b5 ? { sample_from_anchor: false, block_causal: true } : {}),
    torch_dtype: 'bfloat16', transformers_version: '4.56.2',
  };
}

function qwen3Layers(s: Sizes, g: Sizes['gqa'], kinds: string[] | null): Json {
  return {
    hidden_size: s.hidden, intermediate_size: s.inter, num_hidden_layers: 5,
    num_attention_heads: g.heads, num_key_value_heads: g.kv, head_dim: g.dim,
    vocab_size: s.vocab, rms_norm_eps: 1e-6, hidden_act: 'silu', attention_bias: false, tie_word_embeddings: false,
    ...(kinds ? { layer_types: kinds, sliding_window: s.window, use_sliding_window: true } : {}),
  };
}

function radixark(s: Sizes): Json {
  return {
    architectures: ['DSparkDraftModel'],
    model_type: 'qwen3',
    ...qwen3Layers(s, s.gqa, null),
    max_position_embeddings: 1048576,
    rope_theta: 10000,
    rope_scaling: { rope_type: 'yarn', factor: 16, original_max_position_embeddings: 65536, beta_fast: 32, beta_slow: 1 },
    block_size: 7,
    num_target_layers: s.targetLayers,
    target_hidden_size: s.hidden,
    dflash_config: { target_layer_ids: s.taps.radixark, mask_token_id: s.mask },
    markov_rank: s.markov, markov_head_type: 'vanilla',
    enable_confidence_head: true, confidence_head_with_markov: true,
    torch_dtype: 'bfloat16', transformers_version: '4.57.1',
  };
}

function redhatai(s: Sizes): Json {
  const kinds = ['sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention'];
  return {
    architectures: ['DSparkSpeculator'],
    speculators_model_type: 'dspark',
    speculators_version: '0.5.0',
    speculators_config: {
      algorithm: 'dspark',
      proposal_methods: [{ proposal_type: 'greedy', speculative_tokens: 8 }],
      default_proposal_method: 'greedy',
      verifier: { name_or_path: 'moonshotai/Kimi-K3', architectures: ['KimiK3ForConditionalGeneration'] },
    },
    transformer_layer_config: {
      model_type: 'qwen3',
      ...qwen3Layers(s, s.gqaWide, kinds),
      max_position_embeddings: 1048576,
      rope_parameters: { rope_type: 'default', rope_theta: 10000 },
    },
    draft_vocab_size: s.vocab,
    block_size: 8,
    num_anchors: 256,
    target_hidden_size: s.hidden,
    aux_hidden_state_layer_ids: s.taps.redhatai.map((t) => t + 1),
    mask_token_id: s.mask,
    markov_rank: s.markov, markov_head_type: 'vanilla',
    enable_confidence_head: true, confidence_head_with_markov: true,
    ce_loss_alpha: 1.0, l1_loss_alpha: 0.0, confidence_head_alpha: 0.1, loss_decay_gamma: null,
    torch_dtype: 'bfloat16', transformers_version: '4.57.1',
  };
}
