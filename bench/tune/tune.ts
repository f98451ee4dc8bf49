// Reprints the tables behind the kernels' tuned constants (docs/TUNING.md), on this machine: each
// subcommand names one constant (or a pair decided together), builds the kernels once per candidate
// value (bench/tune/variant.ts: the real build first, then patched copies), checks that every
// candidate gives the real build's bytes, and times them in one process taking turns. It prints
// GMAC/s medians (min-max) per candidate and each one's ratio to the current value; the ratios carry
// from machine to machine, the absolute figures do not. A benchmark, never a test.
//
//   node dist/bench/tune/tune.js <constant> [--ms 200] [--rounds 7] [--mb 192] [--threads 1]
//   node dist/bench/tune/tune.js list
//
// --mb: MiB of copies of each matrix cycled through, so that the weights come from DRAM as a
// model's do (--mb 0: one copy, from the caches). --ms: milliseconds per sample.

import { machineLine } from '../../src/util/machine.js';
import { f32ToBf16 } from '../../src/formats/dtypes.js';
import { weightBytes, type WeightView, type WeightFormat } from '../../src/formats/weight.js';
import { panelWidth, toPanelsInPlace } from '../../src/formats/panels.js';
import type { Kernels, KernelsOptions } from '../../src/kernels/fast.js';
import { loadKernels, type Overrides } from './variant.js';

const args = process.argv.slice(2);
const opt = (name: string, def: number): number => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const MS = opt('--ms', 200), ROUNDS = opt('--rounds', 7), MB = opt('--mb', 192), THREADS = opt('--threads', 1);

interface Case { format: WeightFormat; rows: number; cols: number; T: number; panels?: boolean }
interface Variant { label: string; over?: Overrides; opts?: KernelsOptions }
interface Table { doc: string; variants: Variant[]; cases: Case[] }

const MM1 = 'kernels/wasm/mm1.js', GEN = 'kernels/wasm/gen.js', DEC = 'kernels/wasm/decode.js', KER = 'kernels/wasm/kernels.js';
const c = (format: WeightFormat, rows: number, cols: number, T = 1, panels = false): Case => ({ format, rows, cols, T, panels });
const v = (label: string, file: string, consts: Record<string, unknown>): Variant => ({ label, over: { [file]: consts } });
const NOW = (label: string): Variant => ({ label: `${label} (now)` });
const allFmts = (n: number): Record<string, number> => ({ f32: n, bf16: n, f16: n, fp8: n, int4: n, mxfp4: n });

