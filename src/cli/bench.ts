import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, ioMode, speedNotes } from './common.js';
import { q7MatmulRate, secondsPerMatmul, syntheticWeight } from '../api/estimate.js';
import { KernelProfile, Model, PROFILE_BUCKETS, census, type ProfileBucket, type WeightFormat } from '../api/diagnostics.js';
import { UserError } from '../util/errors.js';
import { thpMode } from '../util/hugepages.js';
import { machineInfo, machineLine } from '../util/machine.js';

// llama-bench style: prompt processing (ppN: one forward of N tokens from an empty context) and
// text generation (tgN: N one-token forwards after a one-token prompt), tokens/s as mean ± sd
// over repetitions, one row per thread count; then kernel rows (GMAC/s and GB/s of weights).

interface Row {
  test: string;
  threads: number;
  /** With --fast-experts: which path the MXFP4 expert products took. */
  experts?: 'exact' | 'fast';
  /** With --fast: which path the row took (exact, fast experts only, or --fast: trunk and experts). */
  path?: BenchPath;
  tokens_per_second: { mean: number; sd: number; runs: number[] };
}

/** The paths a bench row can take: the exact one, --fast-experts (toggled on one model), --fast (a model of its own: its trunk is requantized at load). */
type BenchPath = 'exact' | 'fast-experts' | 'fast';

interface Cost {
  prompt: string;
  positions: number;
  mean_kl: number;
  top1_agreement: number;
}

function stats(xs: number[]): { mean: number; sd: number } {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = xs.length > 1 ? Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1)) : 0;
  return { mean, sd };
}

/** Per-token breakdown of decode or of a prompt (--profile): milliseconds per bucket, the rest is JavaScript. */
interface ProfileRow {
  /** tgN: per decoded token; ppP: per prompt token (one forward of P tokens, divided by P). */
  test: string;
  threads: number;
  /** With --fast: the exact model's profile or the --fast one's. */
  path?: 'exact' | 'fast';
  tokens: number;
  ms_per_token: number;
  ms: Record<ProfileBucket | 'js', number>;
  calls_per_token: number;
  pooled_per_token: number;
  /** Kernel time that ran on the calling thread alone while workers idled (part of the buckets). */
  solo_ms: number;
}

/** Deterministic pseudo-random ids (the numbers do not matter for speed). */
function ids(n: number, vocab: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % vocab;
  });
}

/** One forward of `prompt` from an empty sequence, whose state is then given back for reuse. */
async function run1(model: Model, prompt: number[], chunk: number, rows: 'last' | 'all' = 'last'): Promise<Float32Array> {
  const st = model.newState();
  try {
    return await model.forward(st, prompt, rows, chunk);
  } finally {
    model.release(st);
  }
}

export const command: Command = {
  summary: 'llama-bench style speed table: pp/tg tokens/s per thread count, kernel GMAC/s',
  help: `usage: k3 bench MODEL [-p 64] [-n 32] [-r 5] [--threads-list 1,2] [--json] [options]

Loads the model once per thread count (weights resident when the budget allows) and measures
prompt processing (ppP: one forward of P tokens, empty context) and text generation (tgN: N
one-token forwards), tokens/s as mean ± sd over R repetitions; then one kernel row per weight
format of the model: GMAC/s and GB/s of weights for a matrix of its shape, T = 1.

  -p N              prompt tokens (default 64; 0 skips pp)
  -n N              generated tokens (default 32; 0 skips tg)
  -r N              repetitions (default 5)
  --profile         also a per-token breakdown of the prompt and of decode at each thread count: trunk matmul
                    kernels (with the fused steps of a chained block: a KDA layer, an MLA token, a
                    block's input), expert kernels, fused pieces dispatched alone, dispatch (JS
                    around kernel calls), waits for workers, and the rest (JavaScript: routing,
                    building the chains, what runs step by step); timed runs apart from the t/s rows
  --threads-list L  comma-separated thread counts (default 1,2 capped at the cores)
  --json            one JSON object

With --fast-experts, every row is measured on both paths (experts exact, then fast), and the cost
of the fast path is reported: mean KL(exact || fast) of the next-token distributions (softmax in
double) over the positions of a prompt (the model directory's tokens.json "short" prompt when it
has one, as the golden fixtures do; else 64 fixed pseudo-random ids), and top-1 agreement.
With --fast, the rows are measured on the exact path (and --fast-experts, if given) and on a second
load of the model with --fast, whose bf16 trunk is REQUANTIZED to 7-bit blocks (not the stored
weights); its cost against the exact path is reported the same way.
${MODEL_HELP}`,
  async run(args) {
    const o = benchOptions(args);
    const out: Results = { rows: [], profRows: [], kernelRows: [], info: null, cost: null, fastCost: null, exactLogits: null };
    for (const threads of o.threads) for (const loadFast of o.fastAll ? [false, true] : [false]) {
      const model = await Model.load(o.dir, { threads, ctx: Math.max(64, o.P + o.N + 8, (o.klIds?.length ?? 64) + 8), chunk: Math.max(1, o.P), budget: o.budget, io: o.io, fast: loadFast });
      try {
        await model.store.preload();
        if (!out.info) {
          const c = census(model.config, model.store.entries);
          out.info = { arch: model.config.arch, params: c.params, bytes: c.bytes };
        }
        await speedRows(model, o, threads, loadFast, out);
        if (o.profile && model.kernels) await profileRows(model, o, threads, loadFast, out);
        await fastCosts(model, o, loadFast, out);
        if (model.kernels && !loadFast) kernelRates(model, o, threads, out);
      } finally {
        await model.close();
      }
    }
    if (o.json) {
      const extra = { ...(out.cost ? { fast_experts_cost: out.cost } : {}), ...(out.fastCost ? { fast_cost: out.fastCost } : {}), ...(o.profile ? { profile: out.profRows } : {}) };
      console.log(JSON.stringify({ model: o.dir, ...out.info, rows: out.rows, kernels: out.kernelRows, ...extra, thp: thpMode(), machine: machineInfo() }));
      return 0;
    }
    printSpeed(o, out);
    printProfile(o, out.profRows);
    printNotes(out);
    return 0;
  },
};

