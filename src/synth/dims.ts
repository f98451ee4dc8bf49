// Model sizes for synthetic checkpoints: the presets, the option type, and their resolution into
// one validated description (`ResolvedSynth`) that fully determines the written bytes.

import type { MlaConfig } from '../checkpoint/config-types.js';
import { UserError } from '../util/errors.js';

/** `k25`: Kimi K2.5, K2's decoder (INT4 experts by default) under `language_model.` with vision stubs. */
export type SynthArch = 'k3' | 'kimi_linear' | 'k2' | 'k25';
/**
 * How routed experts are stored:
 * - `mxfp4` (K3 only, K3's default): `experts.{e}.w{1,2,3}.weight_packed` U8 + `.weight_scale` U8 (E8M0).
 * - `bf16` (every arch, default for Kimi Linear and K2): plain `.weight` BF16.
 * - `int4` (K2 and K2.5; K2.5's default): compressed-tensors pack-quantized, as K2-Thinking (`weight_packed` I32,
 *   `weight_scale` BF16, `weight_shape` I32).
 * - `fp8` (K2 only): DeepSeek-V3 FP8 block quantization of EVERY decoder-layer linear weight except
 *   the router (F8_E4M3 + F32 `weight_scale_inv`), not only the experts.
 */
export type ExpertsFormat = 'mxfp4' | 'bf16' | 'int4' | 'fp8';
/**
 * - `tiny`: the dims of the matching golden checkpoint (shared/golden/{k3,kimi-linear,k2-*}).
 * - `demo` (K3): a slightly larger K3 for `k3 demo --random` (docs/DEMO-MODEL.md; a few MB).
 * - `k3-medium` (K3): hidden 2048, 64 experts of 768, vocab 32768 (about 1.5 GB).
 * - `k3-real-layers` (K3): the real K3's layer and expert sizes (17,547,264 B MXFP4 experts) with
 *   few layers / experts (default 4 layers, 32 experts) and the real 163840 vocabulary (about 12 GB).
 */
export type SynthPreset = 'tiny' | 'demo' | 'k3-medium' | 'k3-real-layers';

export const ARCHS: readonly SynthArch[] = ['k3', 'kimi_linear', 'k2', 'k25'];

/** K2 and K2.5 share the decoder (DeepSeek-V3 layout, every layer MLA). */
export function isK2Like(arch: SynthArch): boolean {
  return arch === 'k2' || arch === 'k25';
}
export const EXPERTS_FORMATS: readonly ExpertsFormat[] = ['mxfp4', 'bf16', 'int4', 'fp8'];
export const PRESETS: readonly SynthPreset[] = ['tiny', 'demo', 'k3-medium', 'k3-real-layers'];

/** Every size of a synthetic model. Fields that an arch does not have are ignored there (see notes).
 *  The MLA sizes are the config's (heads, q LoRA rank or null for a plain q_proj, kv LoRA rank, head dims). */
export interface SynthDims extends Pick<MlaConfig, 'heads' | 'qLoraRank' | 'kvLoraRank' | 'nopeDim' | 'ropeDim' | 'vDim'> {
  vocab: number;
  hidden: number;
  layers: number;
  /** 1-based MLA layers (K3, Kimi Linear; K2 is all MLA). Default: every 4th layer plus the last. */
  mlaLayers: number[];
  /** `first_k_dense_replace`: layers below it use the dense MLP. */
  firstDense: number;
  /** Dense MLP width. */
  intermediate: number;
  /** KDA heads / head dim / short-conv taps (K3, Kimi Linear). */
  kdaHeads: number;
  kdaHeadDim: number;
  convSize: number;
  /** Routed experts, experts per token, shared experts (stored fused: width shared x moeIntermediate). */
  experts: number;
  topK: number;
  sharedExperts: number;
  moeIntermediate: number;
  /** K3 latent MoE width (`routed_expert_hidden_size`); null for the other archs. */
  latent: number | null;
  /** Expert groups for grouped top-k routing (`n_group` / `num_expert_group`) and groups kept. */
  groups: number;
  topkGroup: number;
  /** K3 Attention Residuals block size; null for the other archs. */
  attnResBlock: number | null;
}

