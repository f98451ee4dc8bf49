// Streaming benchmark (issues 3, 9): a K3-shaped checkpoint with the real per-layer sizes (hidden
// 7168, 96 KDA heads of 128, latent MoE 3584, MXFP4 experts of 17.55 MB; few layers and experts so
// it fits on this disk), run inside a cgroup memory cap of about a quarter of its size with direct
// I/O, so neither the page cache nor anything else can help. In the same run it measures:
//   - the disk's bandwidth, with O_DIRECT reads (the engine's own reader, several in flight);
//   - the resident compute time per token (everything in memory, nothing read);
//   - streamed s/token at the cap, next to the disk floor (bytes read / bandwidth) and the
//     resident compute time: the target is <= 1.15 x max(floor, compute);
//   - the same with the trunk pinned and the experts streamed through a cache smaller than them
//     (the regime of 128 GB+ machines on real K3): expert reads overlapped, lookahead hit rate;
//   - GB read per emitted token, peak RSS next to the cap, the share of read time hidden
//     behind compute (io_overlap).
//
//   npm run build && node dist/bench/stream.js [--dir models/k3-real-layers] [--layers 4]
//       [--experts 32] [--gen 4] [--fraction 0.25] [--threads 2] [--keep] [--packed] [--json]
//
// --packed runs on a `k3 pack` copy (every piece 4 KiB-aligned, so O_DIRECT reads land in place,
// with no bounce copy); it needs the checkpoint's size again on disk.
//
// Needs root for the cgroup (v1 memory controller or v2 memory.max) and for dropping the page
// cache; without them it says so and the numbers are marked. Benchmarks are not tests: nothing
// here gates CI. The checkpoint is deleted afterwards unless --keep.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { synthCheckpoint } from '../src/synth/synth.js';
import { Model } from '../src/model/model.js';
import { indexCheckpointDir } from '../src/checkpoint/dir.js';
import type { RunSummary } from '../src/generate/report.js';
import { formatGB } from '../src/util/format.js';
import { directBandwidth } from './disk.js';
import { formatSpecTable, specBench } from './spec.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'dist', 'src', 'cli', 'main.js');

const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: path.join(ROOT, 'models', 'k3-real-layers') },
    layers: { type: 'string', default: '4' },
    experts: { type: 'string', default: '32' },
    gen: { type: 'string', default: '4' },
    fraction: { type: 'string', default: '0.25' },
    threads: { type: 'string', default: '2' },
    keep: { type: 'boolean', default: false },
    packed: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    'skip-spec': { type: 'boolean', default: false },
  },
});

const GB = 1e9;
const log = (s: string) => process.stderr.write(s + '\n');

/** Drop the page cache (needs root; false when not permitted). */
function dropCaches(): boolean {
  try {
    fs.writeFileSync('/proc/sys/vm/drop_caches', '3');
    return true;
  } catch {
    return false;
  }
}

/**
 * Disk bandwidth with the engine's O_DIRECT reader: 32 MiB requests over the checkpoint's files,
 * eight outstanding at all times (the reader keeps four 4 MiB reads in flight, as in a run).
 */
async function diskBandwidth(dir: string): Promise<number> {
  const files = [...new Set([...indexCheckpointDir(dir).values()].map((e) => e.file))].sort();
  return (await directBandwidth(files, 3 * GB)).gbps;
}

interface Cap {
  kind: 'v1' | 'v2';
  wrap: (cmd: string[]) => string[];
  /** Peak memory the cgroup saw (page cache included), then remove it. */
  finish: () => number;
}