/** One table per tuned constant; `doc` is its section of docs/TUNING.md. */
const TABLES: Record<string, Table> = {
  'mm1-rows': {
    doc: 'MM1_ROWS, MM1_MIN_DIST', // one row at a time = rows never far enough apart to pair
    variants: [NOW('2 rows far apart'), v('one row at a time', MM1, { MM1_MIN_DIST: 1 << 30 })],
    cases: [c('bf16', 2048, 2048), c('f32', 1024, 2048)],
  },
  'mm1-wide': {
    doc: 'MM1_WIDE_ROWS, MM1_WIDE_FROM',
    variants: [NOW('4 rows past 3072'), v('4 rows past 4096', MM1, { MM1_WIDE_FROM: 4096 }), v('2 rows always', MM1, { MM1_WIDE_FROM: 1 << 30 })],
    cases: [c('bf16', 1024, 2560), c('bf16', 1024, 3584), c('bf16', 1024, 4096), c('bf16', 1024, 7168), c('bf16', 512, 12288), c('f32', 512, 7168)],
  },
  'mm1-chunk': {
    doc: 'MM1_CHUNK_COLS',
    variants: [NOW('256'), ...[64, 128, 512].map((n) => v(String(n), MM1, { MM1_CHUNK_COLS: n })), v('whole rows', MM1, { MM1_CHUNK_COLS: 1 << 16 })],
    cases: [c('bf16', 2048, 2048), c('bf16', 1024, 7168)],
  },
  'mm1-dec-rows': {
    doc: 'MM1_DEC_ROWS',
    variants: [NOW('3 rows'), v('2 rows', MM1, { MM1_DEC_ROWS: 2 }), v('4 rows', MM1, { MM1_DEC_ROWS: 4 })],
    cases: [c('mxfp4', 768, 1024), c('mxfp4', 1024, 768)],
  },
  'mx-chunk': {
    doc: 'MX_CHUNK_GROUPS',
    variants: [NOW('4 groups'), ...[2, 6, 8].map((n) => v(`${n} groups`, MM1, { MX_CHUNK_GROUPS: n }))],
    cases: [c('mxfp4', 768, 1024), c('mxfp4', 1024, 768), c('fp8', 2048, 7168), c('int4', 2048, 7168)],
  },
  'mx-dec-unroll': {
    doc: 'MX_DEC_UNROLL',
    variants: [NOW('4 groups'), v('1 group', DEC, { MX_DEC_UNROLL: 1 }), v('2 groups', DEC, { MX_DEC_UNROLL: 2 })],
    cases: [c('mxfp4', 768, 1024, 1), c('mxfp4', 768, 1024, 8)],
  },
  'tile-min-t': {
    doc: 'TILE_MIN_T',
    variants: [NOW('per format'), v('tiled from 2', GEN, { TILE_MIN_T: allFmts(2) }), v('single-token to 16', GEN, { TILE_MIN_T: allFmts(17) })],
    cases: [
      ...[4, 6, 8, 12].map((T) => c('bf16', 4096, 7168, T)), ...[4, 8, 12].map((T) => c('bf16', 12288, 1536, T)),
      ...[2, 3, 4].map((T) => c('fp8', 2048, 7168, T)), ...[2, 3, 4].map((T) => c('int4', 7168, 2048, T)), ...[2, 3].map((T) => c('f16', 2048, 2048, T)),
      ...[2, 3, 4, 8].map((T) => c('mxfp4', 3072, 7168, T)), ...[4, 8].map((T) => c('f32', 2048, 7168, T)),
    ],
  },
  'tile-chunk': {
    doc: 'TILE_CHUNK_COLS, TILE_CHUNK_FROM',
    variants: [NOW('1024 past 4096'), v('2048 past 4096', GEN, { TILE_CHUNK_COLS: 2048 }), v('1024 past 2048', GEN, { TILE_CHUNK_FROM: 2048 }), v('whole rows', GEN, { TILE_CHUNK_FROM: 1 << 30 })],
    cases: [c('bf16', 64, 7168, 64), c('bf16', 32, 18432, 64), c('bf16', 64, 4096, 64), c('mxfp4', 256, 7168, 8)],
  },
  'panel-sub-rows': {
    doc: 'PANEL_SUB_ROWS',
    variants: [NOW('128'), ...[256, 448, 896].map((n) => v(String(n), MM1, { PANEL_SUB_ROWS: n }))],
    cases: [c('bf16', 1024, 7168, 1, true), c('bf16', 6144, 7168, 1, true)],
  },
  'panel-touch-t': {
    doc: 'PANEL_TOUCH_T',
    variants: [NOW('from 3 tokens'), v('from 2', MM1, { PANEL_TOUCH_T: 2 }), v('never', MM1, { PANEL_TOUCH_T: 1 << 30 })],
    cases: [1, 2, 3, 4, 6].map((T) => c('bf16', 1024, 7168, T, true)),
  },
  'panel-touch-rows': {
    doc: 'PANEL_TOUCH_ROWS',
    variants: [NOW('16'), v('2 (a row pair)', KER, { PANEL_TOUCH_ROWS: 2 }), v('32', KER, { PANEL_TOUCH_ROWS: 32 })],
    cases: [8, 16, 64].map((T) => c('bf16', 1024, 7168, T, true)),
  },
};

let seed = 12345;
const rnd = (): number => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 2 ** 32;
};

