// What a checkpoint holds and what a sequence costs: parameter counts and bytes by dtype, the
// layer map, and state sizes. Pure functions of the config and the tensor index.

import type { ModelConfig } from '../checkpoint/config.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';

export interface Census {
  /** Tensors of the text decoder (vision tower and projector excluded). */
  tensors: number;
  params: number;
  bytes: number;
  byDtype: Record<string, { tensors: number; params: number; bytes: number }>;
  expertBytes: number;
  skippedTensors: number;
}

/** Logical parameter count of a tensor: packed 4-bit tensors hold 2 (U8) or 8 (I32) per element; scales count as 0. */
function logicalParams(e: TensorEntry): number {
  const n = e.shape.reduce((a, b) => a * b, 1);
  if (e.name.endsWith('.weight_packed')) return e.dtype === 'U8' ? n * 2 : n * 8;
  if (/\.weight_(scale|scale_inv|shape)$/.test(e.name)) return 0;
  return n;
}

export function census(cfg: ModelConfig, entries: Map<string, TensorEntry>): Census {
  const c: Census = { tensors: 0, params: 0, bytes: 0, byDtype: {}, expertBytes: 0, skippedTensors: 0 };
  for (const e of entries.values()) {
    if (!e.name.startsWith(cfg.prefix) || e.name.includes('vision_tower') || e.name.includes('mm_projector')) {
      c.skippedTensors++;
      continue;
    }
    const p = logicalParams(e);
    c.tensors++;
    c.params += p;
    c.bytes += e.nbytes;
    const d = (c.byDtype[e.dtype] ??= { tensors: 0, params: 0, bytes: 0 });
    d.tensors++;
    d.params += p;
    d.bytes += e.nbytes;
    if (/\.experts\.\d+\./.test(e.name)) c.expertBytes += e.nbytes;
  }
  return c;
}

export interface StateSize {
  /** KDA recurrent state + conv tails, f32, independent of context. */
  perSequenceBytes: number;
  /** MLA latent + rope key per position over all MLA layers, f32. */
  perPositionBytes: number;
}

export function stateSize(cfg: ModelConfig): StateSize {
  let perSequence = 0;
  let perPosition = 0;
  for (const L of cfg.layers) {
    if (L.attn === 'kda') {
      const k = cfg.kda!;
      const P = k.heads * k.headDim;
      perSequence += (k.heads * k.headDim * k.headDim + 3 * (k.convSize - 1) * P) * 4;
    } else {
      perPosition += (cfg.mla.kvLoraRank + cfg.mla.ropeDim) * 4;
    }
  }
  return { perSequenceBytes: perSequence, perPositionBytes: perPosition };
}

/** "KDA+dense", "MLA+MoE", ... per 0-based layer. */
export function layerMap(cfg: ModelConfig): string[] {
  return cfg.layers.map((L) => `${L.attn.toUpperCase()}+${L.ffn === 'dense' ? 'dense' : 'MoE'}`);
}
