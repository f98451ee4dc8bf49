// The run report: per decode step the token, seconds, expert hits served without a read, bytes
// read and tok/s; at the end seconds per token, bytes read per token by kind, the share of wall
// time spent waiting for I/O, and peak RSS from the OS.

import type { WeightStore, StoreStats } from '../store/store.js';
import { formatBytes } from '../util/format.js';

export interface StepReport {
  token: number;
  text?: string;
  seconds: number;
  expert_hit_rate: number | null;
  gb_read: number;
  tokens_per_second: number;
  /** Speculative sweeps (--spec): tokens drafted, accepted, emitted, and GB read per emitted token. */
  drafted?: number;
  accepted?: number;
  emitted?: number;
  gb_read_per_emitted_token?: number;
  /** The drafted ids, and the id K3 chose after the accepted ones (null: the sweep stopped first). */
  drafted_ids?: number[];
  next_id?: number | null;
}

/** Speculative decoding totals over the decode steps (sweeps). */
export interface SpecReport {
  sweeps: number;
  drafted: number;
  accepted: number;
  acceptance: number | null;
  tokens_per_sweep: number;
  /** Per draft position k (0 = the first draft): the share of sweeps that drafted it in which it was accepted. */
  acceptance_by_position: number[];
  /** Per width w (drafts verified; 0 = a plain step): how many sweeps verified w drafts (the width model's choices, or --spec-width). */
  width_histogram: number[];
  /** Every byte read during decode (weights the store read, and the drafter's own reads where known) per emitted token. */
  bytes_per_emitted_token: number;
  /** Of those, the drafter's reads (RunRecorder.drafterRead), per emitted token. */
  drafter_bytes_per_emitted_token: number;
}

export interface RunSummary {
  steps: StepReport[];
  prefill_tokens: number;
  prefill_seconds: number;
  /** Seconds from the start of the run (model loaded) to the first generated token. */
  time_to_first_token: number;
  seconds_per_token: number;
  tokens_per_second: number;
  gb_read_per_token: { trunk: number; experts: number; embeddings: number };
  io_wait_share: number;
  /** Share of decode read time (some read in flight) that the forward pass did not wait through: hidden behind compute. */
  io_overlap: number | null;
  /** Lookahead: share of guessed experts the router then chose (null: no guesses, e.g. trunk streamed or all experts resident). */
  prefetch_hit_rate: number | null;
  peak_rss_bytes: number;
  budget_bytes: number;
  /** The plan's floor: the smallest budget that works, i.e. a ceiling on peak RSS like the budget
   *  (store/plan.ts). Peak RSS counts the pages touched, so it may stay below both. */
  floor_bytes: number;
  /** Peak RSS ended above the budget: the plan missed something (`k3 run` warns; --strict-memory fails, exit 5). */
  over_budget: boolean;
  spec?: SpecReport;
}

function snap(s: StoreStats): StoreStats {
  return { ...s };
}

function bytesOf(s: StoreStats): number {
  return s.trunkBytesRead + s.expertBytesRead + s.embedBytesRead + s.smallBytesRead;
}

/** Collects per-step numbers around forward calls. */
export class RunRecorder {
  private last: StoreStats;
  private t = performance.now();
  private decodeStart: StoreStats;
  private decodeT0 = 0;
  readonly steps: StepReport[] = [];
  prefillSeconds = 0;
  prefillTokens = 0;
  /** Set by sweepDone: speculative totals, and the ids emitted beyond one per step. */
  private spec: { drafted: number; accepted: number; extra: number; draftedAt: number[]; acceptedAt: number[]; widths: number[] } | null = null;
  /** Bytes the drafter read (its weights, where the store does not count them): drafterRead. */
  private drafterBytes = 0;
  private readonly t0 = performance.now();
  firstTokenSeconds: number | null = null;

  constructor(private readonly store: WeightStore) {
    this.last = snap(store.stats);
    this.decodeStart = this.last;
  }

  /** Call when the first token has been chosen. */
  firstToken(): void {
    this.firstTokenSeconds ??= (performance.now() - this.t0) / 1000;
  }