/** Random weights in a format's checkpoint layout (bf16 optionally in column panels). */
function weight(k: Case): WeightView {
  const { format, rows, cols } = k, n = rows * cols;
  const bytes = (len: number, f: () => number) => Uint8Array.from({ length: len }, f);
  let data: Uint8Array, scale: Uint8Array | undefined;
  switch (format) {
    case 'f32': data = new Uint8Array(Float32Array.from({ length: n }, () => rnd() - 0.5).buffer); break;
    case 'bf16': data = new Uint8Array(Uint16Array.from({ length: n }, () => f32ToBf16((rnd() - 0.5) * 0.1)).buffer); break;
    case 'f16': data = new Uint8Array(Uint16Array.from({ length: n }, () => 0x2000 | Math.floor(rnd() * 0x1000) | (rnd() < 0.5 ? 0x8000 : 0)).buffer); break;
    case 'fp8':
      data = bytes(n, () => Math.floor(rnd() * 0x7e) | (rnd() < 0.5 ? 0x80 : 0));
      scale = new Uint8Array(new Float32Array(Math.ceil(rows / 128) * Math.ceil(cols / 128)).fill(1e-3).buffer);
      break;
    case 'int4':
      data = bytes(rows * Math.ceil(cols / 8) * 4, () => Math.floor(rnd() * 256));
      scale = new Uint8Array(new Uint16Array(rows * Math.ceil(cols / 32)).fill(f32ToBf16(0.01)).buffer);
      break;
    case 'mxfp4':
      data = bytes(n / 2, () => Math.floor(rnd() * 256));
      scale = bytes(n / 32, () => 118 + Math.floor(rnd() * 7));
      break;
  }
  const w: WeightView = { name: format, format, rows, cols, data, scale, scaleDtype: format === 'int4' ? 'BF16' : scale ? 'F32' : undefined };
  if (!k.panels) return w;
  const width = panelWidth(cols);
  if (!width) throw new Error(`tune: ${cols} columns do not split into panels`);
  toPanelsInPlace(data, rows, cols, width);
  return { ...w, panels: { rows, width } };
}

interface Placed { k: Kernels; run: () => void; y: Float32Array }

/** A candidate's kernels with copies of w (cycled, so they come from DRAM unless --mb 0). */
async function place(vr: Variant, w: WeightView, T: number, x0: Float32Array): Promise<Placed> {
  const fast = await loadKernels(vr.over);
  const k = await fast.createKernels({ threads: THREADS, memoryBytes: 64 << 20, ...vr.opts });
  const copies = Math.max(1, Math.ceil((MB * 2 ** 20) / weightBytes(w)));
  const ws = Array.from({ length: copies }, () => k.upload(w));
  const x = k.allocF32(T * w.cols);
  x.set(x0);
  const y = k.allocF32(T * w.rows);
  let i = 0;
  return { k, y, run: () => k.matmul(ws[i++ % copies]!, x, T, y) };
}

/** GMAC/s of one sample: calls for about MS milliseconds. */
function sample(p: Placed, macs: number): number {
  let n = 0;
  const t0 = performance.now();
  let t1 = t0;
  while (t1 - t0 < MS || n < 2) {
    p.run();
    n++;
    t1 = performance.now();
  }
  return (macs * n) / ((t1 - t0) / 1000) / 1e9;
}