interface KernelRow { kind: string; shape: [number, number]; threads: number; gmac_per_s: number; gb_per_s: number }

/** What a bench run gathers over its thread counts and loads. */
interface Results {
  rows: Row[];
  profRows: ProfileRow[];
  kernelRows: KernelRow[];
  info: { arch: string; params: number; bytes: number } | null;
  cost: Cost | null;
  fastCost: Cost | null;
  /** Logits of the KL prompt on the exact path (first thread count), for --fast's cost. */
  exactLogits: Float32Array | null;
}

interface BenchOptions {
  dir: string;
  P: number;
  N: number;
  R: number;
  threads: number[];
  fastExperts: boolean;
  fastAll: boolean;
  fast: boolean;
  profile: boolean;
  json: boolean;
  /** The model directory's tokens.json "short" prompt, for the cost of the fast paths. */
  klIds: number[] | null;
  budget: { memory: string | undefined; preset: string };
  io: ReturnType<typeof ioMode>;
}

type Kernels = NonNullable<Model['kernels']>;
type State = ReturnType<Model['newState']>;

function benchOptions(args: string[]): BenchOptions {
  const { values, positionals } = parse('bench', args, {
    p: { type: 'string', short: 'p' },
    n: { type: 'string', short: 'n' },
    r: { type: 'string', short: 'r' },
    'threads-list': { type: 'string' },
    profile: { type: 'boolean' },
    json: { type: 'boolean' },
    ...MODEL_OPTIONS,
  }, 1);
  const dir = positionals[0]!;
  const cores = os.availableParallelism();
  const threads = (values['threads-list'] ?? [1, 2].filter((t) => t <= Math.max(cores, 1)).join(',')).split(',').map((t) => {
    if (!/^\d+$/.test(t.trim()) || Number(t) < 1) throw new UserError(`bench: --threads-list entry ${JSON.stringify(t)} is not a positive integer`);
    return Number(t);
  });
  const fastExperts = values['fast-experts'] ?? false;
  const fastAll = values.fast ?? false;
  const fast = fastExperts || fastAll;
  if (fastExperts && values.kernels === 'ref') throw new UserError('bench: --fast-experts needs the WebAssembly kernels');
  if (fastAll && values.kernels === 'ref') throw new UserError('bench: --fast needs the WebAssembly kernels');
  let klIds: number[] | null = null;
  const tokFile = path.join(dir, 'tokens.json');
  if (fast && fs.existsSync(tokFile)) {
    const short = (JSON.parse(fs.readFileSync(tokFile, 'utf8')) as { short?: unknown }).short;
    if (Array.isArray(short) && short.every((t) => Number.isInteger(t))) klIds = short as number[];
  }
  return {
    dir, threads, fastExperts, fastAll, fast, klIds,
    P: parseIntFlag('bench', 'p', values.p, 64, 0),
    N: parseIntFlag('bench', 'n', values.n, 32, 0),
    R: parseIntFlag('bench', 'r', values.r, 5, 1),
    profile: values.profile ?? false,
    json: values.json ?? false,
    budget: { memory: values.memory, preset: values.preset ?? 'max' },
    io: ioMode('bench', values.io),
  };
}

