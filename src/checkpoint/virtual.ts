// A tensor index made from config.json alone, with the official dtypes (BF16 trunk, F32 small
// vectors, MXFP4 routed experts for K3, INT4 pack-quantized ones where quantization_config
// declares them (K2-Thinking, K2.5), BF16 otherwise), so `k3 plan` can size a model whose
// 1.56 TB of shards are not on this machine. Offsets are laid out back to back in one virtual
// file, experts contiguous per expert as the checkpoints ship them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from './config.js';
import { DTYPE_BYTES, type DType } from '../formats/dtypes.js';
import { namesOf, trunkOrder, type AttnResNames } from './names.js';
import { indexCheckpointDir } from './dir.js';
import { type TensorEntry } from './safetensors.js';

export type VirtualExperts = 'mxfp4' | 'int4' | 'bf16';

/** The experts' format the config-only index assumes: what quantization_config declares, K3's MXFP4 when it says nothing. */
export function assumedExperts(cfg: ModelConfig): VirtualExperts {
  return cfg.declaredExperts ?? (cfg.arch === 'k3' ? 'mxfp4' : 'bf16');
}

export function virtualEntries(cfg: ModelConfig, expertsFormat: VirtualExperts = assumedExperts(cfg), withExperts = true): Map<string, TensorEntry> {
  const map = new Map<string, TensorEntry>();
  let off = 0;
  const add = (name: string, dtype: DType, shape: number[]) => {
    const nbytes = shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
    map.set(name, { name, file: 'config-only', dtype, shape, offset: off, nbytes });
    off += nbytes;
  };
  const n = namesOf(cfg);
  const D = cfg.hiddenSize;
  add(`${n.embed}.weight`, 'BF16', [cfg.vocabSize, D]);
  for (const m of trunkOrder(cfg)) add(`${m.base}.weight`, 'BF16', [m.rows, m.cols]);
  const width = cfg.moe.latentDim ?? D;
  const I = cfg.moe.intermediate;
  const attnRes = (r: AttnResNames) => {
    add(r.norm, 'BF16', [D]);
    add(r.proj, 'BF16', [1, D]);
  };
  cfg.layers.forEach((L, l) => {
    add(n.inputNorm(l), 'BF16', [D]);
    add(n.postAttentionNorm(l), 'BF16', [D]);
    if (cfg.attnResBlock) {
      attnRes(n.layerAttnRes(l, 'attn'));
      attnRes(n.layerAttnRes(l, 'mlp'));
    }
    if (L.attn === 'kda') {
      const k = cfg.kda!;
      const a = n.kda(l);
      const P = k.heads * k.headDim;
      for (const c of [a.qConv, a.kConv, a.vConv]) add(c, 'F32', [P, 1, k.convSize]);
      add(a.aLog, 'F32', [Math.max(k.heads, k.headDim)]);
      add(a.dtBias, 'F32', [P]);
      add(a.oNorm, 'F32', [k.headDim]);
    } else {
      const a = n.mla(l);
      if (cfg.mla.qLoraRank) add(a.qaNorm, 'BF16', [cfg.mla.qLoraRank]);
      add(a.kvaNorm, 'BF16', [cfg.mla.kvLoraRank]);
    }
    if (L.ffn === 'moe') {
      const mo = n.moe(l);
      add(mo.bias, 'F32', [cfg.moe.experts]);
      if (cfg.moe.latentDim && cfg.moe.latentNorm) add(mo.latentNorm, 'BF16', [cfg.moe.latentDim]);
      for (let e = 0; e < (withExperts ? cfg.moe.experts : 0); e++) {
        const [g, u, d] = n.expert(l, e);
        // On disk K3 has w1, w2, w3 (gate, down, up), K2 gate, up, down; each packed bytes then scales.
        const order: [string, number, number][] = cfg.moe.naming === 'k2' ? [[g, I, width], [u, I, width], [d, width, I]] : [[g, I, width], [d, width, I], [u, I, width]];
        for (const [base, rows, cols] of order) {
          if (expertsFormat === 'mxfp4') {
            add(`${base}.weight_packed`, 'U8', [rows, cols / 2]);
            add(`${base}.weight_scale`, 'U8', [rows, cols / 32]);
          } else if (expertsFormat === 'int4') {
            add(`${base}.weight_packed`, 'I32', [rows, Math.ceil(cols / 8)]);
            add(`${base}.weight_scale`, 'BF16', [rows, Math.ceil(cols / 32)]);
            add(`${base}.weight_shape`, 'I32', [2]);
          } else add(`${base}.weight`, 'BF16', [rows, cols]);
        }
      }
    }
  });
  add(n.finalNorm, 'BF16', [D]);
  if (cfg.attnResBlock) attnRes(n.outputAttnRes);
  return map;
}

/**
 * A checkpoint directory, a packed directory, or a config.json (or a directory holding only
 * one): its config and tensor index, the index made up from the config when there are no weights.
 */
export function configAndIndex(target: string): { cfg: ModelConfig; entries: Map<string, TensorEntry>; hasWeights: boolean } {
  const cfgPath = fs.statSync(target).isDirectory() ? path.join(target, 'config.json') : target;
  const cfg = loadConfig(cfgPath);
  const dir = path.dirname(cfgPath);
  const hasWeights = fs.readdirSync(dir).some((f) => f.endsWith('.safetensors') || f === 'packed.json');
  return { cfg, entries: hasWeights ? indexCheckpointDir(dir) : virtualEntries(cfg), hasWeights };
}
