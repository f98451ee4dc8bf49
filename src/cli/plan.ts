import * as fs from 'node:fs';
import * as os from 'node:os';
import type { Command } from './command.js';
import { estimateSpeed } from '../api/estimate.js';
import { thpMode } from '../util/hugepages.js';
import { ioMode, speedNotes } from './common.js';
import { parse, parseIntFlag } from './args.js';
import { assumedExperts, buildLayout, checkDrafterTarget, configAndIndex, directSupported, knownRanges, loadDrafter, makeDrafterPlan, makePlan, maxBudget, planItems, resolveBudget, stateSize, WORKER_BYTES } from '../api/diagnostics.js';
import { drafterItems, drafterJson, drafterLines } from './plan-drafter.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';

/** Items shown only when they hold bytes (they belong to some models or runs only). */
const OPTIONAL = new Set(['engine_bytes', 'derived_bytes', 'decode_bytes', 'read_buffer_bytes', 'embedding_resident_bytes']);

export const command: Command = {
  summary: 'where every byte of a memory budget goes, and the smallest budget that works',
  help: `usage: k3 plan MODEL [--memory SIZE | --preset NAME] [-c N] [--chunk N] [--parallel N] [-t N] [--io MODE]
              [--drafter DIR [--accept-len X]] [--no-estimate] [--json]

MODEL is a checkpoint directory, or a directory / path holding only config.json (the official
dtypes are assumed: BF16 trunk, MXFP4 routed experts for K3, INT4 where quantization_config
declares pack-quantized experts, as K2-Thinking and K2.5). Prints the plan for the budget, every
item it counts by name (docs/MEMORY.md): the Node baseline, the -t threads (each worker thread
16 MiB), kernel temporaries, read buffers (the O_DIRECT bounce buffers unless --io buffered, the sha256
checks of a pack), always-resident pieces, KDA state, MLA cache for N positions, scratch, pinned
trunk, streaming ring, expert cache slots, and the floor (the smallest budget that works: like
the budget, a ceiling on peak RSS; it grows with -t). --json gives floor_bytes, budget_bytes, a
*_bytes key per item and "items" (they add up to total_bytes). --parallel N plans for
\`k3 serve --parallel N\` (and the library's loadModel): N more sequence states (the running
ones and a held prompt state) and their per-sequence memory raise the floor.

Then an estimate of seconds per token at this budget on this machine, from about a second of
measurement: the read rate of MODEL's files (the page cache can make it optimistic; not measured
when MODEL has only config.json) and the kernels' weight throughput on -t threads (default: all
cores, as k3 run and k3 serve; the plan counts them). It assumes uniform routing (the expert cache hits in proportion to its slots) and no
overlap of reading and computing; a real run (k3 run reports s/token) is the measurement.
--no-estimate skips it. Exits 2 when the budget is below the floor.

--drafter DIR adds a DSpark drafter (docs/DSPARK.md; DIR holds its config.json, and its
safetensors when present, which are then checked): its bytes, its KV cache and working memory,
whether its weights are pinned or streamed (whichever reads less per sweep), and the bytes one
sweep reads (the current token and the block's drafts verified at once: streamed trunk, the
experts of every position, the drafter when streamed) and per emitted token at --accept-len X
(mean tokens emitted per sweep, bonus included; default 3.31, Block5's published mean), beside
the bytes per token without it. The target's items are then its plan in what the drafter leaves.
No speed estimate is made with --drafter.`,
  async run(args) {
    const { values, positionals } = parse('plan', args, { model: { type: 'string', short: 'm' }, memory: { type: 'string' }, preset: { type: 'string' }, ctx: { type: 'string', short: 'c' }, chunk: { type: 'string' }, parallel: { type: 'string' }, threads: { type: 'string', short: 't' }, io: { type: 'string' }, drafter: { type: 'string' }, 'accept-len': { type: 'string' }, 'no-estimate': { type: 'boolean' }, json: { type: 'boolean' } }, 1);
    const target = positionals[0]!;
    if (!fs.existsSync(target)) throw new UserError(`plan: ${target} does not exist`);
    const { cfg, entries, hasWeights } = configAndIndex(target);
    // the drafter is checked before the (slow, for K3's 82432 experts) layout is built
    const drafter = values.drafter === undefined ? null : loadDrafter(values.drafter);
    if (drafter) checkDrafterTarget(drafter.config, cfg, target);
    if (values['accept-len'] !== undefined && !drafter) throw new UserError('plan: --accept-len needs --drafter');
    const acceptLen = parseAcceptLen(values['accept-len']);
    if (drafter && acceptLen > drafter.config.block + 1) throw new UserError(`plan: --accept-len ${acceptLen} is outside 1..${drafter.config.block + 1} (tokens emitted per sweep with a block of ${drafter.config.block})`);
    const layout = buildLayout(cfg, entries);
    const state = stateSize(cfg);
    const ctx = parseIntFlag('plan', 'ctx', values.ctx, 4096, 1);
    const chunk = parseIntFlag('plan', 'chunk', values.chunk, 64, 1);
    const parallel = values.parallel === undefined ? 0 : parseIntFlag('plan', 'parallel', values.parallel, 4, 1);
    const threads = parseIntFlag('plan', 'threads', values.threads, os.availableParallelism(), 1);
    // as `k3 run` / `k3 serve` would run: -t threads, --io (auto), reads checked where digests are known
    const env = { threads, directIo: ioMode('plan', values.io) !== 'buffered' && directSupported(), verified: hasWeights && knownRanges(target, entries).length > 0 };
    const budget = resolveBudget(values.memory, values.preset, () => maxBudget(cfg, layout, state, ctx, chunk, parallel, env));
    const dp = drafter ? makeDrafterPlan(cfg, layout, state, budget, ctx, chunk, parallel, env, drafter, acceptLen) : null;
    const p = dp ? dp.target : makePlan(cfg, layout, state, budget, ctx, chunk, parallel, env);
    const floor = dp ? dp.floorBytes : p.floorBytes;
    const ok = budget >= floor;
    const items = [...planItems(p), ...(dp ? drafterItems(dp) : [])];
    const total = items.reduce((a, i) => a + i.bytes, 0);
    const est = ok && !dp && !values['no-estimate'] ? await estimateSpeed(cfg, layout, p, hasWeights ? entries : null, threads) : null;
    if (values.json) {
      console.log(JSON.stringify({
        budget_bytes: budget, floor_bytes: floor, fits: ok, total_bytes: total, max_bytes: maxBudget(cfg, layout, state, ctx, chunk, parallel, env),
        ...Object.fromEntries(items.map((i) => [i.key, i.bytes])),
        items: items.map((i) => ({ item: i.label, bytes: i.bytes })),
        parallel, ctx, threads, kernel_members: p.kernelMembers, worker_bytes: WORKER_BYTES,
        streamed_trunk_bytes: p.streamedBytes, trunk_bytes: p.trunkBytes,
        max_piece_bytes: p.maxPieceBytes, expert_bytes: p.expertBytes, expert_slots: p.expertSlots, expert_cache_bytes: p.expertCacheBytes, experts_total: p.expertsTotal,
        embedding_row_bytes: p.embedRowBytes, embedding_resident_bytes: p.embedResidentBytes, from_config_only: !hasWeights,
        ...(est ? { estimate: est } : {}),
        ...(dp && drafter ? { drafter: drafterJson(drafter, dp) } : {}),
        thp: thpMode(),
      }));
    } else {
      const row = (k: string, v: number, note = '') => `  ${k.padEnd(28)} ${formatBytes(v).padStart(12)}  ${note}`;
      console.log([
        `plan for ${cfg.arch} (${cfg.numLayers} layers)${hasWeights ? '' : ` from config.json only (BF16 trunk, ${assumedExperts(cfg).toUpperCase()} experts assumed)`}`,
        row('budget', budget),
        row('floor', floor, dp ? 'the smallest budget that works, with the drafter' : 'the smallest budget that works'),
        // every counted item (the ones of this run's kind even at 0 B, so the list is the same for every budget)
        ...items.filter((i) => i.bytes > 0 || !OPTIONAL.has(i.key)).map((i) => row(i.label, i.bytes, i.key === 'pinned_trunk_bytes' ? `${p.pinnedPieces} of ${layout.sequence.length} pieces` : i.note)),
        row('total planned', total, 'the sum of the items above'),
        row('streamed trunk per token', p.streamedBytes, 'read from disk, through the ring'),
        ...(p.embedResidentBytes ? [] : [row('embedding', p.embedRowBytes, 'per token, read on demand')]),
      ].join('\n'));
      if (dp && drafter) console.log(drafterLines(drafter, dp).join('\n'));
      if (est) {
        const disk = est.disk_bytes_per_second;
        console.log([
          `estimate (measured on this machine for about a second; not a run): ${est.seconds_per_token.toFixed(3)} s/token (${(1 / est.seconds_per_token).toFixed(2)} tok/s) at ${formatBytes(p.budgetBytes)}`,
          `  compute ${est.compute_seconds_per_token.toFixed(3)} s/token: kernels ${formatBytes(est.trunk_kernel_bytes_per_second)}/s BF16${est.expert_kernel_bytes_per_second ? `, ${formatBytes(est.expert_kernel_bytes_per_second)}/s MXFP4` : ''} on ${est.threads} thread(s)`,
          disk
            ? `  reads   ${est.read_seconds_per_token!.toFixed(3)} s/token: ${formatBytes(est.bytes_read_per_token)} per token at ${formatBytes(disk)}/s (this checkpoint's files; the page cache can make it optimistic)`
            : `  reads   ${formatBytes(est.bytes_read_per_token)} per token; disk not measured (config.json only), not included`,
        ].join('\n'));
        for (const note of speedNotes()) console.log(`  note: ${note}`);
      }
    }
    if (!ok) throw new UserError(`plan: budget ${formatBytes(budget)} is below the floor${parallel > 0 ? ` for --parallel ${parallel}` : ''}${dp ? ' with the drafter' : ''}; the smallest budget that works is ${floor} bytes (${formatBytes(floor)})`);
    return 0;
  },
};

/** --accept-len: mean tokens emitted per sweep (default 3.31, Inferact/Kimi-K3-DSpark-Block5's published mean over 11 workloads). */
function parseAcceptLen(s: string | undefined): number {
  if (s === undefined) return 3.31;
  const v = Number(s);
  if (!/^\d+(\.\d+)?$/.test(s) || !(v >= 1)) throw new UserError(`plan: --accept-len must be a number >= 1, got ${JSON.stringify(s)}`);
  return v;
}