  /** Call after the prefill forward. */
  prefillDone(tokens: number): void {
    this.prefillSeconds = (performance.now() - this.t) / 1000;
    this.prefillTokens = tokens;
    this.mark();
    this.decodeStart = this.last;
    this.decodeT0 = performance.now();
  }

  private mark(): { dt: number; cur: StoreStats; prev: StoreStats } {
    const now = performance.now();
    const cur = snap(this.store.stats);
    const r = { dt: (now - this.t) / 1000, cur, prev: this.last };
    this.t = now;
    this.last = cur;
    return r;
  }

  /** Call after each decode forward, with the token it consumed. */
  step(token: number, text?: string): StepReport {
    const { dt, cur, prev } = this.mark();
    const hits = cur.expertHits - prev.expertHits;
    const lookups = hits + cur.expertMisses - prev.expertMisses;
    const s: StepReport = {
      token,
      ...(text !== undefined ? { text } : {}),
      seconds: dt,
      expert_hit_rate: lookups ? hits / lookups : null,
      gb_read: (bytesOf(cur) - bytesOf(prev)) / 1e9,
      tokens_per_second: 1 / dt,
    };
    this.steps.push(s);
    return s;
  }

  /** Call after step() for a speculative sweep: what it drafted, accepted and emitted. */
  sweepDone(drafted: number, accepted: number, emitted: number, draftedIds?: readonly number[], nextId?: number | null): void {
    const sp = (this.spec ??= { drafted: 0, accepted: 0, extra: 0, draftedAt: [], acceptedAt: [], widths: [] });
    for (let w = sp.widths.length; w <= drafted; w++) sp.widths.push(0);
    sp.widths[drafted]!++;
    // drafts are accepted as a prefix: position k counts as accepted when k < accepted
    for (let k = 0; k < drafted; k++) {
      sp.draftedAt[k] = (sp.draftedAt[k] ?? 0) + 1;
      sp.acceptedAt[k] = (sp.acceptedAt[k] ?? 0) + (k < accepted ? 1 : 0);
    }
    sp.drafted += drafted;
    sp.accepted += accepted;
    sp.extra += emitted - 1;
    const s = this.steps[this.steps.length - 1];
    if (s) Object.assign(s, { drafted, accepted, emitted, gb_read_per_emitted_token: s.gb_read / emitted }, draftedIds ? { drafted_ids: [...draftedIds], next_id: nextId ?? null } : {});
  }

  /** Call when the drafter read `bytes` for a draft that the store's counters do not see (e.g. its streamed weights). */
  drafterRead(bytes: number): void {
    this.drafterBytes += bytes;
  }

  private specReport(sp: NonNullable<RunRecorder['spec']>, emitted: number): SpecReport {
    const sweeps = this.steps.length;
    const acceptance_by_position = sp.draftedAt.map((n, k) => sp.acceptedAt[k]! / n);
    const n = Math.max(1, emitted);
    const read = bytesOf(this.store.stats) - bytesOf(this.decodeStart) + this.drafterBytes;
    return {
      sweeps,
      drafted: sp.drafted,
      accepted: sp.accepted,
      acceptance: sp.drafted ? sp.accepted / sp.drafted : null,
      tokens_per_sweep: sweeps ? emitted / sweeps : 0,
      acceptance_by_position,
      width_histogram: [...sp.widths],
      bytes_per_emitted_token: read / n,
      drafter_bytes_per_emitted_token: this.drafterBytes / n,
    };
  }

