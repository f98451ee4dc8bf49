// DSpark rows of the speculation benchmark (issue 46, acceptance): on a checkpoint with the real K3
// layer and expert sizes (`k3 synth --preset k3-real-layers`), in a child process under a cgroup
// memory cap of a quarter of it (bench/cgroup.ts) with O_DIRECT reads, side by side:
//   - `--spec 0`;
//   - drafts replayed at Block5's published acceptance: the reference run's true next ids, position
//     k spoiled with the conditional probability that gives the unconditional per-position rates
//     0.78 0.58 0.43 0.31 0.22 (3.32 emitted per full sweep; seeded), those conditional rates handed
//     to the width model as the drafter's confidence, the width chosen by the model;
//   - with --fixed-row, the same at a fixed width 5 (--spec-width 5): what the width model changes;
//   - every draft wrong and no confidence: the width model must find out and back off.
// The drafter's own reads are counted per drafted sweep without being made (random weights give
// no drafter worth running): Block5's streamed weights from `k3 plan --drafter` on this checkpoint
// (the published config, taps moved onto its layers) scaled by its layers over real K3's 93, and
// K3's lm_head read again for the drafter's logits where the plan streams it, unscaled. The model
// is planned as `k3 plan --drafter` plans it, the lm_head pinned first (as much of it as fits).
// Run by bench/spec.ts; alone: npm run build && node dist/bench/spec-dspark.js [--fixed-row] [--json].

import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Model } from '../src/model/model.js';
import { greedy } from '../src/generate/greedy.js';
import type { Drafter } from '../src/generate/draft.js';
import { speculative } from '../src/generate/spec.js';
import { RunRecorder } from '../src/generate/report.js';
import { synthCheckpoint } from '../src/synth/synth.js';
import { formatGB } from '../src/util/format.js';
import { memoryCap } from './cgroup.js';
import { drafterPlanEnv } from '../src/store/drafter-plan.js';
import { loadConfig } from '../src/checkpoint/config.js';
import { loadDrafter } from '../src/checkpoint/drafter.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'dist', 'src', 'cli', 'main.js');
/** Block5's unconditional acceptance per draft position (issue 46): 1 + their sum = 3.32 per sweep. */
export const BLOCK5_RATES = [0.78, 0.58, 0.43, 0.31, 0.22];
const REAL_K3_LAYERS = 93;

/** Conditional acceptance per position from unconditional rates: u_k / u_{k-1}. */
export function conditionalRates(u: readonly number[]): number[] {
  return u.map((x, k) => (k === 0 ? x : u[k - 1]! > 0 ? x / u[k - 1]! : 0));
}

