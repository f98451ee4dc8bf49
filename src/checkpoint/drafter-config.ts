// A DSpark drafter's config.json -> one typed DrafterConfig (docs/DSPARK.md). The three formats
// spell the same things differently; their quirks live here and nowhere else:
//   - k3_dspark: `num_target_layers` is the tap count, `target_num_hidden_layers` the target's depth;
//   - dflash: `num_target_layers` is the target's depth, the taps and mask token sit in `dflash_config`,
//     the Markov fields may sit in `dspark_config`, `dflash_config` or the top level (they must agree);
//   - speculators: the decoder sits in `transformer_layer_config`, and `aux_hidden_state_layer_ids`
//     index transformers' hidden_states tuple (0 = the embeddings), so tap = id - 1.
// Every field is checked; a field the loader does not know is refused (drafter-fields.ts).

import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import { LIMITS, Reader, readJsonObject, type Json } from './config-reader.js';
import type { DrafterConfig, DrafterFormat, DrafterGqa, DrafterRope } from './drafter-types.js';
import { DFLASH_FIELDS, DFLASH_SUB_FIELDS, K3_DSPARK_FIELDS, refuseUnknown, SPECULATORS_FIELDS, SPECULATORS_LAYER_FIELDS } from './drafter-fields.js';

/** Read a drafter's `config.json` (a directory, or the file itself). */
export function loadDrafterConfig(dirOrFile: string): DrafterConfig {
  const file = dirOrFile.endsWith('.json') ? dirOrFile : path.join(dirOrFile, 'config.json');
  return parseDrafterConfig(readJsonObject(file), file);
}

export function drafterFormat(top: Json, file: string): DrafterFormat {
  if (top.model_type === 'k3_dspark') return 'k3_dspark';
  if (top.speculators_model_type !== undefined) {
    if (top.speculators_model_type !== 'dspark') throw new UserError(`${file}: speculators_model_type ${JSON.stringify(top.speculators_model_type)} is not a DSpark drafter (only "dspark")`);
    return 'speculators';
  }
  if (top.dflash_config !== undefined) return 'dflash';
  throw new UserError(`${file}: not a DSpark drafter config: model_type ${JSON.stringify(top.model_type ?? null)}, no speculators_model_type, no dflash_config`);
}

export function parseDrafterConfig(top: Json, file: string): DrafterConfig {
  const format = drafterFormat(top, file);
  const d = format === 'k3_dspark' ? readK3Dspark(top, file) : format === 'dflash' ? readDflash(top, file) : readSpeculators(top, file);
  return finish(d, new Reader(file, [{ obj: top, path: '' }]));
}

/** Inferact's format: dense MLA layers with RoPE (YaRN), no output gate; K3's embedding and lm_head. */
function readK3Dspark(top: Json, file: string): DrafterConfig {
  refuseUnknown(file, top, '', K3_DSPARK_FIELDS, 'k3_dspark');
  const r = new Reader(file, [{ obj: top, path: '' }]);
  checkCommon(r);
  const hiddenSize = r.pos('hidden_size');
  const heads = r.pos('num_attention_heads');
  if (r.has('num_key_value_heads') && r.pos('num_key_value_heads') !== heads) r.fail(`field num_key_value_heads = ${r.int('num_key_value_heads')} must equal num_attention_heads = ${heads} (MLA)`);
  if (r.bool(false, 'mla_use_nope')) r.fail('field mla_use_nope = true: the drafter\'s MLA is RoPE MLA (K3\'s NoPE MLA is the target\'s, not the drafter\'s)');
  if (r.bool(false, 'mla_use_output_gate')) r.fail('field mla_use_output_gate = true: the drafter\'s MLA has no output gate and its checkpoint ships no gate weights');
  const taps = needList(r, 'target_layer_ids');
  if (r.has('num_target_layers') && r.int('num_target_layers') !== taps.length) r.fail(`field num_target_layers = ${r.int('num_target_layers')} but target_layer_ids has ${taps.length} entries`);
  const numLayers = r.pos('num_hidden_layers');
  return {
    file, format: 'k3_dspark', hiddenSize, numLayers,
    intermediateSize: r.pos('intermediate_size'),
    vocabSize: r.pos('vocab_size'),
    draftVocabSize: r.optInt(r.pos('vocab_size'), 'draft_vocab_size'),
    rmsNormEps: r.num('rms_norm_eps'),
    attn: { kind: 'mla', heads, qLoraRank: r.pos('q_lora_rank'), kvLoraRank: r.pos('kv_lora_rank'), nopeDim: r.pos('qk_nope_head_dim'), ropeDim: r.pos('qk_rope_head_dim'), vDim: r.pos('v_head_dim') },
    rope: readRope(r, file),
    maxPositions: r.pos('max_position_embeddings'),
    taps,
    targetHiddenSize: r.optInt(hiddenSize, 'target_hidden_size'),
    targetLayers: r.has('target_num_hidden_layers') ? r.pos('target_num_hidden_layers') : null,
    ...readBlock(r),
    embedding: 'target', lmHead: 'target', redundantEmbedding: true,
  };
}

