// How many drafts a speculative sweep verifies (issue 46, item 4; docs/DSPARK.md §8). A wide
// sweep reads the streamed trunk once like a narrow one, but every extra position brings experts
// the others did not route to, and compute: it pays only when its drafts are accepted. The model
// prices each width in bytes and seconds measured on this run, weighs it by the acceptance it
// expects, and verifies the width that emits the most tokens per unit of cost, down to none.
// The width only decides what is verified, never what is emitted: output stays --spec 0's bytes.

import { expertUnion } from '../store/drafter-plan.js';

export interface WidthOptions {
  /** Conditional acceptance per draft position before any is measured (P(k accepted | 0..k-1 were)); the last value repeats. Default [0.5]. */
  prior?: readonly number[];
  /** Weight of the prior, in sweeps (default 1): small, so a collapse is seen after a few misses. */
  priorWeight?: number;
  /** Each sweep scales the running counts by this first (default 0.8, a memory of about 5 sweeps): acceptance drifts with the context. */
  decay?: number;
  /** Bytes a sweep reads whatever its width (streamed trunk) until measured; 0 = unknown. */
  fixedBytes?: number;
  /** Expert bytes one position reads until measured. */
  expertBytes?: number;
  /** Bytes the drafter reads for one draft that the store's counters do not see (its streamed weights): paid by any width > 0. */
  draftBytes?: number;
  /**
   * Sweeps without drafts before the first probe after a collapse: at least `pause` (default 4), and
   * enough that probes cost at most `probeShare` (default 0.03) of the bytes of the plain sweeps
   * between them (a drafter that reads much is probed seldom); each missed probe doubles it, up to
   * maxPause (default 64).
   */
  pause?: number;
  probeShare?: number;
  maxPause?: number;
  /** 'bytes': tokens per byte; 'seconds': tokens per second; 'auto' (default): bytes while the run waits on reads more than half the time. */
  objective?: 'bytes' | 'seconds' | 'auto';
  /**
   * Until two widths are timed, each verified draft is taken to add this share of a plain sweep's
   * seconds where the run reads nothing (all resident: bytes price every width at 0). Default 0.25.
   */
  positionCost?: number;
}

/** What one sweep cost, from the store's counters and the clock. */
export interface SweepCost {
  /** Drafts verified. */
  width: number;
  accepted: number;
  seconds: number;
  /** Every byte the store read for the sweep, experts included (not the drafter's own: WidthOptions.draftBytes adds those). */
  bytes: number;
  expertBytes: number;
  ioWaitSeconds: number;
}

/** The width decided for a sweep, with what it was decided on (for reports and tests). */
export interface WidthChoice {
  width: number;
  probe: boolean;
  /** Expected emitted ids (drafts accepted + the bonus) at the chosen width. */
  expected: number;
}

const MAX_POSITIONS = 64;

/** Expected ids a sweep of width w emits under conditional acceptance p: 1 + sum_k prod_{j<=k} p_j. */
export function expectedEmitted(p: readonly number[], w: number): number {
  let e = 1;
  let reach = 1;
  for (let k = 0; k < w; k++) {
    reach *= p[k] ?? 0;
    e += reach;
  }
  return e;
}

/**
 * The width model of one generation. Per sweep: `begin()` (false: draft nothing this sweep),
 * then `choose(n, confidence)` for the n drafts the drafter offered, then `record(cost)`.
 */
export class WidthModel {
  private readonly o: Required<Omit<WidthOptions, 'prior'>> & { prior: readonly number[] };
  // conditional acceptance: decayed counts of sweeps that verified position k with 0..k-1 accepted, and accepted it
  private readonly reached = new Float64Array(MAX_POSITIONS);
  private readonly acc = new Float64Array(MAX_POSITIONS);
  // the drafter's confidence against what happened, per position (decayed), to calibrate it
  private readonly said = new Float64Array(MAX_POSITIONS);
  private readonly got = new Float64Array(MAX_POSITIONS);
  // seconds per sweep by width (decayed count and sum)
  private readonly tN = new Float64Array(MAX_POSITIONS + 1);
  private readonly tSum = new Float64Array(MAX_POSITIONS + 1);
  // expert bytes per sweep by width (decayed count and sum): the union of its positions' experts, measured
  private readonly eN = new Float64Array(MAX_POSITIONS + 1);
  private readonly eSum = new Float64Array(MAX_POSITIONS + 1);
  private fixed: number;
  private bytesSeen = 0;
  private ioShare = 0;
  private pauseLen = 0;
  private wait = 0;
  private probing = false;
  private lastConfidence: readonly number[] | null = null;
  private lastProbe = false;
  /** No draft verified yet: without a confidence to go by, the first sweep verifies one draft (a probe), not what the prior hopes. */
  private fresh = true;
  /** The drafter has given confidences: its drafts are needed to decide (else the rates decide before drafting). */
  private confident = false;

