// Replays the real Kimi K3 routed-expert trace through the expert cache (src/store/expert-cache.ts;
// the policies other than the shipped one are in bench/cache-policies.ts) at the slot counts of
// each memory preset and a few small capacities, and prints per capacity the
// hit rate of the shipped policy, of plain LRU, LFU and the other policies tried, and of Belady's
// optimum (the offline upper bound).
//
// Trace: ../shared/realdata/k3-expert-trace.bin, little-endian int32 pairs (layer, expert), 100,096
// requests of a real 93-layer K3 run. It comes from the public C99 engine kimi-k3-in-c
// (Apache-2.0 licence), whose authors recorded it from the released Kimi K3 checkpoint. It was
// recorded with full recompute at every step (8 steps of 5..12 tokens: each step re-routes the
// whole prefix), which overstates reuse; the "decode" view below strips the recompute (the prompt
// once, then one new token per step) and is replayed too.
//
// A hit is a distinct (layer, expert) of a layer step that was resident when the step began
// (duplicates inside a step never cost a read, whatever the policy).
//
// Usage: node dist/bench/cache-replay.js [--json] [--trace PATH] [--view recompute|decode|both]

import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CyclePolicy, K3_EXPERT_BYTES, expertKey, slotsForBytes, type EvictionPolicy } from '../src/store/expert-cache.js';
import { BeladyPolicy, LfuPolicy, LruPolicy, SlruPolicy, groupSteps, replay, type ReplayResult, type TraceStep } from './cache-policies.js';

const TRACE_REL = '../shared/realdata/k3-expert-trace.bin';
const GiB = 1024 ** 3;

/** K3: layer 0 is dense, MoE layers 1..92; the layer cycle is 93 long. */
export const K3_LAYERS = 93;

/** Expert memory of each preset (bytes of routed experts in the cache, not the whole process). */
export const PRESET_EXPERT_BYTES: Record<string, number> = {
  laptop: 4 * GiB,
  desktop: 16 * GiB,
  workstation: 64 * GiB,
  server: 256 * GiB,
};

/** The trace file: --trace, else ../shared/realdata's (from the repo root or next to dist/). */
export function traceFile(explicit?: string): string {
  const candidates = explicit
    ? [explicit]
    : [path.resolve(TRACE_REL), fileURLToPath(new URL(`../../${TRACE_REL}`, import.meta.url))];
  for (const c of candidates) if (fs.existsSync(c)) return c;
  throw new Error(`expert trace not found (tried ${candidates.join(', ')}); run from the repo root or pass --trace`);
}

