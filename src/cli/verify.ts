// `k3 verify MODEL`: check a checkpoint's bytes against checksums. A packed directory carries a
// sha256 per record (the same check as `k3 pack --verify`); a plain checkpoint gets one per
// tensor, recorded the first time in a sidecar file (store/checksums.ts) and checked afterwards,
// and from then on by every run, on first read (`--verify-reads`: on every read).

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from './command.js';
import { parse } from './args.js';
import { CHECKSUMS_NAME, indexCheckpointDir, isPackedDir, recordOrCheck, verifyPack } from '../api/checkpoint-tools.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';
import { progressBar } from '../util/progress.js';

const HELP = `usage: k3 verify MODEL [--record] [--json]

A packed directory (k3 pack): recompute every record's sha256 (and each in-place expert's)
against packed.json.
A checkpoint directory: the first time, hash every tensor and record the digests in
MODEL/${CHECKSUMS_NAME} (written only when complete); afterwards, hash every tensor and compare.
Runs then check what they stream against these digests, on the first read of each tensor
(k3 run --verify-reads: every read). A mismatch exits 4 naming the file, the tensor or record,
and the offset.

  --record   record the digests again (after the shards were replaced on purpose)
  --json     print the result as JSON`;

function fail(what: string[]): never {
  throw new UserError(`verify: ${what.slice(0, 5).join('; ')}${what.length > 5 ? `; and ${what.length - 5} more` : ''}`, 4);
}

export const command: Command = {
  summary: 'check the weights against their checksums (recorded on first use for plain checkpoints)',
  help: HELP,
  async run(args) {
    const { values, positionals } = parse('verify', args, { record: { type: 'boolean' }, json: { type: 'boolean' } }, 1);
    const dir = positionals[0]!;
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new UserError(`verify: ${dir} is not a directory`);
    const bar = progressBar('verify');
    if (isPackedDir(dir)) {
      const r = await verifyPack(dir, { onProgress: bar.update });
      bar.end();
      const ok = r.mismatches.length === 0 && r.problems.length === 0;
      if (values.json) console.log(JSON.stringify({ dir, packed: true, ok, records: r.records, bytes: r.bytes, seconds: r.seconds, mismatches: r.mismatches, problems: r.problems }));
      if (!ok) fail([...r.mismatches.map((x) => `${path.resolve(dir, x.file)}: record ${x.record} at offset ${x.offset} (${x.length} bytes) fails its sha256`), ...r.problems]);
      if (!values.json) console.log(`verify: ${dir}: ${r.records} records, ${formatBytes(r.bytes)} in ${r.seconds.toFixed(2)} s: all checksums match`);
      return 0;
    }
    const r = await recordOrCheck(dir, indexCheckpointDir(dir), { record: values.record, onProgress: bar.update });
    bar.end();
    if (values.json) console.log(JSON.stringify({ dir, packed: false, ok: r.mismatches.length === 0, recorded: r.recorded, tensors: r.tensors, bytes: r.bytes, seconds: r.seconds, mismatches: r.mismatches }));
    if (r.mismatches.length > 0) fail(r.mismatches.map((x) => `${x.file}: tensor ${x.tensor} at offset ${x.offset} (${x.length} bytes) differs from its recorded checksum`));
    if (!values.json) {
      const did = r.recorded ? `recorded checksums of ${r.tensors} tensors in ${CHECKSUMS_NAME}` : `${r.tensors} tensors match their recorded checksums`;
      console.log(`verify: ${dir}: ${did} (${formatBytes(r.bytes)} in ${r.seconds.toFixed(2)} s)`);
    }
    return 0;
  },
};