export interface SynthOptions extends Partial<SynthDims> {
  arch: SynthArch;
  /** Output directory; written as `<out>.tmp-<pid>` and renamed when complete. */
  out: string;
  /** Default `tiny`. `demo`, `k3-medium`, `k3-real-layers` are K3 only. */
  preset?: SynthPreset;
  /** Default `mxfp4` for K3, `bf16` otherwise. */
  expertsFormat?: ExpertsFormat;
  /**
   * Number of safetensors files. 1 writes `model.safetensors` without an index. K3 puts the layers
   * in the first N-1 shards and embed / lm_head / norms / vision stubs in the last; Kimi Linear and
   * K2 split [embed, layers..., norm + lm_head] into N runs. Layers are never split.
   * Default: K3 tiny/demo 2, K3 k3-medium / k3-real-layers layers+1, K2 int4 3, otherwise 1.
   */
  shards?: number;
  /** Weight seed (default 1): same options, same bytes. */
  seed?: number;
  /** Replace an existing `<out>` that holds a checkpoint written with other options. */
  force?: boolean;
  /** More files to write into the directory (e.g. tokenizer files), name -> contents. */
  extraFiles?: Record<string, string | Uint8Array>;
  /** Progress callback: bytes written so far and the total. */
  onProgress?: (done: number, total: number) => void;
  /** An abort (the CLI's SIGINT / SIGTERM) stops the write; nothing is left behind. */
  signal?: AbortSignal;
}

/** Everything that determines the checkpoint's bytes (stored in synth.json). */
export interface ResolvedSynth {
  arch: SynthArch;
  preset: SynthPreset;
  expertsFormat: ExpertsFormat;
  shards: number;
  seed: number;
  dims: SynthDims;
}

/** 1-based MLA layers: every 4th, plus the last layer (K3: 4, 8, ..., 92, 93). */
export function defaultMlaLayers(layers: number): number[] {
  const out: number[] = [];
  for (let l = 1; l <= layers; l++) if (l % 4 === 0 || (l === layers && layers > 1)) out.push(l);
  return out;
}

const K3_TINY: SynthDims = {
  vocab: 512, hidden: 128, layers: 9, mlaLayers: [4, 8, 9], firstDense: 1, intermediate: 256,
  heads: 4, qLoraRank: 96, kvLoraRank: 64, nopeDim: 32, ropeDim: 16, vDim: 32,
  kdaHeads: 4, kdaHeadDim: 128, convSize: 4,
  experts: 16, topK: 4, sharedExperts: 2, moeIntermediate: 64, latent: 64, groups: 1, topkGroup: 1, attnResBlock: 3,
};

const K3_DEMO: SynthDims = {
  vocab: 512, hidden: 256, layers: 9, mlaLayers: [4, 8, 9], firstDense: 1, intermediate: 512,
  heads: 4, qLoraRank: 128, kvLoraRank: 64, nopeDim: 32, ropeDim: 16, vDim: 64,
  kdaHeads: 4, kdaHeadDim: 64, convSize: 4,
  experts: 16, topK: 4, sharedExperts: 2, moeIntermediate: 128, latent: 128, groups: 1, topkGroup: 1, attnResBlock: 3,
};

const K3_MEDIUM: SynthDims = {
  vocab: 32768, hidden: 2048, layers: 9, mlaLayers: [4, 8, 9], firstDense: 1, intermediate: 8192,
  heads: 16, qLoraRank: 512, kvLoraRank: 256, nopeDim: 128, ropeDim: 64, vDim: 128,
  kdaHeads: 16, kdaHeadDim: 128, convSize: 4,
  experts: 64, topK: 8, sharedExperts: 2, moeIntermediate: 768, latent: 1024, groups: 1, topkGroup: 1, attnResBlock: 3,
};

const K3_REAL_LAYERS: SynthDims = {
  vocab: 163840, hidden: 7168, layers: 4, mlaLayers: [4], firstDense: 1, intermediate: 33792,
  heads: 96, qLoraRank: 1536, kvLoraRank: 512, nopeDim: 128, ropeDim: 64, vDim: 128,
  kdaHeads: 96, kdaHeadDim: 128, convSize: 4,
  experts: 32, topK: 16, sharedExperts: 2, moeIntermediate: 3072, latent: 3584, groups: 1, topkGroup: 1, attnResBlock: 12,
};

const KIMI_LINEAR_TINY: SynthDims = {
  vocab: 512, hidden: 128, layers: 8, mlaLayers: [4, 8], firstDense: 1, intermediate: 256,
  heads: 4, qLoraRank: null, kvLoraRank: 64, nopeDim: 32, ropeDim: 16, vDim: 32,
  kdaHeads: 4, kdaHeadDim: 32, convSize: 4,
  experts: 16, topK: 4, sharedExperts: 1, moeIntermediate: 64, latent: null, groups: 1, topkGroup: 1, attnResBlock: null,
};

