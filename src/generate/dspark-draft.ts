// DSpark drafts (issue 46, items 1 and 3; docs/DSPARK.md §7): the drafter's block from K3's tapped
// states, on one of two paths. The default runs the drafter's forward on the engine's kernels
// (model/dspark.ts: BF16 weights pinned in the model's kernel memory, context rows projected once
// per position as the taps arrive); `kernels: 'ref'` runs the float64 reference (model/dspark-ref.ts)
// for checks, right only for tiny drafters. The drafts only decide what K3 verifies, never what is
// emitted.

import { checkDrafterTarget, loadDrafter, type Drafter as DrafterDir } from '../checkpoint/drafter.js';
import { drafterKvBytes, drafterSlots } from '../checkpoint/drafter-tensors.js';
import type { DrafterConfig } from '../checkpoint/drafter-types.js';
import { namesOf } from '../checkpoint/names.js';
import { tensorsF64 } from '../checkpoint/tensor-f64.js';
import { Compute } from '../graph/compute.js';
import { DSparkForward, type KvRow } from '../model/dspark.js';
import { draftBlock, matvec, type DraftWeights } from '../model/dspark-ref.js';
import { DSparkTarget, DSparkWeights, weightAlloc } from '../model/dspark-weights.js';
import type { Model } from '../model/model.js';
import type { Taps } from '../model/taps.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';
import type { Drafter } from './draft.js';
import { drawIndex, Rng } from './sampling.js';

/** What a block is computed by: the kept context of every position, and the block's forward. */
interface DraftPath {
  take(pos: number, T: number, states: Float32Array[]): void;
  has(pos: number): boolean;
  /** Drop every kept row (a state the taps did not come from replaces the sequence). */
  forget(): void;
  /** Bytes read from the target's files for drafting so far (the kernel path's lm_head / embedding rows the plan does not hold). */
  bytesRead(): number;
  block(anchor: number, anchorPos: number, choose?: (scores: ArrayLike<number>) => number): { tokens: number[]; confidence: number[] | null; scores: ArrayLike<number>[] };
}

/** Proposes the Markov head's block from K3's tapped states of every position before the anchor. */
export class DSparkDrafter implements Drafter {
  /**
   * Per proposal of the last block: the confidence head's estimate that K3 accepts it, a
   * probability in [0, 1], aligned with the returned draft (null without the head).
   */
  lastConfidence: number[] | null = null;
  /** Per proposal of the last block when sampling: the distribution it was drawn from (over the vocabulary). */
  lastQ: Float64Array[] = [];
  /** Per proposal of the last block: the scores it was picked from (logits + Markov bias), for checks. */
  lastScores: ArrayLike<number>[] = [];
  private sampling: { temperature: number; rng: Rng } | null = null;
  readonly taps: Taps;

  constructor(
    readonly config: DrafterConfig,
    private readonly path: DraftPath,
    /** 'kernels': the forward on the engine's kernels; 'ref': the float64 reference. */
    readonly kernels: 'kernels' | 'ref',
  ) {
    // Rows of rejected drafts are kept until overwritten: draft() reads only positions before the anchor.
    this.taps = { layers: config.taps, stream: config.stream, take: (pos, T, states) => path.take(pos, T, states) };
  }

  /**
   * Draw each proposal from q = softmax(scores / temperature) (scores: logits + Markov bias; the
   * Markov walk goes on from the drawn id) instead of taking the argmax, with its own seeded
   * generator: for sampled output, verified with acceptDraftFrom against lastQ.
   */
  sampleFrom(temperature: number, seed: number | bigint): void {
    if (!(temperature > 0)) throw new Error(`dspark: sampling temperature ${temperature} is not > 0`);
    this.sampling = { temperature, rng: new Rng(seed) };
  }

  /** A draw from softmax(scores / temperature), kept in lastQ. */
  private draw(scores: ArrayLike<number>): number {
    const { temperature, rng } = this.sampling!;
    let m = -Infinity;
    for (let i = 0; i < scores.length; i++) m = Math.max(m, scores[i]! / temperature);
    const q = Float64Array.from(scores, (v) => Math.exp(v / temperature - m));
    const z = q.reduce((a, b) => a + b, 0);
    for (let i = 0; i < q.length; i++) q[i]! /= z;
    this.lastQ.push(q);
    return Math.max(0, drawIndex(q, rng.nextFloat()));
  }

