// Cost of verifying what streams (issue 10): a packed K3-shaped checkpoint (every trunk record
// and every expert a record with a sha256), run in one process at a budget below its size with
// checksums off, on first read (the default) and on every read (--verify-reads), side by side.
// Prints s/token, read (I/O wait) ms per token, sha256 ms per token and that as a share of the
// read time, and whether the generated ids are identical. (To be joined into bench/stream.ts once
// its rewrite lands.)
//
//   npm run build && node dist/bench/verify.js [--dir models/k3-verify] [--preset k3-medium]
//       [--fraction 0.4] [--gen 4] [--threads N] [--json]
//
// Benchmarks are not tests: nothing here gates CI.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { synthCheckpoint } from '../src/synth/synth.js';
import { packCheckpoint } from '../src/store/pack.js';
import { Model } from '../src/model/model.js';
import { VerifiedReader } from '../src/store/verified-reader.js';
import { greedy } from '../src/generate/greedy.js';
import { formatGB } from '../src/util/format.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: path.join(ROOT, 'models', 'k3-verify') },
    preset: { type: 'string', default: 'k3-medium' },
    fraction: { type: 'string', default: '0.4' },
    gen: { type: 'string', default: '4' },
    threads: { type: 'string', default: String(os.availableParallelism()) },
    json: { type: 'boolean', default: false },
  },
});
const log = (s: string) => process.stderr.write(s + '\n');

function dirBytes(dir: string): number {
  return fs.readdirSync(dir).reduce((s, f) => s + fs.statSync(path.join(dir, f)).size, 0);
}

async function main(): Promise<void> {
  const src = `${values.dir}-src`;
  const packed = values.dir!;
  if (!fs.existsSync(path.join(packed, 'packed.json'))) {
    log(`writing ${values.preset} to ${src} and packing it (experts as records) to ${packed} …`);
    await synthCheckpoint({ arch: 'k3', preset: values.preset as 'k3-medium', out: src, force: true });
    await packCheckpoint({ model: src, out: packed, experts: 'pack' });
    fs.rmSync(src, { recursive: true, force: true });
  }
  const size = dirBytes(packed);
  const budget = Math.max(Model.plan(packed, { budget: 0, ctx: 256, chunk: 8 }).floorBytes, Math.floor(size * Number(values.fraction)));
  log(`checkpoint ${formatGB(size)}, budget ${formatGB(budget)} (${((budget / size) * 100).toFixed(0)}%)`);
  const gen = Number(values.gen);
  const rows: { mode: string; sPerToken: number; readMsPerToken: number; hashMsPerToken: number; gbReadPerToken: number; ids: number[] }[] = [];
  for (const mode of ['off', 'first', 'every'] as const) {
    const model = await Model.load(packed, { budget, ctx: 256, chunk: 8, threads: Number(values.threads), verifyReads: mode });
    try {
      await model.store.preload();
      const v = model.store.reader instanceof VerifiedReader ? model.store.reader : null;
      const hash0 = v?.stats.hashMs ?? 0;
      const s0 = { ...model.store.stats };
      const r = await greedy(model, model.newState(), [11, 22, 33, 44], gen);
      const steps = r.stepSeconds.length;
      const st = model.store.stats;
      const read = st.trunkBytesRead + st.expertBytesRead + st.embedBytesRead - (s0.trunkBytesRead + s0.expertBytesRead + s0.embedBytesRead);
      rows.push({
        mode,
        sPerToken: r.stepSeconds.reduce((a, b) => a + b, 0) / steps,
        // ioWaitMs and the hash time cover prefill and decode; per token over all forward calls
        readMsPerToken: (st.ioWaitMs - s0.ioWaitMs) / (steps + 1),
        hashMsPerToken: ((v?.stats.hashMs ?? 0) - hash0) / (steps + 1),
        gbReadPerToken: read / (steps + 1) / 1e9,
        ids: r.generated,
      });
    } finally {
      await model.close();
    }
  }
  const off = rows[0]!;
  if (values.json) console.log(JSON.stringify({ size, budget, threads: Number(values.threads), rows }));
  console.log('checksums        s/token  vs off  read ms/token  sha256 ms/token  sha256 / read  GB read/token');
  for (const r of rows) {
    const name = r.mode === 'off' ? 'off' : r.mode === 'first' ? 'first read' : 'every read';
    console.log(`${name.padEnd(14)} ${r.sPerToken.toFixed(3).padStart(9)}  ${(r.sPerToken / off.sPerToken).toFixed(2).padStart(6)}  ${r.readMsPerToken.toFixed(1).padStart(13)}  ${r.hashMsPerToken.toFixed(1).padStart(15)}  ${r.readMsPerToken > 0 ? ((r.hashMsPerToken / r.readMsPerToken) * 100).toFixed(0).padStart(12) + '%' : '           -'}  ${r.gbReadPerToken.toFixed(3).padStart(13)}`);
  }
  console.log(`generated ids identical across modes: ${rows.every((r) => JSON.stringify(r.ids) === JSON.stringify(off.ids))}`);
}

await main();