/** The block, its slots and heads, and the tapped stream, spelled alike by k3_dspark and DFlash. */
function readBlock(r: Reader): Pick<DrafterConfig, 'stream' | 'tapNorm' | 'block' | 'slots' | 'blockAttention' | 'maskTokenId' | 'markov' | 'confidence'> {
  return {
    stream: readStream(r),
    tapNorm: r.bool(false, 'fc_norm'),
    block: r.pos('block_size'),
    slots: r.bool(true, 'sample_from_anchor') ? 'next' : 'same',
    blockAttention: r.bool(false, 'block_causal') ? 'causal' : 'bidirectional',
    maskTokenId: r.int('mask_token_id'),
    markov: readMarkov(r),
    confidence: readConfidence(r, true, true),
  };
}

/** SpecForge / SGLang (RadixArk): Qwen3-style GQA layers; block, taps and mask token in dflash_config. */
function readDflash(top: Json, file: string): DrafterConfig {
  refuseUnknown(file, top, '', DFLASH_FIELDS, 'DFlash-style');
  const subs: { obj: Json; path: string }[] = [];
  for (const key of ['dspark_config', 'dflash_config']) {
    const v = top[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'object' || Array.isArray(v)) throw new UserError(`${file}: field ${key} must be an object`);
    refuseUnknown(file, v as Json, `${key}.`, DFLASH_SUB_FIELDS, 'DFlash-style');
    subs.push({ obj: v as Json, path: `${key}.` });
  }
  agree(file, [...subs, { obj: top, path: '' }]);
  const r = new Reader(file, [...subs, { obj: top, path: '' }]);
  const t = new Reader(file, [{ obj: top, path: '' }]);
  if (top.model_type !== undefined && top.model_type !== 'qwen3') t.fail(`model_type ${JSON.stringify(top.model_type)} is not a DFlash-style DSpark drafter (only "qwen3" layers)`);
  const layer = readQwen3(t, file);
  return {
    file, format: 'dflash', ...layer,
    draftVocabSize: t.optInt(layer.vocabSize, 'draft_vocab_size'),
    taps: needList(r, 'target_layer_ids'),
    targetHiddenSize: t.optInt(layer.hiddenSize, 'target_hidden_size'),
    targetLayers: r.has('num_target_layers') ? r.pos('num_target_layers') : null,
    // SGLang, which these checkpoints are trained for, builds the confidence head when the field is absent
    ...readBlock(r),
    embedding: 'target', lmHead: 'target', redundantEmbedding: false,
  };
}

