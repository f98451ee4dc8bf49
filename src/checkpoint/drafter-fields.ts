// The fields a DSpark drafter config may carry, per format (docs/DSPARK.md §2): the ones the
// loader reads, and the ones it knowingly skips (transformers' generic metadata, training-only
// loss weights). Any other field is refused: a drafter that disagrees with the engine about a
// tap, a slot or a stream only drafts worse, with no error, so a field the loader does not
// understand stops the load instead of being skipped.

import type { Json } from './config-reader.js';
import { UserError } from '../util/errors.js';

/** transformers' PretrainedConfig bookkeeping, written into any config it saves; none changes the network. */
const GENERIC = [
  '_name_or_path', 'add_cross_attention', 'architectures', 'auto_map', 'bad_words_ids', 'begin_suppress_tokens', 'bos_token_id',
  'chunk_size_feed_forward', 'cross_attention_hidden_size', 'decoder_start_token_id', 'diversity_penalty', 'do_sample', 'dtype',
  'early_stopping', 'encoder_no_repeat_ngram_size', 'eos_token_id', 'exponential_decay_length_penalty', 'finetuning_task',
  'forced_bos_token_id', 'forced_eos_token_id', 'id2label', 'initializer_range', 'is_decoder', 'is_encoder_decoder', 'label2id',
  'length_penalty', 'max_length', 'min_length', 'no_repeat_ngram_size', 'num_beam_groups', 'num_beams', 'num_return_sequences',
  'output_attentions', 'output_hidden_states', 'output_scores', 'pad_token_id', 'prefix', 'problem_type', 'pruned_heads',
  'remove_invalid_values', 'repetition_penalty', 'return_dict', 'return_dict_in_generate', 'sep_token_id', 'suppress_tokens',
  'task_specific_params', 'temperature', 'tf_legacy_loss', 'tie_encoder_decoder', 'tokenizer_class', 'top_k', 'top_p', 'torch_dtype',
  'torchscript', 'transformers_version', 'typical_p', 'use_bfloat16', 'use_cache', 'attention_dropout',
];

/** Fields checked to hold their one supported value (the loader reads them to refuse the others). */
const CHECKED = ['model_type', 'tie_word_embeddings', 'attention_bias', 'hidden_act'];

const ROPE = ['rope_theta', 'rope_parameters', 'rope_scaling', 'max_position_embeddings'];

const HEADS = ['markov_rank', 'markov_head_type', 'enable_confidence_head', 'confidence_head_with_markov'];

/** `model_type: k3_dspark` (Inferact): one flat object. */
export const K3_DSPARK_FIELDS = new Set([
  ...GENERIC, ...CHECKED, ...ROPE, ...HEADS,
  'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'q_lora_rank', 'kv_lora_rank',
  'qk_nope_head_dim', 'qk_rope_head_dim', 'v_head_dim', 'mla_use_nope', 'mla_use_output_gate', 'vocab_size', 'draft_vocab_size',
  'rms_norm_eps', 'num_target_layers', 'target_hidden_size', 'target_num_hidden_layers', 'target_layer_ids', 'fc_norm',
  'aux_hidden_stream', 'mask_token_id', 'block_size', 'sample_from_anchor', 'block_causal',
]);

/** The Qwen3 decoder fields of a DFlash-style drafter (top level) or a speculators one (transformer_layer_config). */
const QWEN3 = [
  ...CHECKED, ...ROPE,
  'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'head_dim', 'vocab_size',
  'rms_norm_eps', 'sliding_window', 'use_sliding_window', 'max_window_layers', 'layer_types',
];

/** SpecForge / SGLang DFlash-style (RadixArk): the Qwen3 fields, the DFlash block and the DSpark heads. */
export const DFLASH_FIELDS = new Set([
  ...GENERIC, ...QWEN3, ...HEADS,
  'draft_vocab_size', 'block_size', 'num_target_layers', 'target_hidden_size', 'dflash_config', 'dspark_config', 'fc_norm',
  'aux_hidden_stream', 'mask_token_id', 'sample_from_anchor', 'block_causal',
]);

/** `dflash_config` / `dspark_config` sub-objects. */
export const DFLASH_SUB_FIELDS = new Set([
  'target_layer_ids', 'mask_token_id', 'block_size', 'num_target_layers', 'aux_hidden_stream', 'fc_norm', 'sample_from_anchor',
  'block_causal', ...HEADS,
]);

/** Speculators (RedHatAI): top level. The training-only loss weights and anchor count change nothing at inference. */
export const SPECULATORS_FIELDS = new Set([
  ...GENERIC, ...HEADS,
  'speculators_model_type', 'speculators_version', 'speculators_config', 'transformer_layer_config', 'draft_vocab_size', 'block_size',
  'target_hidden_size', 'aux_hidden_state_layer_ids', 'mask_token_id', 'sample_from_anchor', 'aux_hidden_stream', 'block_causal',
  'has_no_defaults_at_init', 'num_anchors', 'ce_loss_alpha', 'l1_loss_alpha', 'confidence_head_alpha', 'loss_decay_gamma',
]);

/** Speculators `transformer_layer_config`. */
export const SPECULATORS_LAYER_FIELDS = new Set([...GENERIC, ...QWEN3]);

/** Refuse the first field of `obj` that `known` does not hold. */
export function refuseUnknown(file: string, obj: Json, path: string, known: ReadonlySet<string>, what: string): void {
  for (const k of Object.keys(obj)) {
    if (!known.has(k)) throw new UserError(`${file}: unknown field ${path}${k} in a ${what} drafter config (docs/DSPARK.md lists the fields read)`);
  }
}
