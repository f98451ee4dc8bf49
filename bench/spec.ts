// Speculation and batching benchmark (issue 9, items 3 and 6): trunk bytes per emitted token on
// a K3-shaped checkpoint larger than its memory budget (so the trunk streams every pass), for
//   - `--spec 0` against `--spec 4` with a replay drafter at 100 / 75 / 50 / 0% acceptance
//     (drafts from an earlier run of the same prompt, the last share of each draft replaced:
//     random weights give no natural text, so n-gram drafts almost never hit there), and
//   - forwardBatch over 4 sequences against one sequence alone,
// all measured side by side in one run; each row checks its ids against the plain run's.
// Bytes come from the store's counters (exact); seconds are wall time in this process (the page
// cache may hold part of the checkpoint: bench/stream.ts measures the disk itself).
// Then the DSpark rows (issue 46; bench/spec-dspark.ts): on k3-real-layers under a cgroup cap of a
// quarter of it, Block5's acceptance replayed, the width model choosing; with the CPU and the disk.
//
//   npm run build && node dist/bench/spec.js [--dir models/k3-medium] [--layers 6] [--gen 24]
//       [--fraction 0.25] [--threads 2] [--json] [--no-dspark] [--dspark-dir models/k3-real-layers]
//       [--dspark-gen 32]
//
// Benchmarks are not tests: nothing here gates CI.

import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { synthCheckpoint } from '../src/synth/synth.js';
import { Model } from '../src/model/model.js';
import { greedy } from '../src/generate/greedy.js';
import { ReplayDrafter } from '../src/generate/draft.js';
import { speculative } from '../src/generate/spec.js';
import { RunRecorder } from '../src/generate/report.js';
import { argmax } from '../src/generate/greedy.js';
import { formatGB } from '../src/util/format.js';
import * as os from 'node:os';
import * as fs from 'node:fs';
import { directBandwidth } from './disk.js';
import { dsparkBench, formatDsparkTable } from './spec-dspark.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface SpecBenchOptions {
  /** Checkpoint directory (written with `k3 synth --preset k3-medium` when missing). */
  dir: string;
  layers: number;
  /** Tokens generated per run. */
  gen: number;
  /** Memory budget as a share of the checkpoint's size (at least the floor). */
  fraction: number;
  threads: number;
  log?: (s: string) => void;
}

export interface SpecBenchRow {
  run: string;
  /** Share of drafted tokens accepted: as set, and as measured. */
  acceptance_set: number | null;
  acceptance: number | null;
  tokens_per_sweep: number;
  trunk_gb_per_token: number;
  /** Trunk bytes per emitted token relative to the plain run (lower is better). */
  trunk_ratio: number;
  s_per_token: number;
  /** Seconds per emitted token relative to the plain run. */
  time_ratio: number;
  same_ids: boolean;
}

export interface SpecBenchResult {
  checkpoint_bytes: number;
  budget_bytes: number;
  trunk_bytes: number;
  rows: SpecBenchRow[];
}

const PROMPTS = [
  [11, 22, 33, 44],
  [5, 6, 7],
  [101, 202, 303, 404, 505],
  [9, 8],
];