  constructor(opts: WidthOptions = {}) {
    this.o = { prior: opts.prior ?? [0.5], priorWeight: opts.priorWeight ?? 1, decay: opts.decay ?? 0.8, fixedBytes: opts.fixedBytes ?? 0, expertBytes: opts.expertBytes ?? 0, draftBytes: opts.draftBytes ?? 0, pause: opts.pause ?? 4, probeShare: opts.probeShare ?? 0.03, maxPause: opts.maxPause ?? 64, objective: opts.objective ?? 'auto', positionCost: opts.positionCost ?? 0.25 };
    if (this.o.prior.length === 0 || this.o.prior.some((p) => !(p >= 0 && p <= 1))) throw new Error(`width model: prior ${JSON.stringify(this.o.prior)} is not a list of probabilities`);
    if (!(this.o.decay > 0 && this.o.decay <= 1)) throw new Error(`width model: decay ${this.o.decay} is not in (0, 1]`);
    this.fixed = this.o.fixedBytes;
  }

  /**
   * Whether this sweep drafts at all (at most `max` drafts): false while paused after acceptance
   * collapsed (the probe comes after the pause), and, for a drafter without confidences, when the
   * running rates already price every width at 0 (then its draft, and its reads, are not made).
   */
  begin(max = MAX_POSITIONS): boolean {
    if (this.wait > 0) {
      this.wait--;
      if (this.wait === 0) this.probing = true;
      return false;
    }
    if (this.confident || this.probing || this.fresh || max <= 0 || this.best(this.acceptance(max)) > 0) return true;
    // this sweep is the pause's first
    this.pauseFor();
    this.wait--;
    if (this.wait === 0) this.probing = true;
    return false;
  }

  /** Conditional acceptance of positions 0..n-1: the drafter's confidence scaled by its record, else the running rates. */
  acceptance(n: number, confidence?: readonly number[] | null): number[] {
    const m = this.o.priorWeight;
    const p: number[] = [];
    for (let k = 0; k < Math.min(n, MAX_POSITIONS); k++) {
      const c = confidence?.[k];
      if (c !== undefined && Number.isFinite(c)) {
        // calibration: what position k's drafts delivered over what the drafter said (1 before
        // any); a light prior (a quarter sweep), so an overpromising head is believed little soon
        p.push(Math.max(0, Math.min(1, c * ((this.got[k]! + 0.25) / (this.said[k]! + 0.25)))));
      } else {
        const prior = this.o.prior[Math.min(k, this.o.prior.length - 1)]!;
        p.push((this.acc[k]! + m * prior) / (this.reached[k]! + m));
      }
    }
    return p;
  }

  /** Predicted expert bytes of a sweep of width w: as measured at w, else one position's (measured at any width, through the trace's union) times the trace's union of w + 1. */
  expertAt(w: number): number {
    if (this.eN[w]! >= 0.5) return this.eSum[w]! / this.eN[w]!;
    let n = 0, one = 0;
    for (let x = 0; x <= MAX_POSITIONS; x++) {
      if (this.eN[x]! < 0.5) continue;
      n += this.eN[x]!;
      one += this.eSum[x]! / expertUnion(x + 1);
    }
    return (n > 0 ? one / n : this.o.expertBytes) * expertUnion(w + 1);
  }

  /** Predicted bytes of a sweep of width w. */
  bytesAt(w: number): number {
    return this.fixed + this.expertAt(w) + (w > 0 ? this.o.draftBytes : 0);
  }

  /** Whether the store reads anything for a sweep: if not, bytes price every width alike. */
  private get reads(): boolean {
    return this.bytesAt(0) > 0;
  }

  /** A sweep's cost relative to a plain one before two widths are timed: its bytes, or where nothing is read, positionCost per draft. */
  private shape(w: number): number {
    return this.reads ? this.bytesAt(w) : 1 + this.o.positionCost * w;
  }

  /** Predicted seconds of a sweep of width w: a line through the widths measured (weighted least squares), else scaled from the one measured by shape(), else shape() itself. */
  secondsAt(w: number): number {
    let n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, widths = 0, only = -1;
    for (let x = 0; x <= MAX_POSITIONS; x++) {
      const c = this.tN[x]!;
      if (c < 0.5) continue;
      const y = this.tSum[x]! / c;
      n += c; sx += c * x; sy += c * y; sxx += c * x * x; sxy += c * x * y;
      widths++;
      only = x;
    }
    if (widths >= 2) {
      const b = Math.max(0, (n * sxy - sx * sy) / (n * sxx - sx * sx));
      return Math.max(1e-9, (sy - b * sx) / n + b * w);
    }
    if (widths === 1) return (this.tSum[only]! / this.tN[only]!) * (this.shape(w) / this.shape(only));
    return this.shape(w);
  }

