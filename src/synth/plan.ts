// The tensor inventory of a synthetic checkpoint, in file order, split into shards.
//
// Names, shapes and dtypes follow the official layouts (docs/spec/ARCHITECTURE.md §2.3, §3.7, §4.8;
// docs/spec/K3.md §4): K3 under `language_model.model.` with F32 conv / A_log (padded) / dt_bias / o_norm /
// router bias and MXFP4 routed experts; Kimi Linear under `model.` with the low-rank output gate
// and A_log [1,1,H,1]; K2 in the DeepSeek-V3 layout; K2.5 as K2 under `language_model.` with
// vision-tower / projector stubs, its decoder's values drawn as K2's (same seed, same weights). Every layer is one unit: its non-expert
// ("trunk") tensors as one contiguous run, then each routed expert as one contiguous run
// (K3: w1.weight_packed, w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed,
// w3.weight_scale). Units are never split across shards.
//
// Weight values (gen.ts): linear weights N(0, 1/in); RMSNorm gains U[0.9, 1.1]; embedding N(0, 1);
// A_log log U[1, 16]; dt_bias U[-0.5, 0.5]; conv taps N(0, 0.3); router bias U[-0.1, 0.1];
// AttnRes projections N(0, 1/hidden); quantized formats scaled to the same N(0, 1/in).

import type { DType } from '../formats/dtypes.js';
import { K25_VISION_NAMES, K3_VISION_NAMES, namesForArch } from '../checkpoint/names.js';
import { K3_VISION } from './configs.js';
import { isK2Like, type ResolvedSynth } from './dims.js';
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

type Names = ReturnType<typeof namesForArch>;

/** What every layer's tensors are drawn from: the sizes, the names and the linear formats. */
interface LayerCtx {
  arch: ResolvedSynth['arch'];
  d: ResolvedSynth['dims'];
  n: Names;
  /** K2 fp8 quantizes every decoder linear but the router; experts follow --experts-format. */
  trunkFmt: LinearFormat;
  expertFmt: LinearFormat;
}

function units(r: ResolvedSynth): { head: Unit | null; layers: Unit[]; tail: Unit } {
  const d = r.dims;
  const ctx: LayerCtx = { arch: r.arch, d, n: namesForArch(r.arch), trunkFmt: r.expertsFormat === 'fp8' ? 'fp8' : 'bf16', expertFmt: r.expertsFormat };
  const mla = new Set(isK2Like(r.arch) ? Array.from({ length: d.layers }, (_, i) => i + 1) : d.mlaLayers);
  const layers: Unit[] = [];
  for (let l = 0; l < d.layers; l++) layers.push(layerUnit(ctx, l, mla.has(l + 1)));
  return endUnits(ctx, layers);
}