/** One token from `seed`, then `N` more, each its own forward; `timed` is called after the first. */
async function decode(model: Model, st: State, seed: number, N: number, timed: () => void): Promise<void> {
  const V = model.config.vocabSize;
  let next = ids(1, V, seed)[0]!;
  await model.forward(st, [next], 'last');
  timed();
  for (let i = 0; i < N; i++) {
    next = (next * 31 + 7) % V;
    await model.forward(st, [next], 'last');
  }
}

/** The pp and tg rows of one load at one thread count, on each path the load offers. */
async function speedRows(model: Model, o: BenchOptions, threads: number, loadFast: boolean, out: Results): Promise<void> {
  const { P, N, R } = o;
  const V = model.config.vocabSize;
  const paths: BenchPath[] = loadFast ? ['fast'] : o.fastExperts ? ['exact', 'fast-experts'] : ['exact'];
  const tag = (pth: BenchPath): Partial<Row> => (o.fastExperts ? { experts: pth === 'exact' ? 'exact' : 'fast' } : {}) as Partial<Row>;
  const pathOf = (pth: BenchPath): Partial<Row> => ({ ...tag(pth), ...(o.fastAll ? { path: pth } : {}) });
  for (const pth of paths) {
    const kgp = model.kernels;
    if (kgp && !loadFast) kgp.fastExperts = pth === 'fast-experts';
    if (P > 0) {
      await run1(model, ids(Math.min(P, 8), V, 1), P); // warm-up
      const runs: number[] = [];
      for (let r = 0; r < R; r++) {
        const prompt = ids(P, V, 100 + r);
        const t0 = performance.now();
        await run1(model, prompt, P);
        runs.push(P / ((performance.now() - t0) / 1000));
      }
      out.rows.push({ test: `pp${P}`, threads, ...pathOf(pth), tokens_per_second: { ...stats(runs), runs } });
    }
    if (N > 0) {
      const runs: number[] = [];
      for (let r = 0; r < R + 1; r++) {
        const st = model.newState();
        let t0 = 0;
        await decode(model, st, 200 + r, N, () => (t0 = performance.now()));
        if (r > 0) runs.push(N / ((performance.now() - t0) / 1000)); // run 0 warms up
        model.release(st);
      }
      out.rows.push({ test: `tg${N}`, threads, ...pathOf(pth), tokens_per_second: { ...stats(runs), runs } });
    }
  }
}

/** --profile: the per-token breakdown of the prompt and of decode, timed apart from the t/s rows. */
async function profileRows(model: Model, o: BenchOptions, threads: number, loadFast: boolean, out: Results): Promise<void> {
  const { P, N } = o;
  const kgp = model.kernels!;
  if (!loadFast) kgp.fastExperts = false;
  const row = { threads, ...(o.fastAll ? { path: loadFast ? 'fast' as const : 'exact' as const } : {}) };
  if (P > 0) {
    out.profRows.push(await profiled(model, kgp, o.R, `pp${P}`, P, row, async (st, r, timed) => {
      const prompt = ids(P, model.config.vocabSize, 400 + r);
      timed();
      await model.forward(st, prompt, 'last', P);
    }));
  }
  if (N > 0) out.profRows.push(await profiled(model, kgp, o.R, `tg${N}`, N, row, (st, r, timed) => decode(model, st, 300 + r, N, timed)));
}

/** R timed runs after one that warms up, each `run` on a fresh sequence timed from `timed`. */
async function profiled(
  model: Model, kgp: Kernels, R: number, test: string, perRun: number, row: Pick<ProfileRow, 'threads' | 'path'>,
  run: (st: State, r: number, timed: () => void) => Promise<void>,
): Promise<ProfileRow> {
  const prof = new KernelProfile();
  let total = 0, tokens = 0;
  for (let r = 0; r < R + 1; r++) {
    const st = model.newState();
    let t0 = 0;
    await run(st, r, () => {
      kgp.profile = r > 0 ? prof : null; // run 0 warms up
      t0 = performance.now();
    });
    if (r > 0) {
      total += performance.now() - t0;
      tokens += perRun;
    }
    kgp.profile = null;
    model.release(st);
  }
  const ms = Object.fromEntries(PROFILE_BUCKETS.map((b) => [b, prof.ms[b] / tokens])) as Record<ProfileBucket | 'js', number>;
  ms.js = total / tokens - PROFILE_BUCKETS.reduce((a, b) => a + ms[b], 0);
  return { test, ...row, tokens, ms_per_token: total / tokens, ms, calls_per_token: prof.calls / tokens, pooled_per_token: prof.pooled / tokens, solo_ms: prof.soloMs / tokens };
}