/** A memory cgroup limited to `limit` bytes (v2 memory.max, or v1 memory.limit_in_bytes); null where none can be made. */
function memoryCgroup(limit: number, tag: string): Cap | null {
  const v2 = '/sys/fs/cgroup';
  const tryMake = (dir: string, files: Record<string, string>): boolean => {
    try {
      fs.mkdirSync(dir);
      for (const [f, v] of Object.entries(files)) fs.writeFileSync(path.join(dir, f), v);
      return true;
    } catch {
      try {
        fs.rmdirSync(dir);
      } catch {
        /* not made */
      }
      return false;
    }
  };
  const wrapIn = (dir: string) => (cmd: string[]) => ['/bin/sh', '-c', `echo $$ > ${dir}/cgroup.procs && exec "$0" "$@"`, ...cmd];
  const readNum = (f: string): number => {
    try {
      return Number(fs.readFileSync(f, 'utf8').trim());
    } catch {
      return 0;
    }
  };
  if (fs.existsSync(path.join(v2, 'cgroup.controllers')) && fs.readFileSync(path.join(v2, 'cgroup.controllers'), 'utf8').includes('memory')) {
    const dir = path.join(v2, `k3bench-${process.pid}-${tag}`);
    if (tryMake(dir, { 'memory.max': String(limit), 'memory.swap.max': '0' }) || tryMake(dir, { 'memory.max': String(limit) })) {
      return { kind: 'v2', wrap: wrapIn(dir), finish: () => rm(dir, readNum(path.join(dir, 'memory.peak'))) };
    }
  }
  const v1 = path.join(v2, 'memory');
  if (fs.existsSync(v1)) {
    const dir = path.join(v1, `k3bench-${process.pid}-${tag}`);
    if (tryMake(dir, { 'memory.limit_in_bytes': String(limit) })) {
      try {
        fs.writeFileSync(path.join(dir, 'memory.memsw.limit_in_bytes'), String(limit)); // no swap either, where accounted
      } catch {
        /* swap accounting off */
      }
      return { kind: 'v1', wrap: wrapIn(dir), finish: () => rm(dir, readNum(path.join(dir, 'memory.max_usage_in_bytes'))) };
    }
  }
  return null;
}

function rm(dir: string, v: number): number {
  try {
    fs.rmdirSync(dir);
  } catch {
    /* best effort */
  }
  return v;
}

/** What `k3 run --json` prints that this bench reads (the run report's fields). */
type RunJson = Pick<RunSummary, 'seconds_per_token' | 'gb_read_per_token' | 'io_wait_share' | 'io_overlap' | 'prefetch_hit_rate' | 'peak_rss_bytes' | 'budget_bytes'> & { generated_ids: number[] };

interface Row {
  run: string;
  ok: boolean;
  error?: string;
  cap: number | null;
  cgroup: string | null;
  cgroupPeak: number;
  r: RunJson | null;
}

function run(name: string, dir: string, budget: number, gen: number, io: string, cap: number | null, extra: string[] = []): Row {
  const cmd = [process.execPath, CLI, 'run', dir, '--ids', '11,22,33,44', '--gen', String(gen), '--ctx', '256', '--chunk', '8', '--json', '--memory', String(budget), '--io', io, '--threads', values.threads!, ...extra];
  const cg = cap !== null ? memoryCgroup(cap, name.trim().replace(/\W+/g, '-')) : null;
  if (cap !== null && !cg) log(`  (no memory cgroup can be made here: ${name} runs without the cap)`);
  dropCaches(); // every run starts from the disk
  const full = cg ? cg.wrap(cmd) : cmd;
  const p = spawnSync(full[0]!, full.slice(1), { encoding: 'utf8', maxBuffer: 1 << 26 });
  const peak = cg ? cg.finish() : 0;
  if (p.status !== 0) return { run: name, ok: false, error: (p.stderr || `exit ${p.status} signal ${p.signal}`).trim(), cap, cgroup: cg?.kind ?? null, cgroupPeak: peak, r: null };
  return { run: name, ok: true, cap, cgroup: cg?.kind ?? null, cgroupPeak: peak, r: JSON.parse(p.stdout) as RunJson };
}

