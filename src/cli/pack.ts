// `k3 pack MODEL OUT`: re-lay a checkpoint out for streaming (src/checkpoint/packed.ts has the format);
// `k3 pack --verify OUT`: recompute every record's checksum.

import type { Command } from './command.js';
import { parse } from './args.js';
import { DEFAULT_FILE_SIZE, DEFAULT_MAX_RECORD, packCheckpoint, parseSize, verifyPack, type ExpertsMode } from '../api/checkpoint-tools.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';
import { progressBar } from '../util/progress.js';
import { stopOnSignals } from './signals.js';

const HELP = `usage: k3 pack MODEL OUT [--max-record SIZE] [--file-size SIZE] [--experts auto|in-place|pack] [--compress] [--json]
       k3 pack --verify OUT [--json]

Lays a checkpoint's non-expert weights out for streaming: one contiguous, 4 KiB-aligned record
per layer (its trunk matrices in forward order, then its norms and biases; every tensor 4 KiB-
aligned), one for the embedding and one for the head, in OUT/trunk-NNNNN.bin, with a manifest
OUT/packed.json (offsets, shapes, dtypes, a sha256 per record, and one of the manifest itself).
config.json and the tokenizer files are copied. Routed experts stay in the source shards when
each is one contiguous run there (K3; each run is read once and its sha256 recorded); otherwise
each becomes one 4 KiB-aligned record in OUT/experts-NNNNN.bin. Every command that takes MODEL
(run, chat, logits, info, plan) accepts OUT instead, and checks each byte it computes on against
these digests on its first read (exit 4 on a mismatch, or on an edited packed.json).

OUT appears only when complete (written as OUT.tmp-<pid>, then renamed). Rerunning on a finished
OUT with the same source, config and options does nothing; an OUT holding anything else is refused.

options:
  --max-record SIZE     split a layer's record at tensor boundaries above this size
                        (default ${formatBytes(DEFAULT_MAX_RECORD)}; e.g. 256M, 1G, or bytes)
  --file-size SIZE      start a new data file above this size (default ${formatBytes(DEFAULT_FILE_SIZE)})
  --experts MODE        auto (default): leave experts in place when contiguous, else pack them;
                        in-place: refuse unless they can stay; pack: always pack one record each
  --compress            store the BF16 trunk matrices losslessly coded (exponents in a 4-bit
                        code per 64 KiB block, with a checksum; ~25% fewer bytes to read, the
                        same logits); needs this build or later to read (pack version 2)
  --verify              recompute the checksums of OUT's records and in-place experts; exit 2
                        naming any that differ (exit 4 when packed.json fails its own digest)
  --json                print the result as JSON`;

export const command: Command = {
  summary: 'lay the weights out for streaming: a 4 KiB-aligned record per layer, a manifest with checksums',
  help: HELP,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse('pack', args, {
      'max-record': { type: 'string' },
      'file-size': { type: 'string' },
      experts: { type: 'string' },
      compress: { type: 'boolean' },
      verify: { type: 'boolean' },
      json: { type: 'boolean' },
    });
    if (values.verify) {
      if (positionals.length !== 1) throw new UserError('pack: --verify takes one argument, the packed directory (k3 pack --help)');
      const dir = positionals[0]!;
      const bar = progressBar('verify');
      const r = await verifyPack(dir, { onProgress: bar.update });
      bar.end();
      const ok = r.mismatches.length === 0 && r.problems.length === 0;
      if (values.json) {
        console.log(JSON.stringify({ dir: r.dir, ok, records: r.records, experts: r.experts, bytes: r.bytes, seconds: r.seconds, mismatches: r.mismatches, problems: r.problems }));
      } else {
        console.log(`pack --verify: ${r.records} records${r.experts ? ` and ${r.experts} in-place experts` : ''}, ${formatBytes(r.bytes)} in ${r.seconds.toFixed(2)} s (${formatBytes(r.bytes / Math.max(r.seconds, 1e-3))}/s): ${ok ? 'all checksums match' : `${r.mismatches.length} record(s) differ`}`);
      }
      if (!ok) {
        const list = [...r.mismatches.map((x) => `record ${x.record} (${x.file} at ${x.offset}, ${x.length} bytes)`), ...r.problems];
        throw new UserError(`pack --verify: ${dir}: ${list.slice(0, 10).join('; ')}${list.length > 10 ? `; and ${list.length - 10} more` : ''}`);
      }
      return 0;
    }
    if (positionals.length !== 2) throw new UserError('pack: expected MODEL and OUT (k3 pack --help)');
    const [model, out] = positionals as [string, string];
    const experts = values.experts ?? 'auto';
    if (!['auto', 'in-place', 'pack'].includes(experts)) throw new UserError(`pack: --experts must be auto, in-place or pack, got ${JSON.stringify(experts)}`);
    const bar = progressBar('pack');
    const r = await packCheckpoint({
      model,
      out,
      maxRecord: values['max-record'] !== undefined ? parseSize(values['max-record'], '--max-record') : undefined,
      fileSize: values['file-size'] !== undefined ? parseSize(values['file-size'], '--file-size') : undefined,
      experts: experts as ExpertsMode,
      compress: values.compress === true,
      onProgress: bar.update,
      signal: stopOnSignals('pack'),
    });
    bar.end();
    const m = r.manifest;
    const exRecords = m.records.filter((x) => x.kind === 'expert').length;
    if (values.json) {
      console.log(JSON.stringify({
        out: r.out, skipped: r.skipped, source: m.source, records: m.records.length, trunk_records: m.records.length - exRecords, expert_records: exRecords,
        files: m.files.map((f) => f.name), bytes: r.bytes, total_bytes: m.total_bytes, experts_in_place: m.experts_in_place, dropped: m.dropped.length, seconds: r.seconds,
        ...(r.coded ? { coded: { tensors: r.coded.tensors, raw_bytes: r.coded.rawBytes, stored_bytes: r.coded.storedBytes, ratio: r.coded.storedBytes / Math.max(1, r.coded.rawBytes) } } : {}),
      }));
    } else if (r.skipped) {
      console.log(`pack: ${r.out} already holds this pack of ${m.source} (same config and options); nothing to do`);
    } else {
      const c = r.coded;
      const coded = c ? `; ${c.tensors} BF16 matrices coded: ${formatBytes(c.rawBytes)} -> ${formatBytes(c.storedBytes)} (${((100 * c.storedBytes) / Math.max(1, c.rawBytes)).toFixed(1)}%)` : '';
      const ex = m.experts === null ? 'no routed experts' : m.experts_in_place ? `${Object.keys(m.experts.at).length} experts left in place in ${m.source}` : `${exRecords} experts packed one record each`;
      console.log(
        `pack: wrote ${r.out}: ${m.records.length - exRecords} trunk records, ${ex}; ${m.files.length} data file(s), ${formatBytes(r.bytes)} copied in ${r.seconds.toFixed(2)} s (${formatBytes(r.bytes / Math.max(r.seconds, 1e-3))}/s)${coded}${m.dropped.length ? `; ${m.dropped.length} tensors the engine does not use left out` : ''}`,
      );
    }
    return 0;
  },
};