  /** Which cost the width is chosen for now. */
  get objective(): 'bytes' | 'seconds' {
    if (this.o.objective !== 'auto') return this.o.objective;
    // waiting on reads: bytes are the time, and counted exactly, without the clock's noise;
    // a run that reads nothing has only the clock
    if (!this.reads) return 'seconds';
    return this.ioShare >= 0.5 || this.tN.every((c) => c < 0.5) ? 'bytes' : 'seconds';
  }

  /** The width with the most expected emitted ids per unit of cost under acceptance p. */
  private best(p: readonly number[]): number {
    const cost = this.objective === 'bytes' ? (w: number) => this.bytesAt(w) : (w: number) => this.secondsAt(w);
    let best = 0;
    let bestRate = expectedEmitted(p, 0) / cost(0);
    for (let w = 1; w <= p.length; w++) {
      const rate = expectedEmitted(p, w) / cost(w);
      // a wider sweep must beat the best narrower one by 1%: no width bought on rounding
      if (rate > bestRate * 1.01) [best, bestRate] = [w, rate];
    }
    return best;
  }

  /** The width for n offered drafts (confidence: the drafter's per-position estimates, aligned with them). */
  choose(n: number, confidence?: readonly number[] | null): WidthChoice {
    const p = this.acceptance(n, confidence);
    if (confidence) this.confident = true;
    const best = this.best(p);
    // a probe verifies one draft whatever the estimates (they are stale after a pause): cheap, and enough to see a recovery
    const probe = (this.probing || (this.fresh && !confidence)) && n > 0;
    const width = probe ? 1 : best;
    this.lastConfidence = confidence ?? null;
    this.lastProbe = probe;
    this.probing = false;
    if (width === 0 && n > 0) this.pauseFor();
    return { width, probe, expected: expectedEmitted(p, width) };
  }

  private pauseFor(): void {
    const extra = this.bytesAt(1) - this.bytesAt(0);
    const first = Math.max(this.o.pause, Math.ceil(extra / (this.o.probeShare * Math.max(1, this.bytesAt(0)))));
    this.pauseLen = Math.min(this.pauseLen ? 2 * this.pauseLen : first, this.o.maxPause);
    this.wait = this.pauseLen;
  }

  /** After the sweep: learn acceptance, bytes and seconds from what it cost. */
  record(s: SweepCost): void {
    const d = this.o.decay;
    // acceptance ages only with sweeps that verified drafts: a pause carries no news of it
    const aging = s.width > 0 ? [this.reached, this.acc, this.said, this.got] : [];
    for (const a of [...aging, this.tN, this.tSum, this.eN, this.eSum]) for (let i = 0; i < a.length; i++) a[i]! *= d;
    for (let k = 0; k < Math.min(s.width, MAX_POSITIONS) && k <= s.accepted; k++) {
      this.reached[k]!++;
      const hit = k < s.accepted ? 1 : 0;
      this.acc[k]! += hit;
      const c = this.lastConfidence?.[k];
      if (c !== undefined && Number.isFinite(c)) {
        this.said[k]! += c;
        this.got[k]! += hit;
      }
    }
    this.learnCost(s);
    if (s.width > 0) this.fresh = false;
    if (s.accepted > 0) this.pauseLen = 0;
    else if (this.lastProbe) this.pauseFor();
    this.lastProbe = false;
    this.lastConfidence = null;
  }

  private learnCost(s: SweepCost): void {
    const w = Math.min(s.width, MAX_POSITIONS);
    this.tN[w]!++;
    this.tSum[w]! += s.seconds;
    const io = s.seconds > 0 ? Math.min(1, s.ioWaitSeconds / s.seconds) : this.ioShare;
    this.ioShare = this.bytesSeen === 0 ? io : 0.8 * this.ioShare + 0.2 * io;
    // the first measurement replaces the planned bytes; later ones move them
    const k = this.bytesSeen === 0 ? 1 : 0.3;
    const fixed = Math.max(0, s.bytes - s.expertBytes);
    this.fixed += k * (fixed - this.fixed);
    this.eN[w]!++;
    this.eSum[w]! += s.expertBytes;
    this.bytesSeen++;
  }
}