/** vLLM speculators (RedHatAI): the decoder in transformer_layer_config; ships its own embedding and lm_head. */
function readSpeculators(top: Json, file: string): DrafterConfig {
  refuseUnknown(file, top, '', SPECULATORS_FIELDS, 'speculators');
  const r = new Reader(file, [{ obj: top, path: '' }]);
  const sc = r.obj('speculators_config');
  if (sc && sc.algorithm !== undefined && sc.algorithm !== 'dspark') r.fail(`speculators_config.algorithm ${JSON.stringify(sc.algorithm)} is not "dspark"`);
  const tlc = r.obj('transformer_layer_config');
  if (!tlc) return r.fail('missing required field transformer_layer_config');
  refuseUnknown(file, tlc, 'transformer_layer_config.', SPECULATORS_LAYER_FIELDS, 'speculators');
  const t = new Reader(file, [{ obj: tlc, path: 'transformer_layer_config.' }]);
  if (tlc.model_type !== undefined && tlc.model_type !== 'qwen3') t.fail(`transformer_layer_config.model_type ${JSON.stringify(tlc.model_type)} is not supported (only "qwen3" layers)`);
  const layer = readQwen3(t, file, 'transformer_layer_config.');
  const ids = needList(r, 'aux_hidden_state_layer_ids');
  if (ids.some((x) => x < 1)) r.fail(`field aux_hidden_state_layer_ids holds ${Math.min(...ids)}: these index hidden_states (0 = the embeddings), so every tap is at least 1`);
  return {
    file, format: 'speculators', ...layer,
    draftVocabSize: r.optInt(layer.vocabSize, 'draft_vocab_size'),
    taps: ids.map((x) => x - 1),
    stream: readStream(r),
    tapNorm: false,
    targetHiddenSize: r.optInt(layer.hiddenSize, 'target_hidden_size'),
    targetLayers: null,
    block: r.optInt(8, 'block_size'),
    slots: r.bool(true, 'sample_from_anchor') ? 'next' : 'same',
    // the one public port of this drafter attends causally inside the block
    blockAttention: r.bool(true, 'block_causal') ? 'causal' : 'bidirectional',
    maskTokenId: r.int('mask_token_id'),
    markov: readMarkov(r),
    confidence: readConfidence(r, false, false),
    embedding: 'own', lmHead: 'own', redundantEmbedding: false,
  };
}

type Qwen3Part = Pick<DrafterConfig, 'hiddenSize' | 'intermediateSize' | 'numLayers' | 'vocabSize' | 'rmsNormEps' | 'attn' | 'rope' | 'maxPositions'>;

function readQwen3(t: Reader, file: string, pre = ''): Qwen3Part {
  checkCommon(t, pre);
  const hiddenSize = t.pos('hidden_size');
  const heads = t.pos('num_attention_heads');
  const kvHeads = t.pos('num_key_value_heads');
  if (heads % kvHeads !== 0) t.fail(`field ${pre}num_attention_heads = ${heads} is not a multiple of ${pre}num_key_value_heads = ${kvHeads}`);
  const headDim = t.has('head_dim') ? t.pos('head_dim') : hiddenSize / heads;
  if (!Number.isInteger(headDim)) t.fail(`field ${pre}head_dim is missing and ${pre}hidden_size ${hiddenSize} is not a multiple of ${pre}num_attention_heads ${heads}`);
  const numLayers = t.pos('num_hidden_layers');
  const attn: DrafterGqa = { kind: 'gqa', heads, kvHeads, headDim, ...readLayerKinds(t, numLayers, pre) };
  return { hiddenSize, numLayers, intermediateSize: t.pos('intermediate_size'), vocabSize: t.pos('vocab_size'), rmsNormEps: t.num('rms_norm_eps'), attn, rope: readRope(t, file, pre), maxPositions: t.pos('max_position_embeddings') };
}