async function main(): Promise<void> {
  const src = path.resolve(values.dir!);
  let dir = src;
  const gen = Number(values.gen);
  log(`checkpoint: ${dir}`);
  const s = await synthCheckpoint({ arch: 'k3', preset: 'k3-real-layers', out: dir, layers: Number(values.layers), experts: Number(values.experts), shards: 4, force: true });
  const size = s.bytes;
  log(`  ${formatGB(size)} ${s.skipped ? '(already there)' : `written in ${s.seconds.toFixed(0)} s`}`);
  if (values.packed) {
    dir = `${src}-packed`;
    if (!fs.existsSync(path.join(dir, 'config.json'))) {
      log(`packing into ${dir} …`);
      const p = spawnSync(process.execPath, [CLI, 'pack', src, dir], { stdio: ['ignore', 'ignore', 'inherit'] });
      if (p.status !== 0) throw new Error(`k3 pack failed (exit ${p.status})`);
    }
  }
  const cold = dropCaches();
  const plan0 = Model.plan(dir, { budget: 0, ctx: 256, chunk: 8 });
  const cap = Math.max(plan0.floorBytes, Math.floor(size * Number(values.fraction)));
  const bw0 = await diskBandwidth(dir);
  log(`disk: ${bw0.toFixed(2)} GB/s with O_DIRECT reads (32 MiB requests, 8 outstanding)`);
  // Trunk pinned, experts streamed through a cache of a quarter of them (the big-machine regime).
  const expertsAll = plan0.expertsTotal * plan0.expertBytes;
  const pinnedBudget = plan0.floorBytes + plan0.trunkBytes + Math.floor(expertsAll / 4);
  const rows: Row[] = [];
  log('resident (everything in memory, no cap) …');
  rows.push(run('resident', dir, Math.ceil(size * 1.2 + plan0.floorBytes), gen, 'direct', null));
  log(`streamed at a cap of ${formatGB(cap)} (${((cap / size) * 100).toFixed(0)}% of the checkpoint), --io direct …`);
  rows.push(run('streamed', dir, cap, gen, 'direct', cap));
  log('streamed at the same cap, --io buffered …');
  rows.push(run('streamed-buffered', dir, cap, gen, 'buffered', cap));
  log(`trunk pinned, experts cached at a quarter (${formatGB(pinnedBudget)} cap), --io direct …`);
  rows.push(run('experts-streamed', dir, pinnedBudget, gen, 'direct', pinnedBudget));
  log('the same without lookahead …');
  rows.push(run('  no lookahead', dir, pinnedBudget, gen, 'direct', pinnedBudget, ['--no-lookahead']));
  if (dir !== src) {
    // A packed directory's records carry sha256: checked on first read by default (the streamed
    // row), and on every read with --verify-reads.
    log(`streamed at ${formatGB(cap)}, --verify-reads …`);
    rows.push(run('streamed-verify', dir, cap, gen, 'direct', cap, ['--verify-reads']));
  }
  for (const r of rows) if (!r.ok) log(`${r.run} FAILED: ${r.error}`);
  // Measured again after the runs: on a shared disk one measurement can be far off; the floor uses the better one.
  const bw1 = await diskBandwidth(dir);
  log(`disk again: ${bw1.toFixed(2)} GB/s`);
  const bw = Math.max(bw0, bw1);
  const resident = rows[0]!.r;
  const compute = resident?.seconds_per_token ?? NaN;
  const table = rows.map((row) => {
    const r = row.r;
    const g = r ? r.gb_read_per_token.trunk + r.gb_read_per_token.experts + r.gb_read_per_token.embeddings : NaN;
    const floor = g / bw;
    const spt = r?.seconds_per_token ?? NaN;
    return {
      run: row.run,
      ok: row.ok,
      cap_gb: row.cap === null ? null : row.cap / GB,
      cgroup: row.cgroup,
      s_per_token: spt,
      disk_floor_s: floor,
      resident_compute_s: compute,
      vs_bound: spt / Math.max(floor, compute),
      gb_read_per_token: g,
      gb_trunk_per_token: r?.gb_read_per_token.trunk ?? NaN,
      gb_experts_per_token: r?.gb_read_per_token.experts ?? NaN,
      peak_rss_gb: r ? r.peak_rss_bytes / GB : NaN,
      rss_within_cap: row.cap === null || (r !== null && r.peak_rss_bytes <= row.cap),
      cgroup_peak_gb: row.cgroupPeak / GB,
      io_overlap: r?.io_overlap ?? null,
      prefetch_hit_rate: r?.prefetch_hit_rate ?? null,
      ids: r?.generated_ids ?? [],
    };
  });
  const same = table.filter((t) => t.ok).every((t) => JSON.stringify(t.ids) === JSON.stringify(table[0]!.ids));
  if (values.json) {
    const disk = { disk_gbps_direct: bw, disk_gbps_before: bw0, disk_gbps_after: bw1, page_cache_dropped: cold };
    console.log(JSON.stringify({ checkpoint_gb: size / GB, packed: dir !== src, floor_gb: plan0.floorBytes / GB, ...disk, threads: Number(values.threads), rows: table, same_ids: same }, null, 1));
  } else {
    console.log(`\ncheckpoint ${formatGB(size)}${dir !== src ? ' (k3 pack copy: pieces 4 KiB-aligned)' : ''} (trunk ${formatGB(plan0.trunkBytes)}, experts ${formatGB(expertsAll)}), floor ${formatGB(plan0.floorBytes)}, disk ${bw.toFixed(2)} GB/s (O_DIRECT; before the runs ${bw0.toFixed(2)}, after ${bw1.toFixed(2)}), ${values.threads} threads${cold ? '' : ', page cache NOT dropped (not root)'}`);
    console.log('run                cap GB  cgroup  s/token  disk floor s  resident s  x max(floor,compute)  GB read/token (trunk+experts)  peak RSS GB  <=cap  io_overlap  guess hits');
    const f = (v: number, d = 2, w = 7) => (Number.isFinite(v) ? v.toFixed(d) : '-').padStart(w);
    const pct = (v: number | null) => (v === null ? '-' : `${(v * 100).toFixed(0)}%`).padStart(10);
    for (const t of table) {
      console.log(`${t.run.padEnd(18)} ${(t.cap_gb === null ? '-' : t.cap_gb.toFixed(2)).padStart(6)}  ${(t.cgroup ?? '-').padStart(6)}  ${f(t.s_per_token)}  ${f(t.disk_floor_s, 2, 12)}  ${f(t.resident_compute_s, 2, 10)}  ${f(t.vs_bound, 2, 20)}  ${`${f(t.gb_read_per_token, 3, 6)} (${f(t.gb_trunk_per_token, 3, 5)}+${f(t.gb_experts_per_token, 3, 5)})`.padStart(29)}  ${f(t.peak_rss_gb, 2, 11)}  ${String(t.rss_within_cap).padStart(5)}  ${pct(t.io_overlap)}  ${pct(t.prefetch_hit_rate)}`);
    }
    console.log(`generated ids identical across runs: ${same}`);
    const plain = table.find((t) => t.run === 'streamed');
    const every = table.find((t) => t.run === 'streamed-verify');
    if (plain && every) {
      const extra = every.s_per_token - plain.s_per_token;
      console.log(`verification: sha256 on first read (default, the streamed row) ${plain.s_per_token.toFixed(2)} s/token; on every read (--verify-reads) ${every.s_per_token.toFixed(2)} s/token: +${extra.toFixed(2)} s/token, ${((extra / plain.disk_floor_s) * 100).toFixed(0)}% of the read time (disk floor)`);
    } else {
      console.log('verification: run with --packed to measure it (a packed directory carries a sha256 per record)');
    }
  }
  if (!values.keep && !s.skipped) fs.rmSync(src, { recursive: true, force: true });
  if (!values.keep && dir !== src) fs.rmSync(dir, { recursive: true, force: true });
  if (!values['skip-spec']) {
    // Speculation and several sequences per forward (bench/spec.ts): trunk bytes per emitted
    // token with --spec 4 at set acceptance rates, and forwardBatch(4), at a quarter budget.
    const specDir = path.join(ROOT, 'models', 'k3-medium-spec');
    log('speculative decoding and forwardBatch (bench/spec.ts) on k3-medium at a quarter of its size …');
    const r = await specBench({ dir: specDir, layers: 6, gen: 24, fraction: 0.25, threads: Number(values.threads), log });
    console.log(values.json ? JSON.stringify({ spec: r }, null, 1) : `\n${formatSpecTable(r)}`);
    if (!values.keep) fs.rmSync(specDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