const median = (a: number[]): number => {
  const s = [...a].sort((p, q) => p - q);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function runTable(name: string, t: Table): Promise<void> {
  console.log(`tune ${name} (docs/TUNING.md: ${t.doc}); ${machineLine()}`);
  console.log(`${THREADS} thread${THREADS === 1 ? '' : 's'}, ${MB ? `${MB} MiB of copies cycled (from DRAM)` : 'one copy (from the caches)'}, ${ROUNDS} rounds of ${MS} ms taking turns; GMAC/s median (min-max), ratio to now`);
  const head = t.variants.map((vr) => vr.label.padStart(26)).join('');
  console.log(`${'case'.padEnd(24)}${head}`);
  for (const k of t.cases) {
    const w = weight(k), macs = k.rows * k.cols * k.T;
    const x0 = Float32Array.from({ length: k.T * k.cols }, () => rnd() * 2 - 1);
    const placed: (Placed | string)[] = [];
    for (const vr of t.variants) {
      try {
        const p = await place(vr, w, k.T, x0);
        p.run();
        const base = placed[0];
        if (typeof base === 'object' && Buffer.compare(Buffer.from(p.y.buffer, p.y.byteOffset, p.y.byteLength), Buffer.from(base.y.buffer, base.y.byteOffset, base.y.byteLength)) !== 0) {
          placed.push('other bytes!');
          await p.k.close();
        } else placed.push(p);
      } catch (e) {
        placed.push(`failed: ${(e as Error).message.slice(0, 40)}`);
      }
    }
    const g: number[][] = placed.map(() => []);
    for (let r = 0; r < ROUNDS; r++) {
      for (let j = 0; j < placed.length; j++) {
        const i = (j + r) % placed.length, p = placed[i]!; // each round starts with another candidate
        if (typeof p === 'object') g[i]!.push(sample(p, macs));
      }
    }
    const now = g[0]!.length ? median(g[0]!) : NaN;
    const cells = placed.map((p, i) => {
      if (typeof p === 'string') return p.slice(0, 25).padStart(26);
      const m = median(g[i]!);
      return `${m.toFixed(1)} (${Math.min(...g[i]!).toFixed(1)}-${Math.max(...g[i]!).toFixed(1)}) ${(m / now).toFixed(2)}x`.padStart(26);
    });
    console.log(`${`${k.format} ${k.rows}x${k.cols} T=${k.T}${k.panels ? ' pan' : ''}`.padEnd(24)}${cells.join('')}`);
    for (const p of placed) if (typeof p === 'object') await p.k.close();
  }
}

/** SPIN_US (kernels/pool.ts): a decode step's pattern of many small pooled products with stretches
 *  of JavaScript between them, ms a step, at 2 threads with the spins given. */
async function spinTable(): Promise<void> {
  const fast = await loadKernels();
  const threads = Math.max(2, THREADS);
  const variants: [string, KernelsOptions['spinMicros']][] = [['2000/1000 us (now)', undefined], ['200/200 us', { worker: 200, main: 200 }], ['0/0 (sleep at once)', { worker: 0, main: 0 }]];
  console.log(`tune spin (docs/TUNING.md: SPIN_US); ${machineLine()}`);
  console.log(`${threads} threads, 78 products of bf16 1024x2048 a step with 0-300 us of JavaScript between; ms a step, median (min-max) of ${ROUNDS} rounds taking turns`);
  const w = weight(c('bf16', 1024, 2048));
  const x0 = Float32Array.from({ length: 2048 }, () => rnd() * 2 - 1);
  const ks = await Promise.all(variants.map(async ([, spin]) => {
    const k = await fast.createKernels({ threads, memoryBytes: 64 << 20, spinMicros: spin });
    const wk = k.upload(w), x = k.allocF32(2048), y = k.allocF32(1024);
    x.set(x0);
    return { k, step: () => {
      for (let i = 0; i < 78; i++) {
        k.matmul(wk, x, 1, y);
        const until = performance.now() + (i % 4) * 0.1; // JavaScript between dispatches
        while (performance.now() < until);
      }
    } };
  }));
  for (const { step } of ks) step(); // warm-up: compile, first dispatches
  const ms: number[][] = ks.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    for (let j = 0; j < ks.length; j++) {
      const i = (j + r) % ks.length, t0 = performance.now();
      let n = 0;
      while (performance.now() - t0 < MS) ks[i]!.step(), n++;
      ms[i]!.push((performance.now() - t0) / n);
    }
  }
  for (const [i, [label]] of variants.entries()) console.log(`${label.padEnd(22)} ${median(ms[i]!).toFixed(2)} (${Math.min(...ms[i]!).toFixed(2)}-${Math.max(...ms[i]!).toFixed(2)}) ms ${(median(ms[i]!) / median(ms[0]!)).toFixed(2)}x`);
  for (const { k } of ks) await k.close();
}

const which = args[0];
if (which === 'spin') await spinTable();
else if (which && TABLES[which]) await runTable(which, TABLES[which]);
else {
  console.log(`usage: node dist/bench/tune/tune.js <constant> [--ms ${MS}] [--rounds ${ROUNDS}] [--mb ${MB}] [--threads ${THREADS}]`);
  for (const [name, t] of Object.entries(TABLES)) console.log(`  ${name.padEnd(17)} ${t.doc}`);
  console.log(`  ${'spin'.padEnd(17)} SPIN_US`);
  if (which !== 'list') process.exitCode = 2;
}