export function loadTrace(file = traceFile()): Int32Array {
  const b = fs.readFileSync(file);
  if (b.length % 8 !== 0) throw new Error(`${file}: ${b.length} bytes is not a whole number of int32 pairs`);
  const out = new Int32Array(b.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = b.readInt32LE(4 * i);
  return out;
}

/**
 * Strip the full recompute: the trace's step k re-routes the whole prefix of 5 + k tokens, so the
 * step of layer l in pass k repeats pass k-1's requests for that layer, then adds 16 new ones.
 * Keep pass 0 (the prompt) and, after it, only the new token's requests. Returns undefined when the
 * trace does not have that shape.
 */
export function decodeView(steps: readonly TraceStep[]): TraceStep[] | undefined {
  const prev = new Map<number, number[]>();
  const out: TraceStep[] = [];
  for (const s of steps) {
    const p = prev.get(s.layer);
    if (!p) out.push({ layer: s.layer, experts: s.experts.slice() });
    else {
      if (s.experts.length <= p.length || p.some((e, i) => s.experts[i] !== e)) return undefined;
      out.push({ layer: s.layer, experts: s.experts.slice(p.length) });
    }
    prev.set(s.layer, s.experts);
  }
  return out;
}

/** The policies compared, shipped one first; Belady is added separately. */
export function policies(slots: number): EvictionPolicy[] {
  return [
    new CyclePolicy(K3_LAYERS),
    new LruPolicy(),
    new LfuPolicy(),
    new LfuPolicy(Infinity),
    new SlruPolicy(slots),
    new CyclePolicy(K3_LAYERS, { distanceOnly: true, name: 'layer-mru' }),
  ];
}

export interface Capacity {
  label: string;
  slots: number;
  bytes: number;
}

export function capacities(steps: readonly TraceStep[]): Capacity[] {
  const distinct = new Set<number>();
  for (const s of steps) for (const e of s.experts) distinct.add(expertKey(s.layer, e));
  const out: Capacity[] = [16, 64, 256, 1024].map((n) => ({ label: `${n} slots`, slots: n, bytes: n * K3_EXPERT_BYTES }));
  for (const [name, bytes] of Object.entries(PRESET_EXPERT_BYTES)) out.push({ label: name, slots: slotsForBytes(bytes), bytes });
  out.push({ label: 'max', slots: distinct.size, bytes: distinct.size * K3_EXPERT_BYTES });
  return out.sort((a, b) => a.slots - b.slots);
}

export interface Row extends Capacity {
  results: ReplayResult[]; // policies(...) order, then belady
}

export function run(steps: readonly TraceStep[]): Row[] {
  return capacities(steps).map((c) => ({
    ...c,
    results: [...policies(c.slots), new BeladyPolicy(steps)].map((p) => replay(steps, c.slots, p)),
  }));
}

function pct(x: number): string {
  return `${(100 * x).toFixed(2)}%`;
}

function table(title: string, steps: readonly TraceStep[], rows: Row[]): string {
  const names = rows[0]!.results.map((r) => r.policy);
  const requests = steps.reduce((a, s) => a + s.experts.length, 0);
  const lines = [
    `${title}: ${steps.length} layer steps, ${requests} requests, ${rows[0]!.results[0]!.hits + rows[0]!.results[0]!.misses} distinct-per-step requests (hit-rate denominator)`,
    ['capacity', 'slots', 'GiB', ...names.map((n, i) => (i === 0 ? `${n}*` : n)), 'shipped/belady'].map((h, i) => (i === 0 ? h.padEnd(12) : h.padStart(i === 1 ? 6 : 11))).join(' '),
  ];
  for (const r of rows) {
    const shipped = r.results[0]!.hitRate, best = r.results[r.results.length - 1]!.hitRate;
    lines.push(
      [
        r.label.padEnd(12),
        String(r.slots).padStart(6),
        (r.bytes / GiB).toFixed(1).padStart(11),
        ...r.results.map((x) => pct(x.hitRate).padStart(11)),
        (best > 0 ? (shipped / best).toFixed(3) : '-').padStart(11),
      ].join(' '),
    );
  }
  return lines.join('\n');
}

function main(argv: string[]): void {
  const json = argv.includes('--json');
  const ti = argv.indexOf('--trace');
  const vi = argv.indexOf('--view');
  const view = vi >= 0 ? argv[vi + 1] : 'both';
  const file = traceFile(ti >= 0 ? argv[ti + 1] : undefined);
  const t0 = performance.now();
  const steps = groupSteps(loadTrace(file));
  const views: [string, TraceStep[]][] = [];
  if (view === 'recompute' || view === 'both') views.push(['recompute', steps]);
  if (view === 'decode' || view === 'both') {
    const d = decodeView(steps);
    if (d) views.push(['decode', d]);
    else if (view === 'decode') throw new Error('trace is not a full-recompute trace; no decode view');
  }
  const out = views.map(([name, s]) => ({ view: name, steps: s.length, requests: s.reduce((a, x) => a + x.experts.length, 0), rows: run(s) }));
  const seconds = (performance.now() - t0) / 1000;
  if (json) {
    process.stdout.write(
      JSON.stringify(
        {
          trace: path.relative(process.cwd(), file),
          expert_bytes: K3_EXPERT_BYTES,
          shipped: out[0]?.rows[0]?.results[0]?.policy,
          seconds,
          views: out.map((v) => ({
            view: v.view,
            steps: v.steps,
            requests: v.requests,
            capacities: v.rows.map((r) => ({
              label: r.label,
              slots: r.slots,
              bytes: r.bytes,
              hit_rate: Object.fromEntries(r.results.map((x) => [x.policy, x.hitRate])),
              reads: Object.fromEntries(r.results.map((x) => [x.policy, x.misses])),
              shipped_over_belady: r.results[r.results.length - 1]!.hitRate > 0 ? r.results[0]!.hitRate / r.results[r.results.length - 1]!.hitRate : null,
            })),
          })),
        },
        null,
        2,
      ) + '\n',
    );
    return;
  }
  console.log(`expert cache replay: ${path.relative(process.cwd(), file) || file}; ${K3_EXPERT_BYTES} bytes per expert; presets in GiB of experts; * = shipped`);
  for (const v of out) {
    const s = views.find(([n]) => n === v.view)![1];
    console.log('\n' + table(v.view === 'recompute' ? 'recompute (trace as recorded)' : 'decode (recompute stripped: prompt once, then 1 token/step)', s, v.rows));
  }
  console.log(`\n${seconds.toFixed(1)} s`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) main(process.argv.slice(2));
