// `k3 plan --drafter DIR`: the drafter's part of the plan (docs/DSPARK.md §5), printed after the
// target's, and its JSON. The plan itself is src/store/drafter-plan.ts (through src/api).

import type { Drafter, DrafterPlan } from '../api/diagnostics.js';
import { formatBytes } from '../util/format.js';

/** Plan items the drafter adds (they add up, with the target's, to the total). */
export function drafterItems(dp: DrafterPlan): { key: string; label: string; bytes: number; note: string }[] {
  return [
    { key: 'drafter_pinned_bytes', label: 'drafter weights (pinned)', bytes: dp.drafterPinnedBytes, note: dp.placement === 'pinned' ? 'read by its forward, held' : 'streamed: read once per sweep' },
    { key: 'drafter_kv_bytes', label: 'drafter KV cache', bytes: dp.drafterKvBytes, note: `${dp.target.ctx} positions, f32` },
    { key: 'drafter_work_bytes', label: 'drafter working memory', bytes: dp.drafterWorkBytes, note: dp.placement === 'streamed' ? 'block activations, taps of a chunk, its read buffer' : 'block activations, taps of a chunk' },
  ];
}

export function drafterJson(d: Drafter, dp: DrafterPlan): Record<string, unknown> {
  const c = d.config;
  return {
    dir: d.dir,
    format: c.format,
    layers: c.numLayers,
    attention: c.attn.kind,
    taps: c.taps,
    stream: c.stream,
    block: c.block,
    slots: c.slots,
    block_attention: c.blockAttention,
    markov_rank: c.markov.rank,
    confidence_head: c.confidence !== null,
    embedding: c.embedding,
    lm_head: c.lmHead,
    from_config_only: d.entries === null,
    parameters: dp.drafterParameters,
    read_bytes: dp.drafterReadBytes,
    never_read_bytes: dp.drafterNeverReadBytes,
    placement: dp.placement,
    pinned_bytes: dp.drafterPinnedBytes,
    kv_bytes: dp.drafterKvBytes,
    work_bytes: dp.drafterWorkBytes,
    floor_bytes: dp.floorBytes,
    sweep: {
      width: dp.sweep.width,
      trunk_bytes: dp.sweep.trunk,
      lm_head_again_bytes: dp.sweep.lmHeadAgain,
      expert_bytes: dp.sweep.experts,
      drafter_bytes: dp.sweep.drafter,
      embedding_bytes: dp.sweep.embedding,
      total_bytes: dp.sweep.total,
    },
    accept_len: dp.acceptLen,
    bytes_per_emitted_token: dp.bytesPerEmittedToken,
    baseline_bytes_per_token: dp.baselineBytesPerToken,
    ratio_to_baseline: dp.bytesPerEmittedToken / dp.baselineBytesPerToken,
  };
}

export function drafterLines(d: Drafter, dp: DrafterPlan): string[] {
  const c = d.config;
  const row = (k: string, v: number, note = '') => `  ${k.padEnd(28)} ${formatBytes(v).padStart(12)}  ${note}`;
  const s = dp.sweep;
  return [
    `drafter ${d.dir} (${c.format}${d.entries ? '' : ', config.json only'}): ${c.numLayers} ${c.attn.kind.toUpperCase()} layers, taps after ${c.taps.join(', ')} (${c.stream}), block ${c.block} (${c.slots === 'next' ? 'slot k proposes k+1' : 'slot j proposes j'}, ${c.blockAttention}), Markov rank ${c.markov.rank}${c.confidence ? ', confidence head' : ''}`,
    row('drafter parameters', dp.drafterParameters * 2, `${(dp.drafterParameters / 1e9).toFixed(2)} B parameters, BF16 in its files`),
    row('read by its forward', dp.drafterReadBytes, c.embedding === 'own' ? 'with its own embedding and lm_head' : "K3's embedding and lm_head are shared"),
    ...(dp.drafterNeverReadBytes ? [row('never read', dp.drafterNeverReadBytes, 'its copy of K3\'s embedding: not in the budget')] : []),
    row('drafter placement', dp.placement === 'pinned' ? dp.drafterPinnedBytes : dp.drafterReadBytes, dp.placement === 'pinned' ? 'pinned: fewer bytes per sweep than streaming it' : 'streamed: read once per sweep (pinning it would read more)'),
    row('floor with the drafter', dp.floorBytes, 'the smallest budget that works'),
    `per sweep (the current token + ${c.block} drafts = ${s.width} positions verified):`,
    row('streamed trunk', s.trunk),
    ...(s.lmHeadAgain ? [row('lm_head again', s.lmHeadAgain, 'unpinned part of K3\'s lm_head, for the drafter\'s logits')] : []),
    row('experts', s.experts, `${s.width} positions' distinct experts (measured union), cache misses`),
    row('drafter', s.drafter, dp.placement === 'streamed' ? 'its matrices, and the Markov rows of the block' : 'the Markov rows of the block (its matrices are pinned)'),
    row('embedding rows', s.embedding),
    row('total per sweep', s.total),
    row(`per emitted token at ${dp.acceptLen}`, dp.bytesPerEmittedToken, `mean accepted length ${dp.acceptLen} (tokens emitted per sweep, bonus included)`),
    row('per token without drafter', dp.baselineBytesPerToken, `--spec 0 at this budget: ${(dp.bytesPerEmittedToken / dp.baselineBytesPerToken).toFixed(2)}x`),
  ];
}
