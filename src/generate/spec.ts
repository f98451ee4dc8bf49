// Speculative decoding (issue 9, item 3): draft up to N tokens, verify them in one multi-token
// forward (each trunk piece read once for the whole sweep), keep the accepted prefix plus the
// model's own next token, and cut the sequence state back to exactly what token-by-token decode
// would hold (Model.endSweep: no weight read). Prefill == decode == any chunk size (NUMERICS.md),
// so the sweep's logits at each position are the bytes decode would give: greedy output is
// byte-identical to --spec 0.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import type { Taps } from '../model/taps.js';
import type { Drafter } from './draft.js';
import { argmax, type GenerateOptions, type GreedyResult } from './greedy.js';
import { prefill } from './prefill.js';
import { WidthModel, type SweepCost, type WidthOptions } from './spec-width.js';
import type { StoreStats } from '../store/store.js';

/** The id chosen at a position, and whether it is the draft offered there. */
export interface Choice {
  id: number;
  accepted: boolean;
}

/** Picks the id at a sweep position given its logits and the draft there (undefined at the last position); i: the position in the sweep. */
export type Choose = (logits: Float32Array, draft: number | undefined, i: number) => Choice;

export interface SweepResult {
  drafted: number;
  accepted: number;
  emitted: number;
  stopped: boolean;
}

/**
 * One decode step with speculation: feed `pending` (the last emitted id, not yet in the state)
 * and `drafts`; emit ids in order through `emit` (true = stop after it) until a draft is refused,
 * the bonus token is emitted, or emit stops. The state then holds `pending` and the accepted
 * drafts before the last emitted id, as decode would. With no drafts it is a plain decode step.
 */
export async function sweep(model: Model, state: SequenceState, pending: number, drafts: readonly number[], choose: Choose, emit: (id: number) => boolean, taps?: Taps): Promise<SweepResult> {
  const V = model.config.vocabSize;
  const feed = [pending, ...drafts];
  if (drafts.length === 0) {
    const logits = await model.forward(state, feed, 'last', 64, taps);
    return { drafted: 0, accepted: 0, emitted: 1, stopped: emit(choose(logits, undefined, 0).id) };
  }
  model.startSweep(state);
  let emitted = 0, accepted = 0, stopped = false;
  try {
    const logits = await model.forward(state, feed, 'all', feed.length, taps);
    for (let i = 0; i <= drafts.length; i++) {
      const c = choose(logits.subarray(i * V, (i + 1) * V), drafts[i], i);
      emitted++;
      if (c.accepted) accepted++;
      stopped = emit(c.id);
      if (stopped || !c.accepted) break;
    }
  } finally {
    // Keep what emitted ids need: pending and the accepted drafts before the last emitted id.
    model.endSweep(state, Math.min(emitted, feed.length));
  }
  return { drafted: drafts.length, accepted, emitted, stopped };
}

export interface SpecOptions extends GenerateOptions {
  /** Most tokens drafted per sweep (>= 1). */
  spec: number;
  drafter: Drafter;
  /** Draft `spec` tokens every sweep (fewer only near the token limit), never backing off (--spec-width). */
  fixedWidth?: boolean;
  /** The width model's options (spec-width.ts); the plan's streamed trunk and expert reads are its priors. */
  width?: WidthOptions;
  /** Decide a draft from its position's logits (default: accepted when `pick` chooses it); i: the draft's index in the sweep. */
  accept?: (logits: Float32Array, draft: number, generated: readonly number[], i: number) => Choice;
}

