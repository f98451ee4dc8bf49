import * as fs from 'node:fs';
import * as os from 'node:os';
import type { Command } from './command.js';
import { estimateSpeed } from '../api/estimate.js';
import { thpMode } from '../util/hugepages.js';
import { ioMode, speedNotes } from './common.js';
import { parse, parseIntFlag } from './args.js';
import { assumedExperts, buildLayout, configAndIndex, directSupported, knownRanges, makePlan, maxBudget, planItems, resolveBudget, stateSize, WORKER_BYTES } from '../api/diagnostics.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';

/** Items shown only when they hold bytes (they belong to some models or runs only). */
const OPTIONAL = new Set(['engine_bytes', 'derived_bytes', 'decode_bytes', 'read_buffer_bytes', 'embedding_resident_bytes']);

export const command: Command = {
  summary: 'where every byte of a memory budget goes, and the smallest budget that works',
  help: `usage: k3 plan MODEL [--memory SIZE | --preset NAME] [-c N] [--chunk N] [--parallel N] [-t N] [--io MODE] [--no-estimate] [--json]

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
--no-estimate skips it. Exits 2 when the budget is below the floor.`,
  async run(args) {
    const { values, positionals } = parse('plan', args, { model: { type: 'string', short: 'm' }, memory: { type: 'string' }, preset: { type: 'string' }, ctx: { type: 'string', short: 'c' }, chunk: { type: 'string' }, parallel: { type: 'string' }, threads: { type: 'string', short: 't' }, io: { type: 'string' }, 'no-estimate': { type: 'boolean' }, json: { type: 'boolean' } }, 1);
    const target = positionals[0]!;
    if (!fs.existsSync(target)) throw new UserError(`plan: ${target} does not exist`);
    const { cfg, entries, hasWeights } = configAndIndex(target);
    const layout = buildLayout(cfg, entries);
    const state = stateSize(cfg);
    const ctx = parseIntFlag('plan', 'ctx', values.ctx, 4096, 1);
    const chunk = parseIntFlag('plan', 'chunk', values.chunk, 64, 1);
    const parallel = values.parallel === undefined ? 0 : parseIntFlag('plan', 'parallel', values.parallel, 4, 1);
    const threads = parseIntFlag('plan', 'threads', values.threads, os.availableParallelism(), 1);
    // as `k3 run` / `k3 serve` would run: -t threads, --io (auto), reads checked where digests are known
    const env = { threads, directIo: ioMode('plan', values.io) !== 'buffered' && directSupported(), verified: hasWeights && knownRanges(target, entries).length > 0 };
    const budget = resolveBudget(values.memory, values.preset, () => maxBudget(cfg, layout, state, ctx, chunk, parallel, env));
    const p = makePlan(cfg, layout, state, budget, ctx, chunk, parallel, env);
    const ok = budget >= p.floorBytes;
    const items = planItems(p);
    const est = ok && !values['no-estimate'] ? await estimateSpeed(cfg, layout, p, hasWeights ? entries : null, threads) : null;
    if (values.json) {
      console.log(JSON.stringify({
        budget_bytes: p.budgetBytes, floor_bytes: p.floorBytes, fits: ok, total_bytes: p.totalBytes, max_bytes: maxBudget(cfg, layout, state, ctx, chunk, parallel, env),
        ...Object.fromEntries(items.map((i) => [i.key, i.bytes])),
        items: items.map((i) => ({ item: i.label, bytes: i.bytes })),
        parallel, ctx, threads, kernel_members: p.kernelMembers, worker_bytes: WORKER_BYTES,
        streamed_trunk_bytes: p.streamedBytes, trunk_bytes: p.trunkBytes,
        max_piece_bytes: p.maxPieceBytes, expert_bytes: p.expertBytes, expert_slots: p.expertSlots, expert_cache_bytes: p.expertCacheBytes, experts_total: p.expertsTotal,
        embedding_row_bytes: p.embedRowBytes, embedding_resident_bytes: p.embedResidentBytes, from_config_only: !hasWeights,
        ...(est ? { estimate: est } : {}),
        thp: thpMode(),
      }));
    } else {
      const row = (k: string, v: number, note = '') => `  ${k.padEnd(28)} ${formatBytes(v).padStart(12)}  ${note}`;
      console.log([
        `plan for ${cfg.arch} (${cfg.numLayers} layers)${hasWeights ? '' : ` from config.json only (BF16 trunk, ${assumedExperts(cfg).toUpperCase()} experts assumed)`}`,
        row('budget', p.budgetBytes),
        row('floor', p.floorBytes, 'the smallest budget that works'),
        // every counted item (the ones of this run's kind even at 0 B, so the list is the same for every budget)
        ...items.filter((i) => i.bytes > 0 || !OPTIONAL.has(i.key)).map((i) => row(i.label, i.bytes, i.key === 'pinned_trunk_bytes' ? `${p.pinnedPieces} of ${layout.sequence.length} pieces` : i.note)),
        row('total planned', p.totalBytes, 'the sum of the items above'),
        row('streamed trunk per token', p.streamedBytes, 'read from disk, through the ring'),
        ...(p.embedResidentBytes ? [] : [row('embedding', p.embedRowBytes, 'per token, read on demand')]),
      ].join('\n'));
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
    if (!ok) throw new UserError(`plan: budget ${formatBytes(budget)} is below the floor${parallel > 0 ? ` for --parallel ${parallel}` : ''}; the smallest budget that works is ${p.floorBytes} bytes (${formatBytes(p.floorBytes)})`);
    return 0;
  },
};
