// DSpark drafts (issue 46, item 3; docs/DSPARK.md §7) on the REFERENCE path: the drafter's float64
// forward (model/dspark-ref.ts), its weights and K3's embedding / lm_head held as float64. Right for the
// tiny synthesized drafters the tests use, far too slow and big for the published ones (those wait
// for the drafter on the kernels). The drafts only decide what K3 verifies, never what is emitted.

import { checkDrafterTarget, loadDrafter } from '../checkpoint/drafter.js';
import type { DrafterConfig } from '../checkpoint/drafter-types.js';
import { namesOf } from '../checkpoint/names.js';
import { tensorsF64 } from '../checkpoint/tensor-f64.js';
import { draftBlock, matvec, type DraftWeights } from '../model/dspark-ref.js';
import type { Model } from '../model/model.js';
import type { Taps } from '../model/taps.js';
import { UserError } from '../util/errors.js';
import type { Drafter } from './draft.js';
import { drawIndex, Rng } from './sampling.js';

/** Proposes the Markov head's block from K3's tapped states of every position before the anchor. */
export class DSparkDrafter implements Drafter {
  /** Per target position: the tapped states concatenated (taps x target hidden), from the forward. */
  private readonly rows: Float64Array[] = [];
  /** Per proposal of the last block: the confidence head's estimate (null without the head). */
  lastConfidence: number[] | null = null;
  /** Per proposal of the last block when sampling: the distribution it was drawn from (over the vocabulary). */
  lastQ: Float64Array[] = [];
  private sampling: { temperature: number; rng: Rng } | null = null;
  readonly taps: Taps;

  constructor(
    readonly config: DrafterConfig,
    private readonly weights: DraftWeights,
    private readonly embedRow: (id: number) => Float64Array,
    private readonly lmHead: (h: Float64Array) => Float64Array,
  ) {
    const D = config.targetHiddenSize;
    const n = config.taps.length;
    // Rows of rejected drafts are kept until overwritten: draft() reads only positions before the anchor.
    this.taps = {
      layers: config.taps,
      stream: config.stream,
      take: (pos, T, states) => {
        for (let t = 0; t < T; t++) {
          const row = new Float64Array(n * D);
          states.forEach((s, i) => row.set(s.subarray(t * D, (t + 1) * D), i * D));
          this.rows[pos + t] = row;
        }
      },
    };
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
  private draw(scores: Float64Array): number {
    const { temperature, rng } = this.sampling!;
    let m = -Infinity;
    for (const v of scores) m = Math.max(m, v / temperature);
    const q = scores.map((v) => Math.exp(v / temperature - m));
    const z = q.reduce((a, b) => a + b, 0);
    for (let i = 0; i < q.length; i++) q[i]! /= z;
    this.lastQ.push(q);
    return Math.max(0, drawIndex(q, rng.nextFloat()));
  }

  /** The block for anchor = the context's last id (emitted, not yet in K3's state), first `max` proposals. */
  draft(context: readonly number[], max: number): number[] {
    const anchorPosition = context.length - 1;
    if (anchorPosition < 0 || max <= 0) return [];
    for (let p = 0; p < anchorPosition; p++) if (!this.rows[p]) throw new Error(`dspark: no tapped state for position ${p} (the forward ran without the drafter's taps)`);
    this.lastQ = [];
    const out = draftBlock(this.config, this.weights, {
      context: this.rows.slice(0, anchorPosition),
      contextPositions: Array.from({ length: anchorPosition }, (_, i) => i),
      anchor: context[anchorPosition]!,
      anchorPosition,
      embed: this.embedRow,
      lmHead: this.lmHead,
      ...(this.sampling ? { choose: (sc: Float64Array) => this.draw(sc) } : {}),
    });
    this.lastConfidence = out.confidence;
    return out.tokens.slice(0, max);
  }
}

/**
 * Load drafter `dir` for `model` (refused unless it fits: checkDrafterTarget) on the reference
 * path. K3's embedding and lm_head are read from the target's files as float64 unless the drafter
 * ships its own.
 */
export function loadDSparkReference(model: Model, dir: string): DSparkDrafter {
  const d = loadDrafter(dir);
  const cfg = d.config;
  checkDrafterTarget(cfg, model.config, 'the loaded model');
  if (!d.entries) throw new UserError(`--drafter: ${d.dir} holds only config.json; drafting needs its weights`);
  const w = tensorsF64(d.entries, `--drafter ${d.dir}`);
  const names = namesOf(model.config);
  const target = tensorsF64(model.store.entries, 'target');
  const H = cfg.hiddenSize;
  const V = cfg.draftVocabSize;
  const embedTable = (): Float64Array => (cfg.embedding === 'own' ? w('embed_tokens.weight') : target(`${names.embed}.weight`));
  const headTable = (): Float64Array => (cfg.lmHead === 'own' ? w('lm_head.weight') : target(`${names.lmHead}.weight`));
  return new DSparkDrafter(
    cfg,
    w,
    (id) => embedTable().slice(id * H, (id + 1) * H),
    (h) => matvec(headTable(), V, H, h),
  );
}