  /** Bytes this drafter's weights-sharing forward has read from the target's files so far (a counter: take differences). */
  get bytesRead(): number {
    return this.path.bytesRead();
  }

  /** Forget every tapped state: the sequence's state now comes from elsewhere (a file). */
  forget(): void {
    this.path.forget();
  }

  /** The drafter holds the tapped states of positions 0 .. n-1 (false after a state loaded from a file, whose taps it never saw). */
  covers(n: number): boolean {
    for (let p = 0; p < n; p++) if (!this.path.has(p)) return false;
    return true;
  }

  /** The block for anchor = the context's last id (emitted, not yet in K3's state), first `max` proposals. */
  draft(context: readonly number[], max: number): number[] {
    const anchorPosition = context.length - 1;
    if (anchorPosition < 0 || max <= 0) return [];
    for (let p = 0; p < anchorPosition; p++) if (!this.path.has(p)) throw new Error(`dspark: no tapped state for position ${p} (the forward ran without the drafter's taps)`);
    this.lastQ = [];
    const out = this.path.block(context[anchorPosition]!, anchorPosition, this.sampling ? (sc) => this.draw(sc) : undefined);
    this.lastConfidence = out.confidence ? out.confidence.slice(0, max) : null;
    this.lastScores = out.scores.slice(0, max);
    return out.tokens.slice(0, max);
  }
}

/** The reference path: per position the concatenated taps as float64, projected again for every block. */
function refPath(cfg: DrafterConfig, w: DraftWeights, embedRow: (id: number) => Float64Array, lmHead: (h: Float64Array) => Float64Array): DraftPath {
  const rows: Float64Array[] = [];
  const D = cfg.targetHiddenSize;
  const n = cfg.taps.length;
  return {
    take(pos, T, states) {
      for (let t = 0; t < T; t++) {
        const row = new Float64Array(n * D);
        states.forEach((s, i) => row.set(s.subarray(t * D, (t + 1) * D), i * D));
        rows[pos + t] = row;
      }
    },
    has: (p) => rows[p] !== undefined,
    forget: () => void (rows.length = 0),
    bytesRead: () => 0,
    block(anchor, anchorPosition, choose) {
      const out = draftBlock(cfg, w, {
        context: rows.slice(0, anchorPosition),
        contextPositions: Array.from({ length: anchorPosition }, (_, i) => i),
        anchor,
        anchorPosition,
        embed: embedRow,
        lmHead,
        ...(choose ? { choose } : {}),
      });
      return out;
    },
  };
}

/** The kernel path: each position's context keys/values computed once, when its taps arrive. */
function kernelPath(cfg: DrafterConfig, f: DSparkForward): DraftPath {
  const kv: KvRow[][] = [];
  const D = cfg.targetHiddenSize;
  const n = cfg.taps.length;
  return {
    take(pos, T, states) {
      const cat = new Float32Array(T * n * D);
      for (let t = 0; t < T; t++) states.forEach((s, i) => cat.set(s.subarray(t * D, (t + 1) * D), (t * n + i) * D));
      f.project(pos, T, cat).forEach((rows, t) => (kv[pos + t] = rows));
    },
    has: (p) => kv[p] !== undefined,
    forget: () => void (kv.length = 0),
    bytesRead: () => f.bytesRead,
    block: (anchor, anchorPos, choose) => f.draft(kv, anchor, anchorPos, choose),
  };
}

function loadChecked(model: Model, dir: string): DrafterDir & { entries: NonNullable<DrafterDir['entries']> } {
  const d = loadDrafter(dir);
  checkDrafterTarget(d.config, model.config, 'the loaded model');
  if (!d.entries) throw new UserError(`--drafter: ${d.dir} holds only config.json; drafting needs its weights`);
  return d as DrafterDir & { entries: NonNullable<DrafterDir['entries']> };
}