  summary(): RunSummary {
    const sp = this.spec;
    const emitted = this.steps.length + (sp?.extra ?? 0);
    const n = Math.max(1, emitted);
    const s = this.store.stats;
    const d = this.decodeStart;
    const wall = (performance.now() - this.decodeT0) / 1000;
    const decodeSec = this.steps.reduce((a, b) => a + b.seconds, 0);
    const spt = emitted ? decodeSec / emitted : this.prefillSeconds;
    const peak = process.resourceUsage().maxRSS * 1024;
    return {
      steps: this.steps,
      prefill_tokens: this.prefillTokens,
      prefill_seconds: this.prefillSeconds,
      time_to_first_token: this.firstTokenSeconds ?? this.prefillSeconds,
      seconds_per_token: spt,
      tokens_per_second: 1 / spt,
      gb_read_per_token: {
        trunk: (s.trunkBytesRead - d.trunkBytesRead) / n / 1e9,
        experts: (s.expertBytesRead - d.expertBytesRead) / n / 1e9,
        embeddings: (s.embedBytesRead - d.embedBytesRead) / n / 1e9,
      },
      io_wait_share: this.steps.length && wall > 0 ? Math.min(1, (s.ioWaitMs - d.ioWaitMs) / 1000 / wall) : 0,
      io_overlap: s.readBusyMs > d.readBusyMs ? Math.max(0, Math.min(1, 1 - (s.ioWaitMs - d.ioWaitMs) / (s.readBusyMs - d.readBusyMs))) : null,
      prefetch_hit_rate: s.guesses > d.guesses ? (s.guessHits - d.guessHits) / (s.guesses - d.guesses) : null,
      peak_rss_bytes: peak,
      budget_bytes: this.store.plan.budgetBytes,
      floor_bytes: this.store.plan.floorBytes,
      over_budget: peak > this.store.plan.budgetBytes,
      ...(sp ? { spec: this.specReport(sp, emitted) } : {}),
    };
  }
}

/** The one warning line for a run whose peak RSS ended above its budget, else null. */
export function overBudgetWarning(r: RunSummary): string | null {
  if (!r.over_budget) return null;
  return `warning: peak RSS ${formatBytes(r.peak_rss_bytes)} (${r.peak_rss_bytes} bytes) is above the memory budget ${formatBytes(r.budget_bytes)} (${(r.peak_rss_bytes / r.budget_bytes).toFixed(3)}x): memory the plan does not count (docs/MEMORY.md); --strict-memory makes this exit 5`;
}

export function formatSummary(r: RunSummary): string {
  const g = r.gb_read_per_token;
  return [
    `prefill ${r.prefill_tokens} tokens in ${r.prefill_seconds.toFixed(3)} s (${(r.prefill_tokens / r.prefill_seconds).toFixed(1)} tok/s); first token after ${r.time_to_first_token.toFixed(3)} s`,
    `decode  ${r.seconds_per_token.toFixed(4)} s/token (${r.tokens_per_second.toFixed(2)} tok/s) over ${r.steps.length} steps`,
    ...(r.spec ? specLines(r.spec) : []),
    `read    ${formatBytes(g.trunk * 1e9)} trunk + ${formatBytes(g.experts * 1e9)} experts + ${formatBytes(g.embeddings * 1e9)} embeddings per token; waiting for I/O ${(r.io_wait_share * 100).toFixed(1)}% of decode time${r.io_overlap === null ? '' : `, ${(r.io_overlap * 100).toFixed(0)}% of read time hidden behind compute`}${r.prefetch_hit_rate === null ? '' : `; expert guesses right ${(r.prefetch_hit_rate * 100).toFixed(0)}%`}`,
    `memory  peak RSS ${formatBytes(r.peak_rss_bytes)}, ${r.over_budget ? 'ABOVE' : 'at most'} the budget ${formatBytes(r.budget_bytes)} (floor ${formatBytes(r.floor_bytes)}: the smallest budget, a ceiling on RSS; RSS counts only pages touched)`,
  ].join('\n');
}

/** The summary's speculation lines: acceptance, per position, the widths verified, bytes per emitted token. */
function specLines(s: SpecReport): string[] {
  const pos = s.acceptance_by_position.map((a) => `${(a * 100).toFixed(0)}%`).join(' ');
  const widths = (s.width_histogram ?? []).map((n, w) => (n ? `${w}:${n}` : '')).filter(Boolean).join(' ');
  return [
    `spec    ${s.accepted} of ${s.drafted} drafted tokens accepted; ${s.tokens_per_sweep.toFixed(2)} tokens per sweep${pos ? `; by position ${pos}` : ''}`,
    `        widths verified (width:sweeps) ${widths || '-'}; ${formatBytes(s.bytes_per_emitted_token ?? 0)} read per emitted token${s.drafter_bytes_per_emitted_token ? ` (drafter ${formatBytes(s.drafter_bytes_per_emitted_token)})` : ''}`,
  ];
}
