// Where a DSpark drafter goes in the memory budget (docs/DSPARK.md §5), and what one emitted
// token costs in bytes read with it. A pure function of the target's plan inputs, the drafter's
// sizes and a mean accepted length, like plan.ts.
//
// The drafter takes its KV cache (its own latent or keys/values per context position) and a
// working area off the top of the budget; its weights are then either pinned (the target plans
// with what is left) or streamed once per sweep (the target keeps the budget, the drafter's bytes
// are read every sweep). Both cost a byte of reads per byte not held, so the plan computes both
// and keeps the one that reads less per sweep (pinned on a tie): "pinned when the budget allows".
//
// One sweep verifies the current token and the block's proposals (width block + 1): it reads the
// target's streamed trunk once, the distinct experts of its positions, and, when the drafter
// borrows K3's lm_head and the target plan does not pin it whole, the unpinned part of the lm_head
// a second time (the drafter's block logits come after the target's, which decide its anchor).
// So with such a drafter the target plan pins the lm_head before the forward order: a pinned
// byte of it saves two reads a sweep, any other trunk byte one.
// Bytes per emitted token = bytes per sweep / mean accepted length (tokens emitted per sweep,
// the bonus token included, as the published acceptance lengths count them).

import type { ModelConfig } from '../checkpoint/config.js';
import type { Drafter } from '../checkpoint/drafter.js';
import { drafterKvBytes, drafterSlots, drafterTensorSpecs } from '../checkpoint/drafter-tensors.js';
import { namesOf } from '../checkpoint/names.js';
import { UserError } from '../util/errors.js';
import type { Layout } from './layout.js';
import { makePlan, pinnedMask, type Plan, type PlanEnv, type StateSize } from './plan.js';

/**
 * Distinct experts of W consecutive positions over one position's, measured on the real K3
 * routing trace (shared/realdata/k3-expert-trace.bin; issue 46): W = 1, 2, 4, 6, 8. Between the
 * points it is interpolated; past 8 it grows by the last step's slope.
 */
const EXPERT_UNION: [number, number][] = [[1, 1], [2, 1.66], [4, 2.76], [6, 3.75], [8, 4.72]];

export function expertUnion(width: number): number {
  const pts = EXPERT_UNION;
  if (width <= 1) return 1;
  for (let i = 1; i < pts.length; i++) {
    const [w1, u1] = pts[i]!;
    const [w0, u0] = pts[i - 1]!;
    if (width <= w1) return u0 + ((u1 - u0) * (width - w0)) / (w1 - w0);
  }
  const [wa, ua] = pts[pts.length - 2]!;
  const [wb, ub] = pts[pts.length - 1]!;
  return ub + ((ub - ua) / (wb - wa)) * (width - wb);
}

export interface SweepBytes {
  /** Positions verified per sweep: the current token and the drafts. */
  width: number;
  trunk: number;
  /** The unpinned part of K3's lm_head, read again for the drafter's logits. */
  lmHeadAgain: number;
  experts: number;
  drafter: number;
  embedding: number;
  total: number;
}

export interface DrafterPlan {
  placement: 'pinned' | 'streamed';
  /** Bytes the drafter's forward reads; of them, pinned here (0 when streamed; tables read by row are never pinned). */
  drafterReadBytes: number;
  drafterPinnedBytes: number;
  /** In the files, never read (Inferact's copy of K3's embedding): not in the budget. */
  drafterNeverReadBytes: number;
  drafterParameters: number;
  /** The drafter's KV cache for `ctx` positions, f32. */
  drafterKvBytes: number;
  /** Its block's activations and logits, the taps of a chunk, and (streamed) its read buffer: three trunk-sized pieces. */
  drafterWorkBytes: number;
  /** The target's plan in what the drafter leaves. */
  target: Plan;
  /** The smallest budget that works with the drafter (streamed). */
  floorBytes: number;
  sweep: SweepBytes;
  acceptLen: number;
  bytesPerEmittedToken: number;
  /** Without the drafter (`--spec 0`), at the whole budget: bytes read per token. */
  baselineBytesPerToken: number;
}

/** Bytes of K3's lm_head pieces the target plan streams. */
function unpinnedHeadBytes(cfg: ModelConfig, layout: Layout, p: Plan): number {
  const pinned = pinnedMask(p, layout);
  let b = 0;
  for (const piece of layout.matrices.get(namesOf(cfg).lmHead)?.pieces ?? []) if (!pinned[piece.seq]) b += piece.bytes;
  return b;
}

/**
 * The target plan's environment with drafter `d`: K3's lm_head pinned first when the drafter reads
 * it too (pinned, neither reads it), and the kernels as wide as the drafter's widest matrix (its
 * context projection, taps x K3's hidden size), which would otherwise run on the reference kernels.
 * `k3 plan --drafter` plans with it, and so does a model loaded with a drafter (src/api/load.ts).
 */
export function drafterPlanEnv(env: PlanEnv, cfg: Pick<ModelConfig, 'prefix' | 'moe'>, d: Pick<Drafter, 'config'>): PlanEnv {
  const pinFirst = d.config.lmHead === 'target' ? [namesOf(cfg).lmHead, ...(env.pinFirst ?? [])] : env.pinFirst;
  const widest = Math.max(0, ...drafterTensorSpecs(d.config).filter((t) => t.use === 'read' && t.shape.length === 2).map((t) => t.shape[1]!));
  return { ...env, ...(pinFirst ? { pinFirst } : {}), kernelCols: Math.max(env.kernelCols ?? 0, widest) };
}