/**
 * Load drafter `dir` for `model` (refused unless it fits: checkDrafterTarget) on the reference
 * path. K3's embedding and lm_head are read from the target's files as float64 unless the drafter
 * ships its own.
 */
export function loadDSparkReference(model: Model, dir: string): DSparkDrafter {
  const d = loadChecked(model, dir);
  const cfg = d.config;
  const w = tensorsF64(d.entries, `--drafter ${d.dir}`);
  const names = namesOf(model.config);
  const target = tensorsF64(model.store.entries, 'target');
  const H = cfg.hiddenSize;
  const V = cfg.draftVocabSize;
  const embedTable = (): Float64Array => (cfg.embedding === 'own' ? w('embed_tokens.weight') : target(`${names.embed}.weight`));
  const headTable = (): Float64Array => (cfg.lmHead === 'own' ? w('lm_head.weight') : target(`${names.lmHead}.weight`));
  const path = refPath(cfg, w, (id) => embedTable().slice(id * H, (id + 1) * H), (h) => matvec(headTable(), V, H, h));
  return new DSparkDrafter(cfg, path, 'ref');
}

/** Memory the drafter takes beside the model: its weights, its KV cache for the plan's context, a block's activations and logits. */
export function drafterMemoryBytes(d: DrafterDir, ctx: number): number {
  const c = d.config;
  const slots = drafterSlots(c);
  const work = 4 * slots * (2 * c.draftVocabSize + 8 * c.hiddenSize + 3 * c.intermediateSize);
  return d.readBytes + drafterKvBytes(c, ctx) + work;
}

export interface DSparkLoadOptions {
  /** 'kernels' (default): the drafter's forward on the engine's kernels; 'ref': the float64 reference. */
  kernels?: 'kernels' | 'ref';
  /** The memory budget the model and the drafter share (default: the model plan's budget and what it kept for a drafter). */
  budget?: number;
}

/** Loaded drafter weights per model and directory: loaded once, each generation with its own context. */
const LOADED = new WeakMap<Model, Map<string, { cfg: DrafterConfig; forward: DSparkForward }>>();

/**
 * Load drafter `dir` for `model`: refused unless it fits the target (checkDrafterTarget) and,
 * on the kernel path, unless its weights, KV cache and working memory fit beside the model's plan
 * in the budget (they are pinned; the plan keeps them room when the model was loaded with the
 * drafter; a drafter streamed per sweep is not built yet).
 */
export function loadDSpark(model: Model, dir: string, opts: DSparkLoadOptions = {}): DSparkDrafter {
  if (opts.kernels === 'ref') return loadDSparkReference(model, dir);
  const byDir = LOADED.get(model) ?? LOADED.set(model, new Map()).get(model)!;
  let got = byDir.get(dir);
  if (!got) {
    const d = loadChecked(model, dir);
    const plan = model.store.plan;
    const need = drafterMemoryBytes(d, plan.ctx);
    // the budget asked for: the model's plan and what it kept for a drafter (LoadOptions.drafter)
    const budget = opts.budget ?? plan.budgetBytes + plan.reservedBytes;
    if (plan.totalBytes + need > budget) {
      throw new UserError(`--drafter ${d.dir}: its weights, KV cache and working memory (${formatBytes(need)}) do not fit beside the model's plan (${formatBytes(plan.totalBytes)}) in the budget of ${formatBytes(budget)}; load the model with the drafter (loadModel's drafter option; k3 run, chat and serve do) so that the plan keeps it room`);
    }
    const compute = new Compute(model.kernels);
    const alloc = weightAlloc(model.kernels);
    const weights = DSparkWeights.load(d.config, d.entries, alloc);
    const names = namesOf(model.config);
    const head = d.config.lmHead === 'target' ? model.store.mat(names.lmHead, model.config.vocabSize, model.config.hiddenSize) : null;
    const target = new DSparkTarget(weights, compute, model.store.entries, names, head, alloc);
    got = { cfg: d.config, forward: new DSparkForward(d.config, weights, target, compute) };
    byDir.set(dir, got);
  }
  return new DSparkDrafter(got.cfg, kernelPath(got.cfg, got.forward), 'kernels');
}
