import * as os from 'node:os';
import type { Command } from './main.js';
import { parse, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS } from './common.js';
import { Model } from '../model/model.js';
import { census } from '../model/census.js';
import { activeKernels } from '../kernels/dispatch.js';
import type { WeightFormat, WeightView } from '../kernels/types.js';
import { UserError } from '../util/errors.js';

// llama-bench style: prompt processing (ppN: one forward of N tokens from an empty context) and
// text generation (tgN: N one-token forwards after a one-token prompt), tokens/s as mean ± sd
// over repetitions, one row per thread count; then kernel rows (GMAC/s and GB/s of weights).

interface Row {
  test: string;
  threads: number;
  tokens_per_second: { mean: number; sd: number; runs: number[] };
}

function stats(xs: number[]): { mean: number; sd: number } {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = xs.length > 1 ? Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1)) : 0;
  return { mean, sd };
}

/** Deterministic pseudo-random ids (the numbers do not matter for speed). */
function ids(n: number, vocab: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % vocab;
  });
}

function randomWeight(format: WeightFormat, rows: number, cols: number, data: Uint8Array, scale?: Uint8Array): WeightView {
  let s = 7;
  for (let i = 0; i < data.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = format === 'bf16' && i % 2 === 1 ? 0x3c | (s & 0x80) : s >>> 24;
  }
  if (scale) scale.fill(121);
  return { name: `bench ${format}`, format, rows, cols, data, scale };
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
  --threads-list L  comma-separated thread counts (default 1,2 capped at the cores)
  --json            one JSON object
${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse('bench', args, {
      p: { type: 'string', short: 'p' },
      n: { type: 'string', short: 'n' },
      r: { type: 'string', short: 'r' },
      'threads-list': { type: 'string' },
      json: { type: 'boolean' },
      ...MODEL_OPTIONS,
    }, 1);
    const dir = positionals[0]!;
    const P = parseIntFlag('bench', 'p', values.p, 64, 0);
    const N = parseIntFlag('bench', 'n', values.n, 32, 0);
    const R = parseIntFlag('bench', 'r', values.r, 5, 1);
    const cores = os.availableParallelism();
    const list = (values['threads-list'] ?? [1, 2].filter((t) => t <= Math.max(cores, 1)).join(',')).split(',').map((t) => {
      if (!/^\d+$/.test(t.trim()) || Number(t) < 1) throw new UserError(`bench: --threads-list entry ${JSON.stringify(t)} is not a positive integer`);
      return Number(t);
    });
    const rows: Row[] = [];
    const kernelRows: { kind: string; shape: [number, number]; threads: number; gmac_per_s: number; gb_per_s: number }[] = [];
    let info: { arch: string; params: number; bytes: number } | null = null;
    for (const threads of list) {
      const model = await Model.load(dir, { threads, ctx: Math.max(64, P + N + 8), chunk: Math.max(1, P), budget: { memory: values.memory, preset: values.preset ?? 'max' } });
      try {
        await model.store.preload();
        const cfg = model.config;
        if (!info) {
          const c = census(cfg, model.store.entries);
          info = { arch: cfg.arch, params: c.params, bytes: c.bytes };
        }
        if (P > 0) {
          await model.forward(model.newState(), ids(Math.min(P, 8), cfg.vocabSize, 1), 'last', P); // warm-up
          const runs: number[] = [];
          for (let r = 0; r < R; r++) {
            const prompt = ids(P, cfg.vocabSize, 100 + r);
            const t0 = performance.now();
            await model.forward(model.newState(), prompt, 'last', P);
            runs.push(P / ((performance.now() - t0) / 1000));
          }
          rows.push({ test: `pp${P}`, threads, tokens_per_second: { ...stats(runs), runs } });
        }
        if (N > 0) {
          const runs: number[] = [];
          for (let r = 0; r < R + 1; r++) {
            const st = model.newState();
            let next = ids(1, cfg.vocabSize, 200 + r)[0]!;
            await model.forward(st, [next], 'last');
            const t0 = performance.now();
            for (let i = 0; i < N; i++) {
              next = (next * 31 + 7) % cfg.vocabSize;
              await model.forward(st, [next], 'last');
            }
            if (r > 0) runs.push(N / ((performance.now() - t0) / 1000)); // run 0 warms up
          }
          rows.push({ test: `tg${N}`, threads, tokens_per_second: { ...stats(runs), runs } });
        }
        const kg = activeKernels();
        if (kg) {
          const k = kg.members[0]!;
          const mark = k.mark();
          const D = cfg.hiddenSize;
          const latent = cfg.moe.latentDim ?? D;
          const shapes: [WeightFormat, number, number][] = [['bf16', D, D]];
          if (model.store.layout.expertBytes > 0) {
            const f = model.store.layout.experts(cfg.layers.findIndex((L) => L.ffn === 'moe'), 0)[0]!.format;
            shapes.push([f, cfg.moe.intermediate, latent]);
          }
          for (const [fmt, rws, cls] of shapes) {
            if (fmt !== 'bf16' && fmt !== 'mxfp4' && fmt !== 'f32') continue;
            const bytes = fmt === 'bf16' ? rws * cls * 2 : fmt === 'f32' ? rws * cls * 4 : rws * cls / 2;
            const w = randomWeight(fmt, rws, cls, k.alloc(bytes, 4096).u8, fmt === 'mxfp4' ? k.alloc(rws * cls / 32).u8 : undefined);
            const x = new Float32Array(cls).fill(0.5);
            const y = new Float32Array(rws);
            k.matmul(w, x, 1, y);
            let n = 0;
            const t0 = performance.now();
            while (performance.now() - t0 < 300) {
              k.matmul(w, x, 1, y);
              n++;
            }
            const s = (performance.now() - t0) / 1000 / n;
            kernelRows.push({ kind: fmt, shape: [rws, cls], threads, gmac_per_s: (rws * cls) / s / 1e9, gb_per_s: (bytes + (w.scale?.byteLength ?? 0)) / s / 1e9 });
          }
          k.release(mark);
        }
      } finally {
        await model.close();
      }
    }
    if (values.json) {
      console.log(JSON.stringify({ model: dir, ...info, rows, kernels: kernelRows }));
      return 0;
    }
    const size = info ? `${(info.bytes / 2 ** 30).toFixed(2)} GiB` : '?';
    const params = info ? `${(info.params / 1e9).toFixed(2)} B` : '?';
    console.log(`| model | size | params | backend | threads | test | t/s |`);
    console.log(`| --- | ---: | ---: | --- | ---: | ---: | ---: |`);
    for (const r of rows) console.log(`| ${info?.arch} | ${size} | ${params} | wasm-simd | ${r.threads} | ${r.test} | ${r.tokens_per_second.mean.toFixed(2)} ± ${r.tokens_per_second.sd.toFixed(2)} |`);
    console.log('');
    console.log(`| kernel | shape | threads | GMAC/s | GB/s |`);
    console.log(`| --- | --- | ---: | ---: | ---: |`);
    for (const k of kernelRows) console.log(`| ${k.kind} x f32 | ${k.shape.join('x')} | ${k.threads} | ${k.gmac_per_s.toFixed(2)} | ${k.gb_per_s.toFixed(2)} |`);
    return 0;
  },
};
