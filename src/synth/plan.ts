// The tensor inventory of a synthetic checkpoint, in file order, split into shards.
//
// Names, shapes and dtypes follow the official layouts (ARCHITECTURE.md §2.3, §3.7, §4.8;
// K3.md §4): K3 under `language_model.model.` with F32 conv / A_log (padded) / dt_bias / o_norm /
// router bias and MXFP4 routed experts; Kimi Linear under `model.` with the low-rank output gate
// and A_log [1,1,H,1]; K2 in the DeepSeek-V3 layout. Every layer is one unit: its non-expert
// ("trunk") tensors as one contiguous run, then each routed expert as one contiguous run
// (K3: w1.weight_packed, w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed,
// w3.weight_scale). Units are never split across shards.
//
// Weight values (gen.ts): linear weights N(0, 1/in); norm weights U[0.9, 1.1]; embedding N(0, 1);
// A_log log U[1, 16]; dt_bias U[-0.5, 0.5]; conv taps N(0, 0.3); router bias U[-0.1, 0.1];
// AttnRes projections N(0, 1/hidden); quantized formats scaled to the same N(0, 1/in).

import type { DType } from '../checkpoint/dtypes.js';
import { K3_VISION } from './configs.js';
import type { ResolvedSynth } from './dims.js';
import { planBytes, type Gen, type TensorPlan } from './gen.js';
import { e8m0Mix, fp8Std, int4CodeStd, mxfp4CodeStd } from './rng.js';

export interface ShardPlan {
  file: string;
  tensors: TensorPlan[];
}

export interface CheckpointPlan {
  shards: ShardPlan[];
  /** Sum of tensor bytes (the index's total_size). */
  totalSize: number;
  tensorCount: number;
}

type LinearFormat = 'bf16' | 'fp8' | 'int4' | 'mxfp4';

const normal = (std: number, mean = 0): Gen => ({ kind: 'normal', mean, std });
const uniform = (lo: number, hi: number): Gen => ({ kind: 'uniform', lo, hi });
const NORM: Gen = uniform(0.9, 1.1);

function t(name: string, dtype: DType, shape: number[], gen: Gen): TensorPlan {
  return { name, dtype, shape, gen };
}

/** The tensors of one [out, in] linear layer `base` in a format. */
export function linear(base: string, out: number, inp: number, fmt: LinearFormat): TensorPlan[] {
  const target = 1 / Math.sqrt(inp);
  switch (fmt) {
    case 'bf16':
      return [t(`${base}.weight`, 'BF16', [out, inp], normal(target))];
    case 'fp8': {
      const s = target / fp8Std();
      return [
        t(`${base}.weight`, 'F8_E4M3', [out, inp], { kind: 'fp8' }),
        t(`${base}.weight_scale_inv`, 'F32', [Math.ceil(out / 128), Math.ceil(inp / 128)], uniform(0.8 * s, 1.2 * s)),
      ];
    }
    case 'int4': {
      const s = target / int4CodeStd();
      return [
        t(`${base}.weight_packed`, 'I32', [out, Math.ceil(inp / 8)], { kind: 'int4' }),
        t(`${base}.weight_scale`, 'BF16', [out, Math.ceil(inp / 32)], uniform(0.8 * s, 1.2 * s)),
        t(`${base}.weight_shape`, 'I32', [2], { kind: 'const', values: [out, inp] }),
      ];
    }
    case 'mxfp4':
      return [
        t(`${base}.weight_packed`, 'U8', [out, inp / 2], { kind: 'mxfp4' }),
        t(`${base}.weight_scale`, 'U8', [out, inp / 32], { kind: 'e8m0', ...e8m0Mix(target, mxfp4CodeStd()) }),
      ];
  }
}

/** K3 pads A_log to 128 entries (or the head dim / head count when larger). */
export function k3ALogLength(kdaHeads: number, kdaHeadDim: number): number {
  return Math.max(128, kdaHeadDim, kdaHeads);
}

interface Unit {
  tensors: TensorPlan[];
}