/** Expert bytes read for `width` positions: the distinct experts they route to, missed in proportion to the cache. */
function expertReads(cfg: ModelConfig, layout: Layout, p: Plan, width: number): number {
  if (layout.expertBytes === 0 || p.expertsTotal === 0) return 0;
  const perPosition = layout.moeLayers * Math.min(cfg.moe.topK, cfg.moe.experts);
  const distinct = Math.min(p.expertsTotal, perPosition * expertUnion(width));
  return distinct * Math.max(0, 1 - p.expertSlots / p.expertsTotal) * layout.expertBytes;
}

function sweepBytes(cfg: ModelConfig, layout: Layout, p: Plan, d: Drafter, streamed: boolean): SweepBytes {
  const c = d.config;
  const width = c.block + 1;
  const rowBytes = p.embedResidentBytes ? 0 : p.embedRowBytes;
  const trunk = p.streamedBytes;
  const lmHeadAgain = c.lmHead === 'target' ? unpinnedHeadBytes(cfg, layout, p) : 0;
  const experts = expertReads(cfg, layout, p, width);
  // the bulk matrices whole when streamed; by row, pinned or not, what is looked up by row (Markov rows, own embedding rows)
  const slots = drafterSlots(c);
  const rows = slots * c.markov.rank * 2 + (c.embedding === 'own' ? 2 * c.hiddenSize * 2 : 0);
  const drafter = (streamed ? d.readBytes - d.rowReadBytes : 0) + rows;
  // the target's embedding rows of the verified positions, and the drafter's anchor and mask rows from K3's table
  const embedding = width * rowBytes + (c.embedding === 'target' ? 2 * rowBytes : 0);
  return { width, trunk, lmHeadAgain, experts, drafter, embedding, total: trunk + lmHeadAgain + experts + drafter + embedding };
}

/** The drafter's working memory: a block's f32 activations and logits, the f32 taps of a chunk and their projection. */
function workBytes(d: Drafter, chunk: number): number {
  const c = d.config;
  const H = c.hiddenSize;
  const slots = drafterSlots(c);
  const attnW = c.attn.kind === 'mla' ? c.attn.heads * (c.attn.nopeDim + c.attn.ropeDim + c.attn.vDim) + c.attn.qLoraRank : (c.attn.heads + 2 * c.attn.kvHeads) * c.attn.headDim;
  const perSlot = 2 * c.vocabSize + 6 * H + 3 * c.intermediateSize + attnW;
  const perContext = c.taps.length * c.targetHiddenSize + 2 * H;
  return 4 * (slots * perSlot + chunk * perContext);
}

export function makeDrafterPlan(cfg: ModelConfig, layout: Layout, s: StateSize, budget: number, ctx: number, chunk: number, parallel: number, env: PlanEnv, d: Drafter, acceptLen: number): DrafterPlan {
  const c = d.config;
  if (!(acceptLen >= 1 && acceptLen <= c.block + 1)) throw new UserError(`plan: --accept-len ${acceptLen} is outside 1..${c.block + 1} (tokens emitted per sweep with a block of ${c.block})`);
  const kv = drafterKvBytes(c, ctx);
  const work = workBytes(d, chunk);
  const base = makePlan(cfg, layout, s, budget, ctx, chunk, parallel, env);
  // a streamed drafter is read in row pieces no larger than the trunk's, through three of them, as the ring does
  const streamBuffer = Math.min(d.maxTensorBytes, 3 * layout.maxPieceBytes);
  const floorBytes = base.floorBytes + kv + work + streamBuffer;
  const withDrafter = drafterPlanEnv(env, cfg, d);
  const streamedTarget = makePlan(cfg, layout, s, Math.max(0, budget - kv - work - streamBuffer), ctx, chunk, parallel, withDrafter);
  type Option = { placement: 'pinned' | 'streamed'; target: Plan; sweep: SweepBytes; pinned: number; work: number };
  const streamed: Option = { placement: 'streamed', target: streamedTarget, sweep: sweepBytes(cfg, layout, streamedTarget, d, true), pinned: 0, work: work + streamBuffer };
  let best = streamed;
  const bulk = d.readBytes - d.rowReadBytes;
  const pinnedBudget = budget - kv - work - bulk;
  if (pinnedBudget >= base.floorBytes) {
    const t = makePlan(cfg, layout, s, pinnedBudget, ctx, chunk, parallel, withDrafter);
    const pinned: Option = { placement: 'pinned', target: t, sweep: sweepBytes(cfg, layout, t, d, false), pinned: bulk, work };
    if (pinned.sweep.total <= streamed.sweep.total) best = pinned;
  }
  const baselineBytesPerToken = base.streamedBytes + expertReads(cfg, layout, base, 1) + (base.embedResidentBytes ? 0 : base.embedRowBytes);
  return {
    placement: best.placement,
    drafterReadBytes: d.readBytes,
    drafterPinnedBytes: best.pinned,
    drafterNeverReadBytes: d.neverReadBytes,
    drafterParameters: d.parameters,
    drafterKvBytes: kv,
    drafterWorkBytes: best.work,
    target: best.target,
    floorBytes,
    sweep: best.sweep,
    acceptLen,
    bytesPerEmittedToken: best.sweep.total / acceptLen,
    baselineBytesPerToken,
  };
}
