// GET /metrics: Prometheus text exposition (version 0.0.4) of the server's counters, the engine's
// tokens, the weight store's reads and expert cache, and speculation (--drafter: sweeps, drafts
// and acceptance per position, bytes read per emitted token).

import { specStats, type KimiModel } from '../api/index.js';

export class Counters {
  readonly byStatus = new Map<number, number>();
  started = performance.now();

  count(status: number): void {
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
  }
}

export function metricsText(kimi: KimiModel, c: Counters): string {
  const e = kimi.engine.stats;
  const st = kimi.model.store.stats;
  const gb = (st.trunkBytesRead + st.expertBytesRead + st.embedBytesRead + st.smallBytesRead) / 1e9;
  const lookups = st.expertHits + st.expertMisses;
  const lines: string[] = [];
  const metric = (name: string, type: string, help: string, samples: [string, number][]) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, v] of samples) lines.push(`${name}${labels} ${Number.isFinite(v) ? v : 0}`);
  };
  metric('k3_http_requests_total', 'counter', 'HTTP requests answered, by status.', [...c.byStatus].sort((a, b) => a[0] - b[0]).map(([s, n]) => [`{status="${s}"}`, n]));
  metric('k3_generations_total', 'counter', 'Generations finished (any reason).', [['', e.requests]]);
  metric('k3_prompt_tokens_total', 'counter', 'Prompt tokens of finished generations.', [['', e.promptTokens]]);
  metric('k3_cached_prompt_tokens_total', 'counter', 'Prompt tokens continued from a held prefix state.', [['', e.cachedTokens]]);
  metric('k3_completion_tokens_total', 'counter', 'Generated tokens.', [['', e.completionTokens]]);
  metric('k3_decode_tokens_per_second', 'gauge', 'Generated tokens per second of decode forward passes.', [['', e.decodeSeconds > 0 ? e.completionTokens / e.decodeSeconds : 0]]);
  metric('k3_expert_hit_rate', 'gauge', 'Share of routed-expert lookups served without a read.', [['', lookups > 0 ? st.expertHits / lookups : 0]]);
  metric('k3_read_gigabytes_total', 'counter', 'Weight bytes read from disk, in GB.', [['', gb]]);
  metric('k3_queue_length', 'gauge', 'Requests waiting for a sequence slot.', [['', e.queued]]);
  metric('k3_active_sequences', 'gauge', 'Sequences being generated.', [['', e.active]]);
  metric('k3_prefix_cache_bytes', 'gauge', 'Bytes of held prefix states.', [['', kimi.engine.cache.bytes]]);
  specMetrics(kimi, metric);
  metric('k3_uptime_seconds', 'gauge', 'Seconds since the server started.', [['', (performance.now() - c.started) / 1000]]);
  return lines.join('\n') + '\n';
}

type Metric = (name: string, type: string, help: string, samples: [string, number][]) => void;

/** The speculative generations' counters (api spec-stats.ts, from their run recorders). */
function specMetrics(kimi: KimiModel, metric: Metric): void {
  const s = specStats(kimi.model);
  const byPos = (a: number[]): [string, number][] => a.map((n, k) => [`{position="${k + 1}"}`, n]);
  metric('k3_spec_generations_total', 'counter', 'Speculative generations finished (--drafter, or a request with spec).', [['', s.generations]]);
  metric('k3_spec_sweeps_total', 'counter', 'Verification sweeps (one forward over the current token and its drafts).', [['', s.sweeps]]);
  metric('k3_spec_drafted_tokens_total', 'counter', 'Draft tokens verified.', [['', s.drafted]]);
  metric('k3_spec_accepted_tokens_total', 'counter', 'Draft tokens the model accepted.', [['', s.accepted]]);
  metric('k3_spec_emitted_tokens_total', 'counter', 'Tokens emitted by the sweeps (accepted drafts and the token after them).', [['', s.emitted]]);
  metric('k3_spec_drafted_by_position_total', 'counter', 'Sweeps that drafted position k (1 = right after the current token).', byPos(s.draftedAt));
  metric('k3_spec_accepted_by_position_total', 'counter', 'Sweeps whose draft at position k was accepted.', byPos(s.acceptedAt));
  metric('k3_spec_read_bytes_total', 'counter', "Weight bytes the sweeps read, the drafter's own reads of the target included.", [['', s.sweepBytes + s.drafterBytes]]);
  metric('k3_spec_read_bytes_per_emitted_token', 'gauge', 'Weight bytes read per token emitted by the sweeps, since start.', [['', s.emitted > 0 ? (s.sweepBytes + s.drafterBytes) / s.emitted : 0]]);
}