function units(r: ResolvedSynth): { head: Unit | null; layers: Unit[]; tail: Unit } {
  const d = r.dims;
  const arch = r.arch;
  const D = d.hidden;
  const P = arch === 'k3' ? 'language_model.model.' : 'model.';
  // Formats: K2 fp8 quantizes every decoder linear but the router; experts follow --experts-format.
  const trunkFmt: LinearFormat = r.expertsFormat === 'fp8' ? 'fp8' : 'bf16';
  const expertFmt: LinearFormat = r.expertsFormat;
  const mla = new Set(arch === 'k2' ? Array.from({ length: d.layers }, (_, i) => i + 1) : d.mlaLayers);

  const embed = t(`${P}embed_tokens.weight`, 'BF16', [d.vocab, D], normal(1));
  const finalNorm = t(`${P}norm.weight`, 'BF16', [D], NORM);
  const lmHead = t(arch === 'k3' ? 'language_model.lm_head.weight' : 'lm_head.weight', 'BF16', [d.vocab, D], normal(1 / Math.sqrt(D)));

  const layers: Unit[] = [];
  for (let l = 0; l < d.layers; l++) {
    const p = `${P}layers.${l}.`;
    const a = `${p}self_attn.`;
    const trunk: TensorPlan[] = [t(`${p}input_layernorm.weight`, 'BF16', [D], NORM), t(`${p}post_attention_layernorm.weight`, 'BF16', [D], NORM)];
    if (arch === 'k3') {
      trunk.push(
        t(`${p}self_attention_res_norm.weight`, 'BF16', [D], NORM),
        t(`${p}self_attention_res_proj.weight`, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
        t(`${p}mlp_res_norm.weight`, 'BF16', [D], NORM),
        t(`${p}mlp_res_proj.weight`, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
      );
    }
    // Attention.
    if (mla.has(l + 1)) {
      const H = d.heads;
      if (d.qLoraRank === null) {
        trunk.push(...linear(`${a}q_proj`, H * (d.nopeDim + d.ropeDim), D, trunkFmt));
      } else {
        trunk.push(
          ...linear(`${a}q_a_proj`, d.qLoraRank, D, trunkFmt),
          t(`${a}q_a_layernorm.weight`, 'BF16', [d.qLoraRank], NORM),
          ...linear(`${a}q_b_proj`, H * (d.nopeDim + d.ropeDim), d.qLoraRank, trunkFmt),
        );
      }
      trunk.push(
        ...linear(`${a}kv_a_proj_with_mqa`, d.kvLoraRank + d.ropeDim, D, trunkFmt),
        t(`${a}kv_a_layernorm.weight`, 'BF16', [d.kvLoraRank], NORM),
        ...linear(`${a}kv_b_proj`, H * (d.nopeDim + d.vDim), d.kvLoraRank, trunkFmt),
      );
      if (arch === 'k3') trunk.push(...linear(`${a}g_proj`, H * d.vDim, D, trunkFmt));
      trunk.push(...linear(`${a}o_proj`, D, H * d.vDim, trunkFmt));
    } else {
      const Hk = d.kdaHeads;
      const dk = d.kdaHeadDim;
      const W = Hk * dk;
      const small: DType = arch === 'k3' ? 'F32' : 'BF16';
      trunk.push(
        ...linear(`${a}q_proj`, W, D, trunkFmt),
        ...linear(`${a}k_proj`, W, D, trunkFmt),
        ...linear(`${a}v_proj`, W, D, trunkFmt),
        t(`${a}q_conv1d.weight`, small, [W, 1, d.convSize], normal(0.3)),
        t(`${a}k_conv1d.weight`, small, [W, 1, d.convSize], normal(0.3)),
        t(`${a}v_conv1d.weight`, small, [W, 1, d.convSize], normal(0.3)),
        t(`${a}A_log`, 'F32', arch === 'k3' ? [k3ALogLength(Hk, dk)] : [1, 1, Hk, 1], { kind: 'alog', used: Hk }),
        ...linear(`${a}f_a_proj`, dk, D, trunkFmt),
        ...linear(`${a}f_b_proj`, W, dk, trunkFmt),
        t(`${a}dt_bias`, 'F32', [W], uniform(-0.5, 0.5)),
        ...linear(`${a}b_proj`, Hk, D, trunkFmt),
      );
      if (arch === 'k3') {
        trunk.push(...linear(`${a}g_proj`, W, D, trunkFmt));
      } else {
        trunk.push(...linear(`${a}g_a_proj`, dk, D, trunkFmt), ...linear(`${a}g_b_proj`, W, dk, trunkFmt));
      }
      trunk.push(t(`${a}o_norm.weight`, small, [dk], NORM), ...linear(`${a}o_proj`, D, W, trunkFmt));
    }
    // FFN.
    const experts: TensorPlan[] = [];
    if (l < d.firstDense) {
      trunk.push(
        ...linear(`${p}mlp.gate_proj`, d.intermediate, D, trunkFmt),
        ...linear(`${p}mlp.up_proj`, d.intermediate, D, trunkFmt),
        ...linear(`${p}mlp.down_proj`, D, d.intermediate, trunkFmt),
      );
    } else {
      const m = arch === 'k2' ? `${p}mlp.` : `${p}block_sparse_moe.`;
      const E = d.experts;
      const I = d.moeIntermediate;
      const S = d.sharedExperts * I;
      trunk.push(
        t(`${m}gate.weight`, 'BF16', [E, D], normal(1 / Math.sqrt(D))),
        t(`${m}gate.e_score_correction_bias`, 'F32', [E], uniform(-0.1, 0.1)),
      );
      let X = D; // the experts' input width
      if (arch === 'k3') {
        const Lt = d.latent!;
        X = Lt;
        trunk.push(
          ...linear(`${m}routed_expert_down_proj`, Lt, D, trunkFmt),
          t(`${m}routed_expert_norm.weight`, 'BF16', [Lt], NORM),
          ...linear(`${m}routed_expert_up_proj`, D, Lt, trunkFmt),
        );
      }
      if (S > 0) {
        trunk.push(
          ...linear(`${m}shared_experts.gate_proj`, S, D, trunkFmt),
          ...linear(`${m}shared_experts.up_proj`, S, D, trunkFmt),
          ...linear(`${m}shared_experts.down_proj`, D, S, trunkFmt),
        );
      }
      for (let e = 0; e < E; e++) {
        const x = `${m}experts.${e}.`;
        if (arch === 'k2') {
          experts.push(...linear(`${x}gate_proj`, I, X, expertFmt), ...linear(`${x}up_proj`, I, X, expertFmt), ...linear(`${x}down_proj`, X, I, expertFmt));
        } else {
          experts.push(...linear(`${x}w1`, I, X, expertFmt), ...linear(`${x}w2`, X, I, expertFmt), ...linear(`${x}w3`, I, X, expertFmt));
        }
      }
    }
    layers.push({ tensors: [...trunk, ...experts] });
  }

  if (arch === 'k3') {
    const v = K3_VISION;
    const mm = 4 * v.mmHidden;
    const tail: TensorPlan[] = [
      embed,
      finalNorm,
      t(`${P}output_attn_res_norm.weight`, 'BF16', [D], NORM),
      t(`${P}output_attn_res_proj.weight`, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
      lmHead,
      // Vision tower / projector stubs (present in the real checkpoint, skipped by a text engine).
      t('vision_tower.patch_embed.proj.weight', 'BF16', [v.vtHidden, 3, v.patch, v.patch], normal(0.02)),
      t('vision_tower.encoder.final_layernorm.weight', 'BF16', [v.vtHidden], NORM),
      t('mm_projector.proj.0.weight', 'BF16', [mm, mm], normal(1 / Math.sqrt(mm))),
      t('mm_projector.proj.2.weight', 'BF16', [D, mm], normal(1 / Math.sqrt(mm))),
      t('mm_projector.post_norm.weight', 'BF16', [D], NORM),
    ];
    return { head: null, layers, tail: { tensors: tail } };
  }
  return { head: { tensors: [embed] }, layers, tail: { tensors: [finalNorm, lmHead] } };
}

/** Cut `sizes` into `groups` contiguous non-empty runs of roughly equal bytes; returns run lengths. */
export function partition(sizes: number[], groups: number): number[] {
  if (groups < 1 || groups > sizes.length) throw new Error(`partition: ${groups} groups of ${sizes.length} units`);
  const out: number[] = [];
  let i = 0;
  let left = sizes.reduce((a, b) => a + b, 0);
  for (let g = 0; g < groups; g++) {
    const groupsLeft = groups - g;
    if (groupsLeft === 1) {
      out.push(sizes.length - i);
      break;
    }
    const target = left / groupsLeft;
    let n = 0;
    let acc = 0;
    // Take at least one unit; stop before the unit that overshoots the target by more than half of
    // itself, and leave one unit for every remaining group.
    while (i + n < sizes.length - (groupsLeft - 1) && (n === 0 || acc + sizes[i + n]! / 2 <= target)) {
      acc += sizes[i + n]!;
      n++;
    }
    out.push(n);
    i += n;
    left -= acc;
  }
  return out;
}

export function shardFileName(arch: ResolvedSynth['arch'], i: number, n: number): string {
  if (n === 1) return 'model.safetensors';
  const w = arch === 'k3' ? 6 : 5; // K3 ships model-00001-of-000096 (6-digit total)
  return `model-${String(i + 1).padStart(5, '0')}-of-${String(n).padStart(w, '0')}.safetensors`;
}

export function planCheckpoint(r: ResolvedSynth): CheckpointPlan {
  const u = units(r);
  const bytesOf = (x: Unit) => x.tensors.reduce((s, tt) => s + planBytes(tt), 0);
  let groups: Unit[][];
  if (r.arch === 'k3') {
    // Layers in the first N-1 shards, embed / lm_head / norms / vision stubs in the last (K3.md §1).
    if (r.shards === 1) groups = [[...u.layers, u.tail]];
    else {
      const runs = partition(u.layers.map(bytesOf), r.shards - 1);
      groups = [];
      let i = 0;
      for (const n of runs) {
        groups.push(u.layers.slice(i, i + n));
        i += n;
      }
      groups.push([u.tail]);
    }
  } else {
    const all = [u.head!, ...u.layers, u.tail];
    const runs = partition(all.map(bytesOf), r.shards);
    groups = [];
    let i = 0;
    for (const n of runs) {
      groups.push(all.slice(i, i + n));
      i += n;
    }
  }
  const shards = groups.map((g, i) => ({ file: shardFileName(r.arch, i, groups.length), tensors: g.flatMap((x) => x.tensors) }));
  let totalSize = 0;
  let tensorCount = 0;
  for (const s of shards) for (const tt of s.tensors) {
    totalSize += planBytes(tt);
    tensorCount++;
  }
  return { shards, totalSize, tensorCount };
}