/** Full or sliding attention per layer: `layer_types` when given; a sliding window with no list is refused (which layers slide is not guessed). */
function readLayerKinds(t: Reader, numLayers: number, pre: string): Pick<DrafterGqa, 'layerKinds' | 'slidingWindow'> {
  const list = t.strList('layer_types');
  const window = t.has('sliding_window') ? t.pos('sliding_window') : null;
  if (!list) {
    if (t.bool(false, 'use_sliding_window')) t.fail(`field ${pre}use_sliding_window = true needs ${pre}layer_types to say which layers slide`);
    return { layerKinds: new Array(numLayers).fill('full'), slidingWindow: null };
  }
  if (list.length !== numLayers) t.fail(`field ${pre}layer_types has ${list.length} entries for ${numLayers} layers`);
  const layerKinds = list.map((s) => {
    if (s === 'full_attention') return 'full' as const;
    if (s === 'sliding_attention') return 'sliding' as const;
    return t.fail(`field ${pre}layer_types holds ${JSON.stringify(s)} (only "full_attention" or "sliding_attention")`);
  });
  if (layerKinds.includes('sliding') && window === null) t.fail(`${pre}layer_types lists sliding_attention layers but ${pre}sliding_window is missing`);
  return { layerKinds, slidingWindow: layerKinds.includes('sliding') ? window : null };
}

/** RoPE: `rope_parameters` (newer transformers) or `rope_scaling`, never both; YaRN or plain. */
function readRope(r: Reader, file: string, pre = ''): DrafterRope {
  if (r.has('rope_parameters') && r.has('rope_scaling')) r.fail(`fields ${pre}rope_parameters and ${pre}rope_scaling are both set; only one may say how positions rotate`);
  const key = `${pre}${r.has('rope_parameters') ? 'rope_parameters' : 'rope_scaling'}`;
  const params = r.obj(key.slice(pre.length));
  const pr = new Reader(file, [{ obj: params ?? {}, path: `${key}.` }]);
  const theta = params && pr.has('rope_theta') ? pr.num('rope_theta') : r.num('rope_theta');
  r.range(`${pre}rope_theta`, theta, 0, 1e12, true);
  const type = params ? (params.rope_type ?? params.type ?? 'default') : 'default';
  if (type === 'default') return { theta, yarn: null };
  if (type !== 'yarn' && type !== 'deepseek_yarn') r.fail(`${key}.rope_type ${JSON.stringify(type)} is not supported (only "default", "yarn", "deepseek_yarn")`);
  const yarn = {
    factor: pr.range(`${key}.factor`, pr.num('factor'), 0, 1e4, true),
    originalMaxPosition: pr.range(`${key}.original_max_position_embeddings`, pr.pos('original_max_position_embeddings'), 1, LIMITS.positions),
    betaFast: pr.range(`${key}.beta_fast`, pr.optNum(32, 'beta_fast')!, 0, 1e4, true),
    betaSlow: pr.range(`${key}.beta_slow`, pr.optNum(1, 'beta_slow')!, 0, 1e4, true),
    mscale: pr.range(`${key}.mscale`, pr.optNum(1, 'mscale')!, 0, 100),
    mscaleAllDim: pr.range(`${key}.mscale_all_dim`, pr.optNum(0, 'mscale_all_dim')!, 0, 100),
  };
  if (yarn.betaFast < yarn.betaSlow) r.fail(`field ${key}.beta_fast = ${yarn.betaFast} must be at least ${key}.beta_slow = ${yarn.betaSlow}`);
  return { theta, yarn };
}

/** The fields every format checks for their one supported value. */
function checkCommon(r: Reader, pre = ''): void {
  const act = r.str('silu', 'hidden_act');
  if (act !== 'silu') r.fail(`field ${pre}hidden_act ${JSON.stringify(act)} is not supported (only "silu")`);
  if (r.bool(false, 'tie_word_embeddings')) r.fail(`field ${pre}tie_word_embeddings = true is not a DSpark drafter`);
  if (r.bool(false, 'attention_bias')) r.fail(`field ${pre}attention_bias = true: DSpark drafters' projections have no bias`);
}

function needList(r: Reader, name: string): number[] {
  const v = r.intList(name);
  if (!v) r.fail(`missing required field ${name}`);
  if (v.length === 0) r.fail(`field ${name} is empty`);
  return v;
}

