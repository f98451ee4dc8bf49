// What a checkpoint holds: parameter counts and bytes by dtype, and the layer map. Pure functions
// of the config and the tensor index. (What a sequence costs is model/state.ts stateSize: the
// code that allocates the state says how big it is.)

import type { ModelConfig } from './config.js';
import { namesOf } from './names.js';
import type { TensorEntry } from './safetensors.js';

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
  const names = namesOf(cfg);
  for (const e of entries.values()) {
    if (!names.isDecoder(e.name)) {
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
    if (names.isExpert(e.name)) c.expertBytes += e.nbytes;
  }
  return c;
}

/** "KDA+dense", "MLA+MoE", ... per 0-based layer. */
export function layerMap(cfg: ModelConfig): string[] {
  return cfg.layers.map((L) => `${L.attn.toUpperCase()}+${L.ffn === 'dense' ? 'dense' : 'MoE'}`);
}
