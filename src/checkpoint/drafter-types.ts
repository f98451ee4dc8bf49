// The typed description of a DSpark drafter checkpoint (docs/DSPARK.md), built by
// drafter-config.ts from the drafter's own config.json. Every field the drafter's forward pass,
// its taps on the target and its block layout depend on is here, read from the config and
// nowhere else.

/** The three config formats the published K3 drafters use (docs/DSPARK.md §1). */
export type DrafterFormat =
  /** `model_type: k3_dspark` (Inferact/Kimi-K3-DSpark, Inferact/Kimi-K3-DSpark-Block5): dense MLA layers. */
  | 'k3_dspark'
  /** SpecForge / SGLang DFlash-style config with DSpark heads (RadixArk/Kimi-K3-DSpark): Qwen3-style GQA layers. */
  | 'dflash'
  /** vLLM speculators format, `speculators_model_type: dspark` (RedHatAI/Kimi-K3-speculator.dspark). */
  | 'speculators';

export interface DrafterRope {
  theta: number;
  /** DeepSeek YaRN scaling, or null for plain RoPE. */
  yarn: { factor: number; originalMaxPosition: number; betaFast: number; betaSlow: number; mscale: number; mscaleAllDim: number } | null;
}

/** DeepSeek-V3-style MLA with RoPE on the rope slice and no output gate (unlike K3's gated NoPE MLA). */
export interface DrafterMla {
  kind: 'mla';
  heads: number;
  qLoraRank: number;
  kvLoraRank: number;
  nopeDim: number;
  ropeDim: number;
  vDim: number;
}

/** Qwen3-style grouped-query attention with per-head q/k RMSNorm. */
export interface DrafterGqa {
  kind: 'gqa';
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Per draft layer: a sliding window of `slidingWindow` positions, or full attention. */
  layerKinds: ('full' | 'sliding')[];
  slidingWindow: number | null;
}

export interface DrafterConfig {
  file: string;
  format: DrafterFormat;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  /** Input vocabulary (Markov head rows, embedding rows). */
  vocabSize: number;
  /** Output vocabulary of the draft logits: equal to vocabSize (pruned vocabularies are refused). */
  draftVocabSize: number;
  rmsNormEps: number;
  attn: DrafterMla | DrafterGqa;
  rope: DrafterRope;
  maxPositions: number;
  /** 0-based target layers whose output the drafter reads, in concatenation order. */
  taps: number[];
  /** Which stream "the state after layer l" is: K3's running AttnRes prefix sum, or the mixture the next layer reads. */
  stream: 'prefix' | 'attn_res';
  /** Per-tap RMSNorm before the concatenation (`fc_norm`). */
  tapNorm: boolean;
  targetHiddenSize: number;
  /** The target's layer count the drafter was trained against, when the config says. */
  targetLayers: number | null;
  /** Tokens proposed per sweep. */
  block: number;
  /**
   * Which query slot proposes which position (docs/DSPARK.md §3): 'next' (DeepSpec: the block is
   * the anchor and block-1 mask tokens, slot k proposes anchor+k+1) or 'same' (speculators with
   * sample_from_anchor false: the anchor and `block` mask tokens, slot j >= 1 proposes anchor+j,
   * slot 0 proposes nothing).
   */
  slots: 'next' | 'same';
  /** Attention inside the query block: every slot sees the whole block, or only the slots before it. */
  blockAttention: 'bidirectional' | 'causal';
  maskTokenId: number;
  markov: { kind: 'vanilla'; rank: number };
  /** Per-position acceptance estimate, sigmoid(proj([h, markov_w1[prev]])) or sigmoid(proj(h)); null when absent. */
  confidence: { withMarkov: boolean } | null;
  /** Where the input embedding comes from: K3's own table, or the drafter's. */
  embedding: 'target' | 'own';
  /** Where the output head comes from: K3's lm_head, or the drafter's. */
  lmHead: 'target' | 'own';
  /** The file carries a copy of K3's embedding that is never read (Inferact's checkpoints). */
  redundantEmbedding: boolean;
}

/** How a drafter's tensor is used: read by the forward pass, or present in the file and never read. */
export type DrafterTensorUse = 'read' | 'never_read';

export interface DrafterTensorSpec {
  name: string;
  dtype: 'BF16';
  shape: number[];
  use: DrafterTensorUse;
}