function readStream(r: Reader): DrafterConfig['stream'] {
  const s = r.str('prefix', 'aux_hidden_stream');
  if (s !== 'prefix' && s !== 'attn_res') r.fail(`field aux_hidden_stream ${JSON.stringify(s)} is not supported (only "prefix" or "attn_res")`);
  return s;
}

function readMarkov(r: Reader): DrafterConfig['markov'] {
  if (!r.has('markov_rank')) r.fail('missing required field markov_rank (a DSpark drafter drafts its block left to right through the Markov head)');
  const rank = r.int('markov_rank');
  if (rank === 0) r.fail('field markov_rank = 0: a DSpark drafter needs its Markov head');
  const type = r.str('vanilla', 'markov_head_type');
  if (type !== 'vanilla') r.fail(`field markov_head_type ${JSON.stringify(type)} is not supported (only "vanilla")`);
  return { kind: 'vanilla', rank: r.range('markov_rank', rank, 1, LIMITS.rank) };
}

function readConfidence(r: Reader, enabledDefault: boolean, withMarkovDefault: boolean): DrafterConfig['confidence'] {
  if (!r.bool(enabledDefault, 'enable_confidence_head')) return null;
  return { withMarkov: r.bool(withMarkovDefault, 'confidence_head_with_markov') };
}

/** A field given in more than one of `objs` (dspark_config, dflash_config, the top level) must say the same thing everywhere. */
function agree(file: string, objs: { obj: Json; path: string }[]): void {
  const seen = new Map<string, { v: string; where: string }>();
  for (const { obj, path: p } of objs) {
    for (const [k, v] of Object.entries(obj)) {
      if (!DFLASH_SUB_FIELDS.has(k) || v === null || v === undefined) continue;
      const s = JSON.stringify(v);
      const prev = seen.get(k);
      if (prev && prev.v !== s) throw new UserError(`${file}: field ${p}${k} = ${s} disagrees with ${prev.where} = ${prev.v}`);
      if (!prev) seen.set(k, { v: s, where: p + k });
    }
  }
}

/** Checks that need the whole config: the taps, the block, the sizes. */
function finish(d: DrafterConfig, r: Reader): DrafterConfig {
  const f = d.file;
  const fail = (m: string): never => {
    throw new UserError(`${f}: ${m}`);
  };
  r.range('num_hidden_layers', d.numLayers, 1, LIMITS.layers);
  r.range('hidden_size', d.hiddenSize, 1, LIMITS.hidden);
  r.range('vocab_size', d.vocabSize, 1, LIMITS.vocab);
  r.range('intermediate_size', d.intermediateSize, 1, LIMITS.intermediate);
  r.range('rms_norm_eps', d.rmsNormEps, 0, 0.1, true);
  r.range('block_size', d.block, 1, 64);
  if (d.draftVocabSize !== d.vocabSize) fail(`field draft_vocab_size = ${d.draftVocabSize} differs from vocab_size = ${d.vocabSize}: pruned draft vocabularies (d2t maps) are not supported`);
  if (d.maskTokenId >= d.vocabSize) fail(`field mask_token_id = ${d.maskTokenId} is outside the vocabulary (${d.vocabSize})`);
  const taps = d.taps;
  for (let i = 0; i < taps.length; i++) {
    if (taps[i]! < 0) fail(`tap ${taps[i]} is negative`);
    if (i > 0 && taps[i]! <= taps[i - 1]!) fail(`taps must be distinct and ascending (the concatenation order is positional): ${JSON.stringify(taps)}`);
  }
  if (d.targetLayers !== null && taps[taps.length - 1]! >= d.targetLayers) fail(`tap ${taps[taps.length - 1]} is past the ${d.targetLayers}-layer target the drafter was trained against`);
  if (d.attn.kind === 'mla' && d.attn.ropeDim % 2 !== 0) fail(`field qk_rope_head_dim = ${d.attn.ropeDim} must be even`);
  if (d.attn.kind === 'gqa' && d.attn.headDim % 2 !== 0) fail(`field head_dim = ${d.attn.headDim} must be even`);
  return d;
}