/** splitmix-style seeded floats in [0, 1). */
function rng(seed: number): () => number {
  let s = BigInt(seed) & 0xffffffffffffffffn;
  return () => {
    s = (s + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
    let z = s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
    return Number((z ^ (z >> 31n)) >> 11n) / 2 ** 53;
  };
}

/** Proposes the reference's true next ids, position k kept with probability cond[k] once the earlier ones were (else spoiled: never accepted). */
export class RateReplayDrafter implements Drafter {
  lastConfidence: number[] | null = null;
  private readonly next: () => number;
  constructor(
    readonly reference: readonly number[],
    readonly cond: readonly number[],
    seed: number,
    /** Hand the width model `cond` as the drafter's confidence (else none). */
    readonly confident: boolean,
  ) {
    this.next = rng(seed);
  }
  draft(context: readonly number[], max: number): number[] {
    const out = this.reference.slice(context.length, context.length + Math.min(max, this.cond.length));
    let good = true;
    for (let k = 0; k < out.length; k++) {
      good &&= this.next() < this.cond[k]!;
      if (!good) out[k] = out[k] === 0 ? 1 : out[k]! - 1;
    }
    this.lastConfidence = this.confident ? this.cond.slice(0, out.length) : null;
    return out as number[];
  }
}

export interface DsparkRow {
  run: string;
  tokens_per_sweep: number;
  acceptance_by_position: number[];
  width_histogram: number[];
  gb_per_token: number;
  drafter_gb_per_token: number;
  bytes_ratio: number;
  s_per_token: number;
  time_ratio: number;
  same_ids: boolean;
}

export interface ChildInput {
  dir: string;
  budget: number;
  gen: number;
  threads: number;
  drafterBytes: number;
  seed: number;
  /** Also a row at the fixed width 5 (--spec-width 5): what the width model changes. */
  fixedRow: boolean;
  /** Block5's drafterPlanEnv on this checkpoint: what `k3 plan --drafter` pins first and the kernels' width. */
  planning: { pinFirst?: readonly string[]; kernelCols?: number };
}

/** In the capped child: the rows, measured one after the other on one loaded model. */
async function childRows(o: ChildInput): Promise<{ rows: DsparkRow[]; peak_rss_bytes: number }> {
  // as `k3 plan --drafter` plans it: K3's lm_head, which the drafter reads again, pinned first
  const model = await Model.load(o.dir, { budget: o.budget, ctx: 256, threads: o.threads, io: 'direct', ...o.planning });
  const prompt = [11, 22, 33, 44];
  try {
    await model.store.preload();
    const measure = async (run: string, drafter: Drafter | null, fixed: boolean): Promise<{ run: string; ids: number[]; sum: ReturnType<RunRecorder['summary']> }> => {
      const rec = new RunRecorder(model.store);
      const st = model.newState();
      const r = drafter ? await speculative(model, st, prompt, o.gen, { spec: 5, drafter, recorder: rec, fixedWidth: fixed, width: { draftBytes: o.drafterBytes } }) : await greedy(model, st, prompt, o.gen, { recorder: rec });
      model.release(st);
      process.stderr.write(`  ${run}: ${rec.summary().seconds_per_token.toFixed(2)} s/token\n`);
      return { run, ids: r.generated, sum: rec.summary() };
    };
    const base = await measure('spec 0', null, false);
    const reference = [...prompt, ...base.ids];
    const cond = conditionalRates(BLOCK5_RATES);
    const runs = [base, await measure('dspark block5 rates', new RateReplayDrafter(reference, cond, o.seed, true), false)];
    if (o.fixedRow) runs.push(await measure('  fixed width 5', new RateReplayDrafter(reference, cond, o.seed, true), true));
    runs.push(await measure('dspark 0% accepted', new RateReplayDrafter(reference, [0, 0, 0, 0, 0], o.seed, false), false));
    const bytesOf = (s: (typeof runs)[number]['sum']) => s.spec?.bytes_per_emitted_token ?? (s.gb_read_per_token.trunk + s.gb_read_per_token.experts + s.gb_read_per_token.embeddings) * 1e9;
    const b0 = bytesOf(base.sum);
    const rows = runs.map((m): DsparkRow => ({
      run: m.run,
      tokens_per_sweep: m.sum.spec?.tokens_per_sweep ?? 1,
      acceptance_by_position: m.sum.spec?.acceptance_by_position ?? [],
      width_histogram: m.sum.spec?.width_histogram ?? [],
      gb_per_token: bytesOf(m.sum) / 1e9,
      drafter_gb_per_token: (m.sum.spec?.drafter_bytes_per_emitted_token ?? 0) / 1e9,
      bytes_ratio: bytesOf(m.sum) / b0,
      s_per_token: m.sum.seconds_per_token,
      time_ratio: m.sum.seconds_per_token / base.sum.seconds_per_token,
      same_ids: JSON.stringify(m.ids) === JSON.stringify(base.ids),
    }));
    return { rows, peak_rss_bytes: process.resourceUsage().maxRSS * 1024 };
  } finally {
    await model.close();
  }
}

export interface DsparkBenchResult {
  checkpoint_bytes: number;
  cap_bytes: number;
  cgroup: 'v1' | 'v2' | null;
  cgroup_peak_bytes: number;
  budget_bytes: number;
  /** Per drafted sweep: Block5's streamed weights (real), scaled, and K3's lm_head read again. */
  drafter_real_bytes: number;
  drafter_scaled_bytes: number;
  lm_head_again_bytes: number;
  /** The plan's streamed trunk per sweep: as the rows run (lm_head first), and in forward order. */
  streamed_bytes: number;
  streamed_forward_bytes: number;
  peak_rss_bytes: number;
  rows: DsparkRow[];
}

function targetLayers(dir: string): number {
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')) as { text_config?: { num_hidden_layers: number }; num_hidden_layers?: number };
  return c.text_config?.num_hidden_layers ?? c.num_hidden_layers!;
}

/** What `k3 plan --drafter` says one sweep of Block5 reads on `dir` at `budget`, and how it plans the target. */
function block5Sweep(dir: string, budget: number): { drafter: number; lmHeadAgain: number; kv: number; work: number; planning: ChildInput['planning'] } {
  const dd = path.join(path.dirname(dir), 'block5-config-for-' + path.basename(dir));
  if (!fs.existsSync(path.join(dd, 'config.json'))) {
    const real = path.join(path.dirname(dir), 'block5-real-config');
    const s = spawnSync(process.execPath, [CLI, 'synth', '--drafter', 'inferact-block5', '--preset', 'real', '--config-only', '--out', real], { encoding: 'utf8' });
    if (s.status !== 0) throw new Error(`k3 synth --drafter: ${s.stderr}`);
    const c = JSON.parse(fs.readFileSync(path.join(real, 'config.json'), 'utf8')) as Record<string, unknown>;
    const L = targetLayers(dir);
    // the published config with its 3 taps moved onto this checkpoint's last layers
    Object.assign(c, { target_num_hidden_layers: L, target_layer_ids: [L - 3, L - 2, L - 1].map((x) => Math.max(0, x)) });
    fs.mkdirSync(dd, { recursive: true });
    fs.writeFileSync(path.join(dd, 'config.json'), JSON.stringify(c, null, 1));
  }
  const p = spawnSync(process.execPath, [CLI, 'plan', dir, '--drafter', dd, '--memory', String(budget), '--ctx', '256', '--accept-len', '3.32', '--json'], { encoding: 'utf8' });
  if (p.status !== 0) throw new Error(`k3 plan --drafter: ${p.stderr}`);
  const d = (JSON.parse(p.stdout) as { drafter: { sweep: { drafter_bytes: number; lm_head_again_bytes: number }; kv_bytes: number; work_bytes: number } }).drafter;
  const { pinFirst, kernelCols } = drafterPlanEnv({}, loadConfig(dir), loadDrafter(dd));
  return { drafter: d.sweep.drafter_bytes, lmHeadAgain: d.sweep.lm_head_again_bytes, kv: d.kv_bytes, work: d.work_bytes, planning: { pinFirst, kernelCols } };
}

export async function dsparkBench(o: { dir: string; gen: number; threads: number; fraction: number; seed?: number; fixedRow?: boolean; log?: (s: string) => void }): Promise<DsparkBenchResult> {
  const log = o.log ?? (() => {});
  const s = await synthCheckpoint({ arch: 'k3', preset: 'k3-real-layers', out: o.dir });
  log(`checkpoint ${o.dir}: ${formatGB(s.bytes)}${s.skipped ? ' (already there)' : ''}`);
  const cap = Math.floor(s.bytes * o.fraction);
  const sweep = block5Sweep(o.dir, cap);
  // the cap holds the engine and the drafter's own memory (its KV cache and working area)
  const budget = cap - sweep.kv - sweep.work;
  const layers = targetLayers(o.dir);
  const scaled = Math.round((sweep.drafter * layers) / REAL_K3_LAYERS);
  const drafterBytes = scaled + sweep.lmHeadAgain;
  log(`cap ${formatGB(cap)}, engine budget ${formatGB(budget)}; drafter reads per drafted sweep ${formatGB(drafterBytes)} (Block5 ${formatGB(sweep.drafter)} x ${layers}/${REAL_K3_LAYERS} + lm_head again ${formatGB(sweep.lmHeadAgain)})`);
  // the rows share one model planned with the lm_head first; `--spec 0` in forward order streams as much, up to a piece
  const streamed = (planning: ChildInput['planning']) => Model.plan(o.dir, { budget, ctx: 256, threads: o.threads, io: 'direct', ...planning }).streamedBytes;
  const streamedForward = streamed({});
  const streamedHeadFirst = streamed(sweep.planning);
  const input: ChildInput = { dir: o.dir, budget, gen: o.gen, threads: o.threads, drafterBytes, seed: o.seed ?? 1, fixedRow: o.fixedRow ?? false, planning: sweep.planning };
  const cg = memoryCap(cap, 'dspark');
  if (!cg) log('  (no memory cgroup can be made here: the rows run with the engine budget only)');
  const cmd = [process.execPath, fileURLToPath(import.meta.url), '--child', JSON.stringify(input)];
  const p = spawnSync(cg ? cg.wrap(cmd)[0]! : cmd[0]!, (cg ? cg.wrap(cmd) : cmd).slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
  const peak = cg ? cg.finish() : 0;
  if (p.status !== 0) throw new Error(`dspark rows: exit ${p.status} signal ${p.signal}`);
  const r = JSON.parse(p.stdout) as { rows: DsparkRow[]; peak_rss_bytes: number };
  return {
    checkpoint_bytes: s.bytes,
    cap_bytes: cap,
    cgroup: cg?.kind ?? null,
    cgroup_peak_bytes: peak,
    budget_bytes: budget,
    drafter_real_bytes: sweep.drafter,
    drafter_scaled_bytes: scaled,
    lm_head_again_bytes: sweep.lmHeadAgain,
    streamed_bytes: streamedHeadFirst,
    streamed_forward_bytes: streamedForward,
    peak_rss_bytes: r.peak_rss_bytes,
    rows: r.rows,
  };
}

export function formatDsparkTable(r: DsparkBenchResult): string {
  const lines = [
    `checkpoint ${formatGB(r.checkpoint_bytes)}; cgroup ${r.cgroup ?? 'none'} cap ${formatGB(r.cap_bytes)} (peak ${formatGB(r.cgroup_peak_bytes)}), engine budget ${formatGB(r.budget_bytes)}, peak RSS ${formatGB(r.peak_rss_bytes)}`,
    `drafter reads per drafted sweep: ${formatGB(r.drafter_scaled_bytes)} Block5 weights (${formatGB(r.drafter_real_bytes)} real, scaled by layers) + ${formatGB(r.lm_head_again_bytes)} lm_head again`,
    `streamed trunk per sweep: ${formatGB(r.streamed_bytes)} with the lm_head pinned first (every row), ${formatGB(r.streamed_forward_bytes)} in forward order`,
    'run                  tok/sweep  accepted by position      widths (w:sweeps)   GB/token  drafter  x plain  s/token  x plain  same ids',
  ];
  for (const x of r.rows) {
    const pos = x.acceptance_by_position.map((a) => a.toFixed(2)).join(' ');
    const widths = x.width_histogram.map((n, w) => (n ? `${w}:${n}` : '')).filter(Boolean).join(' ');
    lines.push(`${x.run.padEnd(20)} ${x.tokens_per_sweep.toFixed(2).padStart(9)}  ${(pos || '-').padEnd(24)}  ${(widths || '-').padEnd(18)}  ${x.gb_per_token.toFixed(3).padStart(8)}  ${x.drafter_gb_per_token.toFixed(3).padStart(7)}  ${x.bytes_ratio.toFixed(2).padStart(7)}  ${x.s_per_token.toFixed(2).padStart(7)}  ${x.time_ratio.toFixed(2).padStart(7)}  ${String(x.same_ids).padStart(8)}`);
  }
  return lines.join('\n');
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--child');
  const alone = () => dsparkBench({ dir: path.join(ROOT, 'models', 'k3-real-layers'), gen: 32, threads: 2, fraction: 0.25, fixedRow: process.argv.includes('--fixed-row'), log: (m) => process.stderr.write(m + '\n') });
  const job = i >= 0 ? childRows(JSON.parse(process.argv[i + 1]!) as ChildInput).then((r) => JSON.stringify(r)) : alone().then((r) => (process.argv.includes('--json') ? JSON.stringify(r, null, 1) : formatDsparkTable(r)));
  job
    .then((out) => console.log(out))
    .catch((e) => {
      console.error(e);
      process.exitCode = 1;
    });
}