/** Run the table: returns its rows (the caller prints them). */
export async function specBench(o: SpecBenchOptions): Promise<SpecBenchResult> {
  const log = o.log ?? (() => {});
  const s = await synthCheckpoint({ arch: 'k3', preset: 'k3-medium', out: o.dir, layers: o.layers, force: true });
  log(`checkpoint ${o.dir}: ${formatGB(s.bytes)}${s.skipped ? ' (already there)' : ''}`);
  const plan = Model.plan(o.dir, { budget: 0, ctx: 256, threads: o.threads });
  const budget = Math.max(plan.floorBytes, Math.floor(s.bytes * o.fraction));
  const model = await Model.load(o.dir, { budget, ctx: 256, threads: o.threads });
  log(`budget ${formatGB(budget)} (floor ${formatGB(plan.floorBytes)}, trunk ${formatGB(plan.trunkBytes)}, pinned ${formatGB(model.store.plan.pinnedBytes)})`);
  try {
    await model.store.preload();
    const V = model.config.vocabSize;
    const prompt = PROMPTS[0]!;
    const rows: SpecBenchRow[] = [];
    type Measured = Omit<SpecBenchRow, 'trunk_ratio' | 'time_ratio' | 'same_ids'> & { ids: number[] };
    const measure = async (run: string, share: number | null): Promise<Measured> => {
      const rec = new RunRecorder(model.store);
      const state = model.newState();
      const r = share === null ? await greedy(model, state, prompt, o.gen, { recorder: rec }) : await speculative(model, state, prompt, o.gen, { spec: 4, drafter: new ReplayDrafter([...prompt, ...base!.ids], share), recorder: rec });
      model.release(state);
      const sum = rec.summary();
      log(`  ${run}: ${(sum.gb_read_per_token.trunk * 1e3).toFixed(1)} MB trunk per token, ${sum.seconds_per_token.toFixed(3)} s/token`);
      return { run, acceptance_set: share, acceptance: sum.spec?.acceptance ?? null, tokens_per_sweep: sum.spec?.tokens_per_sweep ?? 1, trunk_gb_per_token: sum.gb_read_per_token.trunk, s_per_token: sum.seconds_per_token, ids: r.generated };
    };
    let base: Measured | null = null;
    base = await measure('spec 0', null);
    const row = (m: Measured, ref: Measured, same: boolean): SpecBenchRow => {
      const { ids: _ids, ...rest } = m;
      return { ...rest, trunk_ratio: m.trunk_gb_per_token / ref.trunk_gb_per_token, time_ratio: m.s_per_token / ref.s_per_token, same_ids: same };
    };
    rows.push(row(base, base, true));
    for (const share of [1, 0.75, 0.5, 0]) {
      const m = await measure(`spec 4 @ ${share * 100}%`, share);
      rows.push(row(m, base, JSON.stringify(m.ids) === JSON.stringify(base.ids)));
    }

    // forwardBatch: 4 sequences decoding greedily together, against each decoding alone
    const decode = async (batch: number[][]): Promise<{ ids: number[][]; trunk: number; seconds: number; tokens: number }> => {
      const states = batch.map(() => model.newState());
      let logits = await model.forwardBatch(states, batch, 'last');
      const ids: number[][] = batch.map(() => []);
      const t0 = performance.now();
      const b0 = model.store.stats.trunkBytesRead;
      for (let step = 0; ; step++) {
        const next = logits.map((l) => argmax(l, 0, V));
        next.forEach((id, i) => ids[i]!.push(id));
        if (step === o.gen - 1) break;
        logits = await model.forwardBatch(states, next.map((id) => [id]), 'last');
      }
      const tokens = (o.gen - 1) * batch.length;
      states.forEach((st) => model.release(st));
      return { ids, trunk: model.store.stats.trunkBytesRead - b0, seconds: (performance.now() - t0) / 1000, tokens };
    };
    const solo = [];
    for (const p of PROMPTS) solo.push(await decode([p]));
    const batched = await decode(PROMPTS);
    const one = solo[0]!;
    const per = (x: { trunk: number; seconds: number; tokens: number }) => ({ trunk: x.trunk / x.tokens / 1e9, s: x.seconds / x.tokens });
    const a = per(one);
    const b = per(batched);
    log(`  batch 4: ${(b.trunk * 1e3).toFixed(1)} MB trunk per token vs ${(a.trunk * 1e3).toFixed(1)} alone`);
    const same = JSON.stringify(batched.ids) === JSON.stringify(solo.map((x) => x.ids[0]));
    rows.push({ run: 'batch 1', acceptance_set: null, acceptance: null, tokens_per_sweep: 1, trunk_gb_per_token: a.trunk, trunk_ratio: 1, s_per_token: a.s, time_ratio: 1, same_ids: true });
    rows.push({ run: 'batch 4', acceptance_set: null, acceptance: null, tokens_per_sweep: 4, trunk_gb_per_token: b.trunk, trunk_ratio: b.trunk / a.trunk, s_per_token: b.s, time_ratio: b.s / a.s, same_ids: same });
    return { checkpoint_bytes: s.bytes, budget_bytes: budget, trunk_bytes: plan.trunkBytes, rows };
  } finally {
    await model.close();
  }
}