/** The cost of --fast-experts and --fast against the exact path, once each, on the KL prompt. */
async function fastCosts(model: Model, o: BenchOptions, loadFast: boolean, out: Results): Promise<void> {
  const V = model.config.vocabSize;
  const prompt = o.klIds ?? ids(64, V, 12345);
  const costOf = (base: Float32Array, got: Float32Array): Cost => {
    const c = nextTokenKL(base, got, V);
    return { prompt: o.klIds ? 'tokens.json short' : '64 pseudo-random ids', positions: c.positions, mean_kl: c.meanKL, top1_agreement: c.top1 };
  };
  if (o.fast && !loadFast && !out.exactLogits) {
    const kgc = model.kernels!;
    kgc.fastExperts = false;
    out.exactLogits = await run1(model, prompt, o.P || 64, 'all');
    if (o.fastExperts) {
      kgc.fastExperts = true;
      out.cost = costOf(out.exactLogits, await run1(model, prompt, o.P || 64, 'all'));
      kgc.fastExperts = false;
    }
  }
  if (loadFast && !out.fastCost) out.fastCost = costOf(out.exactLogits!, await run1(model, prompt, o.P || 64, 'all'));
}

/** One kernel row per weight format of the model: a matrix of its shape, T = 1. */
function kernelRates(model: Model, o: BenchOptions, threads: number, out: Results): void {
  const cfg = model.config;
  const k = model.kernels!.members[0]!;
  const mark = k.mark();
  const D = cfg.hiddenSize;
  const latent = cfg.moe.latentDim ?? D;
  const shapes: [WeightFormat, number, number][] = [['bf16', D, D]];
  if (model.store.layout.expertBytes > 0) {
    const f = model.store.layout.experts(cfg.layers.findIndex((L) => L.ffn === 'moe'), 0)[0]!.format;
    shapes.push([f, cfg.moe.intermediate, latent]);
  }
  if (o.fast && shapes[1]?.[0] === 'mxfp4') shapes.push(['mxfp4', shapes[1][1], shapes[1][2]]);
  let mxSeen = false;
  for (const [fmt, rws, cls] of shapes) {
    if (fmt !== 'bf16' && fmt !== 'mxfp4' && fmt !== 'f32') continue;
    const q8 = fmt === 'mxfp4' && mxSeen;
    if (fmt === 'mxfp4') mxSeen = true;
    k.fastMxfp4 = q8;
    const bytes = fmt === 'bf16' ? rws * cls * 2 : fmt === 'f32' ? rws * cls * 4 : rws * cls / 2;
    const w = syntheticWeight('bench', fmt, rws, cls, k.alloc(bytes, 4096).u8, fmt === 'mxfp4' ? k.alloc(rws * cls / 32).u8 : undefined);
    const s = secondsPerMatmul(k, w, 300);
    k.fastMxfp4 = false;
    out.kernelRows.push({ kind: q8 ? 'mxfp4 (q8 activations, --fast-experts)' : fmt, shape: [rws, cls], threads, gmac_per_s: (rws * cls) / s / 1e9, gb_per_s: (bytes + (w.scale?.byteLength ?? 0)) / s / 1e9 });
  }
  if (o.fastAll) out.kernelRows.push({ ...q7MatmulRate(k, D, D), threads });
  k.release(mark);
}

function printSpeed(o: BenchOptions, out: Results): void {
  const { info, rows, kernelRows } = out;
  const size = info ? `${(info.bytes / 2 ** 30).toFixed(2)} GiB` : '?';
  const params = info ? `${(info.params / 1e9).toFixed(2)} B` : '?';
  const ex = o.fastAll ? ' path |' : o.fast ? ' experts |' : '';
  const label = (r: Row): string => (r.path === 'fast' ? '--fast (q7 trunk, q8 act)' : r.path === 'fast-experts' || r.experts === 'fast' ? 'fast experts (q8 act)' : 'exact');
  console.log(`| model | size | params | backend | threads |${ex} test | t/s |`);
  console.log(`| --- | ---: | ---: | --- | ---: |${o.fast ? ' --- |' : ''} ---: | ---: |`);
  for (const r of rows) console.log(`| ${info?.arch} | ${size} | ${params} | wasm-simd | ${r.threads} |${o.fast ? ` ${label(r)} |` : ''} ${r.test} | ${r.tokens_per_second.mean.toFixed(2)} ± ${r.tokens_per_second.sd.toFixed(2)} |`);
  console.log('');
  console.log('| kernel | shape | threads | GMAC/s | GB/s |');
  console.log('| --- | --- | ---: | ---: | ---: |');
  for (const k of kernelRows) console.log(`| ${k.kind.startsWith('q7') ? k.kind : k.kind.replace(/^(\w+)/, '$1 x f32')} | ${k.shape.join('x')} | ${k.threads} | ${k.gmac_per_s.toFixed(2)} | ${k.gb_per_s.toFixed(2)} |`);
}