/** One layer: its trunk tensors (norms, AttnRes, attention, dense MLP or router and shared experts), then its routed experts. */
function layerUnit(ctx: LayerCtx, l: number, isMla: boolean): Unit {
  const { arch, d, n } = ctx;
  const D = d.hidden;
  const trunk: TensorPlan[] = [t(n.inputNorm(l), 'BF16', [D], NORM), t(n.postAttentionNorm(l), 'BF16', [D], NORM)];
  if (arch === 'k3') {
    const ra = n.layerAttnRes(l, 'attn');
    const rm = n.layerAttnRes(l, 'mlp');
    trunk.push(
      t(ra.norm, 'BF16', [D], NORM),
      t(ra.proj, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
      t(rm.norm, 'BF16', [D], NORM),
      t(rm.proj, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
    );
  }
  trunk.push(...(isMla ? mlaTensors(ctx, l) : kdaTensors(ctx, l)));
  if (l < d.firstDense) {
    const f = n.denseMlp(l);
    trunk.push(
      ...linear(f.gate, d.intermediate, D, ctx.trunkFmt),
      ...linear(f.up, d.intermediate, D, ctx.trunkFmt),
      ...linear(f.down, D, d.intermediate, ctx.trunkFmt),
    );
    return { tensors: trunk };
  }
  const moe = moeTensors(ctx, l);
  return { tensors: [...trunk, ...moe.trunk, ...moe.experts] };
}

function mlaTensors({ arch, d, n, trunkFmt }: LayerCtx, l: number): TensorPlan[] {
  const a = n.mla(l);
  const D = d.hidden;
  const H = d.heads;
  const out: TensorPlan[] = [];
  if (d.qLoraRank === null) {
    out.push(...linear(a.q, H * (d.nopeDim + d.ropeDim), D, trunkFmt));
  } else {
    out.push(
      ...linear(a.qa, d.qLoraRank, D, trunkFmt),
      t(a.qaNorm, 'BF16', [d.qLoraRank], NORM),
      ...linear(a.qb, H * (d.nopeDim + d.ropeDim), d.qLoraRank, trunkFmt),
    );
  }
  out.push(
    ...linear(a.kva, d.kvLoraRank + d.ropeDim, D, trunkFmt),
    t(a.kvaNorm, 'BF16', [d.kvLoraRank], NORM),
    ...linear(a.kvb, H * (d.nopeDim + d.vDim), d.kvLoraRank, trunkFmt),
  );
  if (arch === 'k3') out.push(...linear(a.gate, H * d.vDim, D, trunkFmt));
  out.push(...linear(a.o, D, H * d.vDim, trunkFmt));
  return out;
}

function kdaTensors({ arch, d, n, trunkFmt }: LayerCtx, l: number): TensorPlan[] {
  const a = n.kda(l);
  const D = d.hidden;
  const Hk = d.kdaHeads;
  const dk = d.kdaHeadDim;
  const W = Hk * dk;
  const small: DType = arch === 'k3' ? 'F32' : 'BF16';
  const out: TensorPlan[] = [
    ...linear(a.q, W, D, trunkFmt),
    ...linear(a.k, W, D, trunkFmt),
    ...linear(a.v, W, D, trunkFmt),
    t(a.qConv, small, [W, 1, d.convSize], normal(0.3)),
    t(a.kConv, small, [W, 1, d.convSize], normal(0.3)),
    t(a.vConv, small, [W, 1, d.convSize], normal(0.3)),
    t(a.aLog, 'F32', arch === 'k3' ? [k3ALogLength(Hk, dk)] : [1, 1, Hk, 1], { kind: 'alog', used: Hk }),
    ...linear(a.fa, dk, D, trunkFmt),
    ...linear(a.fb, W, dk, trunkFmt),
    t(a.dtBias, 'F32', [W], uniform(-0.5, 0.5)),
    ...linear(a.b, Hk, D, trunkFmt),
  ];
  if (arch === 'k3') {
    out.push(...linear(a.g, W, D, trunkFmt));
  } else {
    out.push(...linear(a.ga, dk, D, trunkFmt), ...linear(a.gb, W, dk, trunkFmt));
  }
  out.push(t(a.oNorm, small, [dk], NORM), ...linear(a.o, D, W, trunkFmt));
  return out;
}

/** A MoE layer's router, K3's latent projections and the shared experts (trunk), and its routed experts. */
function moeTensors({ arch, d, n, trunkFmt, expertFmt }: LayerCtx, l: number): { trunk: TensorPlan[]; experts: TensorPlan[] } {
  const m = n.moe(l);
  const D = d.hidden;
  const E = d.experts;
  const I = d.moeIntermediate;
  const S = d.sharedExperts * I;
  const trunk: TensorPlan[] = [
    t(`${m.router}.weight`, 'BF16', [E, D], normal(1 / Math.sqrt(D))),
    t(m.bias, 'F32', [E], uniform(-0.1, 0.1)),
  ];
  let X = D; // the experts' input width
  if (arch === 'k3') {
    const Lt = d.latent!;
    X = Lt;
    trunk.push(
      ...linear(m.latentDown, Lt, D, trunkFmt),
      t(m.latentNorm, 'BF16', [Lt], NORM),
      ...linear(m.latentUp, D, Lt, trunkFmt),
    );
  }
  if (S > 0) {
    trunk.push(
      ...linear(m.shared.gate, S, D, trunkFmt),
      ...linear(m.shared.up, S, D, trunkFmt),
      ...linear(m.shared.down, D, S, trunkFmt),
    );
  }
  const experts: TensorPlan[] = [];
  for (let e = 0; e < E; e++) {
    const [g, u, dn] = n.expert(l, e);
    // K2 stores gate, up, down; K3 and Kimi Linear w1, w2, w3 (gate, down, up).
    if (isK2Like(arch)) experts.push(...linear(g, I, X, expertFmt), ...linear(u, I, X, expertFmt), ...linear(dn, X, I, expertFmt));
    else experts.push(...linear(g, I, X, expertFmt), ...linear(dn, X, I, expertFmt), ...linear(u, I, X, expertFmt));
  }
  return { trunk, experts };
}

/** The units around the layers: embedding, final norm, lm_head and, for K3 and K2.5, the vision stubs. */
function endUnits({ arch, d, n }: LayerCtx, layers: Unit[]): { head: Unit | null; layers: Unit[]; tail: Unit } {
  const D = d.hidden;
  const embed = t(`${n.embed}.weight`, 'BF16', [d.vocab, D], normal(1));
  const finalNorm = t(n.finalNorm, 'BF16', [D], NORM);
  const lmHead = t(`${n.lmHead}.weight`, 'BF16', [d.vocab, D], normal(1 / Math.sqrt(D)));
  const v = K3_VISION;
  const mm = 4 * v.mmHidden;
  if (arch === 'k3') {
    const tail: TensorPlan[] = [
      embed,
      finalNorm,
      t(n.outputAttnRes.norm, 'BF16', [D], NORM),
      t(n.outputAttnRes.proj, 'BF16', [1, D], normal(1 / Math.sqrt(D))),
      lmHead,
      // Vision tower / projector stubs (present in the real checkpoint, skipped by a text engine).
      t(K3_VISION_NAMES.patchEmbed, 'BF16', [v.vtHidden, 3, v.patch, v.patch], normal(0.02)),
      t(K3_VISION_NAMES.towerNorm, 'BF16', [v.vtHidden], NORM),
      t(K3_VISION_NAMES.proj0, 'BF16', [mm, mm], normal(1 / Math.sqrt(mm))),
      t(K3_VISION_NAMES.proj2, 'BF16', [D, mm], normal(1 / Math.sqrt(mm))),
      t(K3_VISION_NAMES.postNorm, 'BF16', [D], NORM),
    ];
    return { head: null, layers, tail: { tensors: tail } };
  }
  if (arch === 'k25') {
    // The decoder's values are K2's: drawn for the name without `language_model.`.
    const asK2 = (u: Unit): Unit => ({ tensors: u.tensors.map((tp) => (tp.name.startsWith(n.prefix) ? { ...tp, key: tp.name.slice(n.prefix.length) } : tp)) });
    const tail: TensorPlan[] = [
      finalNorm,
      lmHead,
      t(K25_VISION_NAMES.patchEmbed, 'BF16', [v.vtHidden, 3, v.patch, v.patch], normal(0.02)),
      t(K25_VISION_NAMES.towerNorm, 'BF16', [v.vtHidden], NORM),
      t(K25_VISION_NAMES.preNorm, 'BF16', [v.mmHidden], NORM),
      t(K25_VISION_NAMES.preNormBias, 'BF16', [v.mmHidden], uniform(-0.1, 0.1)),
      t(K25_VISION_NAMES.proj0, 'BF16', [mm, mm], normal(1 / Math.sqrt(mm))),
      t(K25_VISION_NAMES.proj2, 'BF16', [D, mm], normal(1 / Math.sqrt(mm))),
    ];
    return { head: asK2({ tensors: [embed] }), layers: layers.map(asK2), tail: asK2({ tensors: tail }) };
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
  /** `xs` cut into `shards` runs of roughly equal bytes. */
  const cut = (xs: Unit[], shards: number): Unit[][] => {
    let i = 0;
    return partition(xs.map(bytesOf), shards).map((n) => xs.slice(i, (i += n)));
  };
  let groups: Unit[][];
  if (r.arch === 'k3') {
    // Layers in the first N-1 shards, embed / lm_head / norms / vision stubs in the last (docs/spec/K3.md §1).
    groups = r.shards === 1 ? [[...u.layers, u.tail]] : [...cut(u.layers, r.shards - 1), [u.tail]];
  } else {
    groups = cut([u.head!, ...u.layers, u.tail], r.shards);
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