export function formatSpecTable(r: SpecBenchResult): string {
  const lines = [`checkpoint ${formatGB(r.checkpoint_bytes)}, trunk ${formatGB(r.trunk_bytes)}, budget ${formatGB(r.budget_bytes)}`, 'run             accept set  accepted  tok/sweep  trunk MB/token  x plain  s/token  x plain  same ids'];
  const pct = (v: number | null) => (v === null ? '-' : `${(v * 100).toFixed(0)}%`);
  for (const x of r.rows) {
    lines.push(`${x.run.padEnd(15)} ${pct(x.acceptance_set).padStart(10)}  ${pct(x.acceptance).padStart(8)}  ${x.tokens_per_sweep.toFixed(2).padStart(9)}  ${(x.trunk_gb_per_token * 1e3).toFixed(1).padStart(14)}  ${x.trunk_ratio.toFixed(2).padStart(7)}  ${x.s_per_token.toFixed(3).padStart(7)}  ${x.time_ratio.toFixed(2).padStart(7)}  ${String(x.same_ids).padStart(8)}`);
  }
  return lines.join('\n');
}

/** The DSpark rows, then the CPU model and the disk's O_DIRECT bandwidth over the checkpoint's files. */
async function dsparkPart(dir: string, gen: number, threads: number, json: boolean, log: (s: string) => void): Promise<string> {
  const r = await dsparkBench({ dir, gen, threads, fraction: 0.25, log });
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors')).map((f) => path.join(dir, f));
  const disk = await directBandwidth(files, 4e9);
  const cpu = os.cpus()[0]?.model ?? 'unknown';
  if (json) return JSON.stringify({ ...r, cpu, disk_gbps: disk.gbps, disk_note: disk.note }, null, 1);
  return `${formatDsparkTable(r)}\nCPU ${cpu} (${os.cpus().length} cores); disk ${disk.gbps.toFixed(2)} GB/s (${disk.note})`;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      dir: { type: 'string', default: path.join(ROOT, 'models', 'k3-medium') },
      layers: { type: 'string', default: '6' },
      gen: { type: 'string', default: '24' },
      fraction: { type: 'string', default: '0.25' },
      threads: { type: 'string', default: '2' },
      json: { type: 'boolean', default: false },
      'no-dspark': { type: 'boolean', default: false },
      'dspark-only': { type: 'boolean', default: false },
      'dspark-dir': { type: 'string', default: path.join(ROOT, 'models', 'k3-real-layers') },
      'dspark-gen': { type: 'string', default: '32' },
    },
  });
  const log = (s: string) => process.stderr.write(s + '\n');
  const main = async () => {
    if (!values['dspark-only']) {
      const r = await specBench({ dir: path.resolve(values.dir!), layers: Number(values.layers), gen: Number(values.gen), fraction: Number(values.fraction), threads: Number(values.threads), log });
      console.log(values.json ? JSON.stringify(r, null, 1) : formatSpecTable(r));
    }
    if (!values['no-dspark']) console.log(await dsparkPart(path.resolve(values['dspark-dir']!), Number(values['dspark-gen']), Number(values.threads), values.json!, log));
  };
  main().catch((e) => {
    console.error(e);
    process.exitCode = 1;
  });
}