const K2_TINY: SynthDims = {
  vocab: 512, hidden: 128, layers: 6, mlaLayers: [], firstDense: 1, intermediate: 256,
  heads: 4, qLoraRank: 96, kvLoraRank: 64, nopeDim: 32, ropeDim: 16, vDim: 32,
  kdaHeads: 0, kdaHeadDim: 0, convSize: 0,
  experts: 16, topK: 4, sharedExperts: 1, moeIntermediate: 64, latent: null, groups: 4, topkGroup: 2, attnResBlock: null,
};

export function presetDims(arch: SynthArch, preset: SynthPreset): SynthDims {
  if (arch !== 'k3' && preset !== 'tiny') throw new UserError(`synth: preset ${preset} is a K3 preset (--arch k3); ${arch} has only tiny`);
  const d = arch === 'kimi_linear' ? KIMI_LINEAR_TINY : isK2Like(arch) ? K2_TINY
    : preset === 'tiny' ? K3_TINY : preset === 'demo' ? K3_DEMO : preset === 'k3-medium' ? K3_MEDIUM : K3_REAL_LAYERS;
  return { ...d, mlaLayers: [...d.mlaLayers] };
}

const DIM_KEYS: readonly (keyof SynthDims)[] = Object.keys(K3_TINY) as (keyof SynthDims)[];
/** Fields with no meaning for an arch (overriding them is an error). */
const NOT_FOR: Record<SynthArch, readonly (keyof SynthDims)[]> = {
  k3: [],
  kimi_linear: ['latent', 'attnResBlock'],
  k2: ['latent', 'attnResBlock', 'mlaLayers', 'kdaHeads', 'kdaHeadDim', 'convSize'],
  k25: ['latent', 'attnResBlock', 'mlaLayers', 'kdaHeads', 'kdaHeadDim', 'convSize'],
};

function bad(msg: string): never {
  throw new UserError(`synth: ${msg}`);
}

