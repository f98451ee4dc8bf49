// The typed model description every layer above the checkpoint reads (built by config.ts from
// config.json). Field comments say which architecture a field belongs to.

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