function printProfile(o: BenchOptions, profRows: ProfileRow[]): void {
  if (!profRows.length) return;
  const cols: (ProfileBucket | 'js')[] = [...PROFILE_BUCKETS, 'js'];
  const pct = (r: ProfileRow, b: ProfileBucket | 'js'): string => `${r.ms[b].toFixed(2)} (${((100 * r.ms[b]) / r.ms_per_token).toFixed(0)}%)`;
  console.log('');
  console.log(`profile, ms per token (${o.R} runs; pp: a ${o.P}-token prompt's forward per prompt token; tg: per decoded token; matmul = trunk products (and a chained block's fused steps), experts = dispatches of mxfp4/int4 products (with the shared expert when nothing is read), fused = fused pieces dispatched alone, js = the rest):`);
  console.log(`| test | threads |${o.fastAll ? ' path |' : ''} ms/token | ${cols.join(' | ')} | kernel calls | pooled | solo ms |`);
  console.log(`| --- | ---: |${o.fastAll ? ' --- |' : ''} ---: | ${cols.map(() => '---:').join(' | ')} | ---: | ---: | ---: |`);
  for (const r of profRows) console.log(`| ${r.test} | ${r.threads} |${o.fastAll ? ` ${r.path} |` : ''} ${r.ms_per_token.toFixed(2)} | ${cols.map((b) => pct(r, b)).join(' | ')} | ${r.calls_per_token.toFixed(1)} | ${r.pooled_per_token.toFixed(1)} | ${r.solo_ms.toFixed(2)} |`);
  console.log('(calls, pooled and solo per token too; pooled: calls split across the threads; solo: kernel time on the calling thread alone while workers idle)');
}

function printNotes({ cost, fastCost }: Results): void {
  console.log('');
  console.log(`machine: ${machineLine()}`);
  for (const note of speedNotes()) console.log(`note: ${note}`);
  if (cost) {
    console.log('');
    console.log(`fast experts vs exact, next-token distributions over ${cost.positions} positions (${cost.prompt}): mean KL ${cost.mean_kl.toExponential(3)}, top-1 agreement ${(100 * cost.top1_agreement).toFixed(1)}%`);
  }
  if (fastCost) {
    console.log('');
    console.log(`--fast (bf16 trunk REQUANTIZED to 7-bit blocks, not the stored weights; 8-bit activations) vs exact, next-token distributions over ${fastCost.positions} positions (${fastCost.prompt}): mean KL ${fastCost.mean_kl.toExponential(3)}, top-1 agreement ${(100 * fastCost.top1_agreement).toFixed(1)}%`);
  }
}

/**
 * Cost of an approximate path: mean over positions of KL(p_base || p_fast) of the next-token
 * distributions (softmax in double of each row of V logits), and the share of positions whose
 * argmax agrees.
 */
export function nextTokenKL(base: Float32Array, fast: Float32Array, V: number): { meanKL: number; top1: number; positions: number } {
  const n = Math.floor(base.length / V);
  let kl = 0, agree = 0;
  const logSoftmax = (a: Float32Array, o: number, out: Float64Array): number => {
    let mx = -Infinity, arg = 0;
    for (let i = 0; i < V; i++) if (a[o + i]! > mx) { mx = a[o + i]!; arg = i; }
    let s = 0;
    for (let i = 0; i < V; i++) s += Math.exp(a[o + i]! - mx);
    const ls = Math.log(s);
    for (let i = 0; i < V; i++) out[i] = a[o + i]! - mx - ls;
    return arg;
  };
  const lp = new Float64Array(V), lq = new Float64Array(V);
  for (let p = 0; p < n; p++) {
    const a = logSoftmax(base, p * V, lp), b = logSoftmax(fast, p * V, lq);
    let k = 0;
    for (let i = 0; i < V; i++) if (lp[i]! > -Infinity) k += Math.exp(lp[i]!) * (lp[i]! - lq[i]!);
    kl += k;
    if (a === b) agree++;
  }
  return { meanKL: n ? kl / n : 0, top1: n ? agree / n : 1, positions: n };
}
