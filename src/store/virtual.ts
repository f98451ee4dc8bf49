// A tensor index made from config.json alone, with the official dtypes (BF16 trunk, F32 small
// vectors, MXFP4 routed experts for K3, BF16 otherwise), so `k3 plan` can size a model whose
// 1.56 TB of shards are not on this machine. Offsets are laid out back to back in one virtual
// file, experts contiguous per expert as K3 ships them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../checkpoint/config.js';
import { indexCheckpointDir } from '../checkpoint/safetensors.js';
import type { DType } from '../checkpoint/dtypes.js';
import { DTYPE_BYTES } from '../checkpoint/dtypes.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import { expertNames, layerPrefix, modelPrefix, trunkOrder } from '../model/weights.js';

export function virtualEntries(cfg: ModelConfig, expertsFormat: 'mxfp4' | 'bf16' = cfg.arch === 'k3' ? 'mxfp4' : 'bf16'): Map<string, TensorEntry> {
  const map = new Map<string, TensorEntry>();
  let off = 0;
  const add = (name: string, dtype: DType, shape: number[]) => {
    const nbytes = shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
    map.set(name, { name, file: 'config-only', dtype, shape, offset: off, nbytes });
    off += nbytes;
  };
  const D = cfg.hiddenSize;
  add(`${modelPrefix(cfg)}embed_tokens.weight`, 'BF16', [cfg.vocabSize, D]);
  for (const m of trunkOrder(cfg)) add(`${m.base}.weight`, 'BF16', [m.rows, m.cols]);
  const width = cfg.moe.latentDim ?? D;
  const I = cfg.moe.intermediate;
  cfg.layers.forEach((L, l) => {
    const p = layerPrefix(cfg, l);
    add(`${p}input_layernorm.weight`, 'BF16', [D]);
    add(`${p}post_attention_layernorm.weight`, 'BF16', [D]);
    if (cfg.attnResBlock) {
      for (const s of ['self_attention_res', 'mlp_res']) {
        add(`${p}${s}_norm.weight`, 'BF16', [D]);
        add(`${p}${s}_proj.weight`, 'BF16', [1, D]);
      }
    }
    const a = `${p}self_attn.`;
    if (L.attn === 'kda') {
      const k = cfg.kda!;
      const P = k.heads * k.headDim;
      for (const c of ['q', 'k', 'v']) add(`${a}${c}_conv1d.weight`, 'F32', [P, 1, k.convSize]);
      add(`${a}A_log`, 'F32', [Math.max(k.heads, k.headDim)]);
      add(`${a}dt_bias`, 'F32', [P]);
      add(`${a}o_norm.weight`, 'F32', [k.headDim]);
    } else {
      if (cfg.mla.qLoraRank) add(`${a}q_a_layernorm.weight`, 'BF16', [cfg.mla.qLoraRank]);
      add(`${a}kv_a_layernorm.weight`, 'BF16', [cfg.mla.kvLoraRank]);
    }
    if (L.ffn === 'moe') {
      const mb = `${p}${cfg.moe.naming === 'k2' ? 'mlp.' : 'block_sparse_moe.'}`;
      add(`${mb}gate.e_score_correction_bias`, 'F32', [cfg.moe.experts]);
      if (cfg.moe.latentDim && cfg.moe.latentNorm) add(`${mb}routed_expert_norm.weight`, 'BF16', [cfg.moe.latentDim]);
      for (let e = 0; e < cfg.moe.experts; e++) {
        const [g, u, d] = expertNames(cfg, l, e);
        // K3's order on disk: w1, w2, w3 (gate, down, up), each packed bytes then scales.
        for (const [base, rows, cols] of [[g, I, width], [d, width, I], [u, I, width]] as [string, number, number][]) {
          if (expertsFormat === 'mxfp4') {
            add(`${base}.weight_packed`, 'U8', [rows, cols / 2]);
            add(`${base}.weight_scale`, 'U8', [rows, cols / 32]);
          } else add(`${base}.weight`, 'BF16', [rows, cols]);
        }
      }
    }
  });
  add(`${modelPrefix(cfg)}norm.weight`, 'BF16', [D]);
  if (cfg.attnResBlock) {
    add(`${modelPrefix(cfg)}output_attn_res_norm.weight`, 'BF16', [D]);
    add(`${modelPrefix(cfg)}output_attn_res_proj.weight`, 'BF16', [1, D]);
  }
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

