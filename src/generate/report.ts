// The run report: per decode step the token, seconds, expert hits served without a read, bytes
// read and tok/s; at the end seconds per token, bytes read per token by kind, the share of wall
// time spent waiting for I/O, and peak RSS from the OS.

import type { WeightStore, StoreStats } from '../store/store.js';
import { formatMiB } from '../util/format.js';

export interface StepReport {
  token: number;
  text?: string;
  seconds: number;
  expert_hit_rate: number | null;
  gb_read: number;
  tokens_per_second: number;
}

export interface RunSummary {
  steps: StepReport[];
  prefill_tokens: number;
  prefill_seconds: number;
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
  floor_bytes: number;
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

  constructor(private readonly store: WeightStore) {
    this.last = snap(store.stats);
    this.decodeStart = this.last;
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

  summary(): RunSummary {
    const n = Math.max(1, this.steps.length);
    const s = this.store.stats;
    const d = this.decodeStart;
    const wall = (performance.now() - this.decodeT0) / 1000;
    const decodeSec = this.steps.reduce((a, b) => a + b.seconds, 0);
    const spt = this.steps.length ? decodeSec / this.steps.length : this.prefillSeconds;
    return {
      steps: this.steps,
      prefill_tokens: this.prefillTokens,
      prefill_seconds: this.prefillSeconds,
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
      peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
      budget_bytes: this.store.plan.budgetBytes,
      floor_bytes: this.store.plan.floorBytes,
    };
  }
}

export function formatSummary(r: RunSummary): string {
  const g = r.gb_read_per_token;
  return [
    `prefill ${r.prefill_tokens} tokens in ${r.prefill_seconds.toFixed(3)} s (${(r.prefill_tokens / r.prefill_seconds).toFixed(1)} tok/s)`,
    `decode  ${r.seconds_per_token.toFixed(4)} s/token (${r.tokens_per_second.toFixed(2)} tok/s) over ${r.steps.length} steps`,
    `read    ${(g.trunk * 1e3).toFixed(2)} MB trunk + ${(g.experts * 1e3).toFixed(2)} MB experts + ${(g.embeddings * 1e6).toFixed(1)} kB embeddings per token; waiting for I/O ${(r.io_wait_share * 100).toFixed(1)}% of decode time${r.io_overlap === null ? '' : `, ${(r.io_overlap * 100).toFixed(0)}% of read time hidden behind compute`}${r.prefetch_hit_rate === null ? '' : `; expert guesses right ${(r.prefetch_hit_rate * 100).toFixed(0)}%`}`,
    `memory  peak RSS ${formatMiB(r.peak_rss_bytes)} (budget ${formatMiB(r.budget_bytes)}, floor ${formatMiB(r.floor_bytes)})`,
  ].join('\n');
}