/** Validate options and fill in the preset: the description synth.json records. */
export function resolveSynth(opts: Omit<SynthOptions, 'out'>): ResolvedSynth {
  const arch = opts.arch;
  if (!ARCHS.includes(arch)) bad(`--arch must be one of ${ARCHS.join(', ')}, got ${JSON.stringify(arch)}`);
  const preset = opts.preset ?? 'tiny';
  if (!PRESETS.includes(preset)) bad(`--preset must be one of ${PRESETS.join(', ')}, got ${JSON.stringify(preset)}`);
  const fmt = opts.expertsFormat ?? (arch === 'k3' ? 'mxfp4' : arch === 'k25' ? 'int4' : 'bf16');
  if (!EXPERTS_FORMATS.includes(fmt)) bad(`--experts-format must be one of ${EXPERTS_FORMATS.join(', ')}, got ${JSON.stringify(fmt)}`);
  const takes = arch === 'k3' ? 'mxfp4 or bf16' : arch === 'k2' ? 'bf16, int4 or fp8' : arch === 'k25' ? 'int4 or bf16' : 'bf16';
  if (fmt === 'mxfp4' && arch !== 'k3') bad(`--experts-format mxfp4 is K3's format (--arch k3); ${arch} takes ${takes}`);
  if (fmt === 'int4' && !isK2Like(arch)) bad(`--experts-format int4 is a K2 format (--arch k2 or k25); ${arch} takes ${takes}`);
  if (fmt === 'fp8' && arch !== 'k2') bad(`--experts-format fp8 is a K2 format (--arch k2); ${arch} takes ${takes}`);

  const d = presetDims(arch, preset);
  const given = (k: keyof SynthDims) => opts[k] !== undefined;
  for (const k of DIM_KEYS) {
    if (!given(k)) continue;
    if (NOT_FOR[arch].includes(k)) bad(`option ${k} does not apply to arch ${arch}`);
    (d as unknown as Record<string, unknown>)[k] = opts[k];
  }
  // Derived defaults follow the overridden sizes unless given explicitly.
  if (!given('mlaLayers') && given('layers') && !isK2Like(arch)) d.mlaLayers = defaultMlaLayers(d.layers);
  if (!given('topK') && given('experts')) d.topK = Math.min(d.topK, d.experts);
  if (!given('groups') && !given('topkGroup') && d.experts % d.groups !== 0) {
    d.groups = 1;
    d.topkGroup = 1;
  }
  if (!given('firstDense')) d.firstDense = Math.min(d.firstDense, d.layers);

  const posInt = (k: keyof SynthDims, v: unknown) => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) bad(`${k} must be a positive integer, got ${JSON.stringify(v)}`);
  };
  for (const k of ['vocab', 'hidden', 'layers', 'intermediate', 'heads', 'kvLoraRank', 'nopeDim', 'ropeDim', 'vDim', 'experts', 'topK', 'moeIntermediate', 'groups', 'topkGroup'] as const) posInt(k, d[k]);
  if (d.qLoraRank !== null) posInt('qLoraRank', d.qLoraRank);
  if (!Number.isSafeInteger(d.firstDense) || d.firstDense < 0 || d.firstDense > d.layers) bad(`firstDense must be in 0..${d.layers}, got ${d.firstDense}`);
  if (!Number.isSafeInteger(d.sharedExperts) || d.sharedExperts < 0) bad(`sharedExperts must be a non-negative integer, got ${d.sharedExperts}`);
  if (d.topK > d.experts) bad(`topK ${d.topK} exceeds the ${d.experts} experts`);
  if (d.experts % d.groups !== 0) bad(`groups ${d.groups} do not divide the ${d.experts} experts`);
  if (d.topkGroup > d.groups) bad(`topkGroup ${d.topkGroup} exceeds groups ${d.groups}`);
  if (!isK2Like(arch)) {
    for (const k of ['kdaHeads', 'kdaHeadDim', 'convSize'] as const) posInt(k, d[k]);
    if (!Array.isArray(d.mlaLayers) || !d.mlaLayers.every((x) => Number.isSafeInteger(x) && x >= 1 && x <= d.layers)) {
      bad(`mlaLayers must list 1-based layers in 1..${d.layers}, got ${JSON.stringify(d.mlaLayers)}`);
    }
    d.mlaLayers = [...new Set(d.mlaLayers)].sort((a, b) => a - b);
    if (d.mlaLayers.length === d.layers) bad('mlaLayers covers every layer: a K3 / Kimi Linear model needs at least one KDA layer');
  } else {
    d.mlaLayers = [];
    d.kdaHeads = 0;
    d.kdaHeadDim = 0;
    d.convSize = 0;
  }
  if (arch === 'k3') {
    posInt('latent', d.latent);
    posInt('attnResBlock', d.attnResBlock);
    if (d.vocab < 256) bad(`a K3 vocab must be at least 256 (its special tokens sit at vocab-256 ..), got ${d.vocab}`);
  } else {
    d.latent = null;
    d.attnResBlock = null;
  }
  if (fmt === 'mxfp4') {
    if (d.latent! % 32 || d.moeIntermediate % 32) bad(`MXFP4 experts need latent (${d.latent}) and moeIntermediate (${d.moeIntermediate}) to be multiples of 32`);
  }
  if (fmt === 'int4') {
    if (d.hidden % 32 || d.moeIntermediate % 32) bad(`INT4 experts need hidden (${d.hidden}) and moeIntermediate (${d.moeIntermediate}) to be multiples of 32`);
  }

  const seed = opts.seed ?? 1;
  if (!Number.isSafeInteger(seed) || seed < 0) bad(`seed must be a non-negative integer, got ${seed}`);
  const units = arch === 'k3' ? d.layers + 1 : d.layers + 2;
  const shards = opts.shards ?? defaultShards(arch, preset, fmt, d.layers);
  if (!Number.isSafeInteger(shards) || shards < 1) bad(`shards must be a positive integer, got ${shards}`);
  if (shards > units) bad(`${shards} shards is more than this model can fill (at most ${units}: layers are never split)`);

  const dims = {} as Record<string, unknown>;
  for (const k of DIM_KEYS) dims[k] = d[k];
  return { arch, preset, expertsFormat: fmt, shards, seed, dims: dims as unknown as SynthDims };
}

function defaultShards(arch: SynthArch, preset: SynthPreset, fmt: ExpertsFormat, layers: number): number {
  if (arch === 'k3') return preset === 'tiny' || preset === 'demo' ? Math.min(2, layers + 1) : layers + 1;
  if (isK2Like(arch) && fmt === 'int4') return Math.min(3, layers + 2);
  return 1;
}