/** `greedy` with speculation: same prefill, then sweeps; the same ids as greedy for a deterministic pick. */
export async function speculative(model: Model, state: SequenceState, prompt: number[], n: number, opts: SpecOptions): Promise<GreedyResult> {
  const V = model.config.vocabSize;
  const pick = opts.pick ?? ((l: Float32Array) => argmax(l, 0, V));
  const generated: number[] = [];
  const choose: Choose = (logits, draft, i) => {
    if (draft === undefined) return { id: pick(logits, generated), accepted: false };
    if (opts.accept) return opts.accept(logits, draft, generated, i);
    const id = pick(logits, generated);
    return { id, accepted: id === draft };
  };
  const emit = (id: number): boolean => {
    generated.push(id);
    return opts.onToken?.(id) === true || generated.length >= n;
  };
  const t0 = performance.now();
  const taps = opts.drafter.taps;
  const logits = await prefill(model, state, prompt, opts.chunk, opts.signal, taps);
  const prefillSeconds = (performance.now() - t0) / 1000;
  const stepSeconds: number[] = [];
  // stopped within the prompt: the report counts the tokens that went in
  opts.recorder?.prefillDone(logits ? prompt.length : state.position);
  if (!logits) return { generated, prefillSeconds, stepSeconds };
  const widths = opts.fixedWidth ? null : new WidthModel({ ...storePriors(model), ...opts.width });
  const draftBytes = opts.width?.draftBytes ?? 0;
  let stopped = emit(choose(logits, undefined, 0).id);
  opts.recorder?.firstToken();
  while (!stopped) {
    // Let the event loop run between sweeps (a SIGINT handler or a closed stdout is seen there).
    await new Promise((r) => setImmediate(r));
    const pending = generated[generated.length - 1]!;
    // a sweep emits at most drafts + 1 ids: never draft past the token limit
    const most = Math.min(opts.spec, n - generated.length - 1);
    let draftedAny = false;
    const drafts = widthDrafts(widths, most, (k) => {
      const d = opts.drafter.draft([...prompt, ...generated], k);
      draftedAny = d.length > 0;
      return d;
    }, () => opts.drafter.lastConfidence);
    const before = { ...model.store.stats };
    const s = performance.now();
    const r = await sweep(model, state, pending, drafts, choose, emit, taps);
    const seconds = (performance.now() - s) / 1000;
    stepSeconds.push(seconds);
    widths?.record(sweepCost(before, model.store.stats, drafts.length, r.accepted, seconds));
    if (draftedAny) opts.recorder?.drafterRead(draftBytes);
    opts.recorder?.step(pending);
    // the id K3 chose after the accepted drafts (refusal or bonus), unless a stop came first
    const next = r.emitted > r.accepted ? generated[generated.length - 1]! : null;
    opts.recorder?.sweepDone(r.drafted, r.accepted, r.emitted, drafts, next);
    stopped = r.stopped;
  }
  return { generated, prefillSeconds, stepSeconds };
}

/**
 * The drafts one sweep verifies, at most `most`: none while the width model pauses, else what
 * `draft` offers cut to the width it chooses from `confidence()` (read after drafting); without a
 * width model (--spec-width) all of them.
 */
export function widthDrafts(widths: WidthModel | null, most: number, draft: (most: number) => number[], confidence: () => readonly number[] | null | undefined): number[] {
  if (most <= 0 || (widths && !widths.begin(most))) return [];
  const drafts = draft(most);
  if (!widths || drafts.length === 0) return drafts;
  return drafts.slice(0, widths.choose(drafts.length, confidence()).width);
}

/** The plan's bytes as the width model's priors: the streamed trunk, and one position's expert reads (top-k of each MoE layer, missed in proportion to the cache). */
export function storePriors(model: Model): WidthOptions {
  const p = model.store.plan;
  const moe = model.config.moe;
  const layers = moe.experts > 0 ? p.expertsTotal / moe.experts : 0;
  const missed = p.expertsTotal > 0 ? Math.max(0, 1 - p.expertSlots / p.expertsTotal) : 0;
  return { fixedBytes: p.streamedBytes, expertBytes: layers * moe.topK * p.expertBytes * missed };
}

export function sweepCost(a: StoreStats, b: StoreStats, width: number, accepted: number, seconds: number): SweepCost {
  const all = (x: StoreStats) => x.trunkBytesRead + x.expertBytesRead + x.embedBytesRead + x.smallBytesRead;
  return { width, accepted, seconds, bytes: all(b) - all(a), expertBytes: b.expertBytesRead - a.expertBytesRead, ioWaitSeconds: (b.ioWaitMs - a.ioWaitMs) / 1000 };
}
