// Why a decode token scales less from 1 to 2 threads than its kernels do (issue 13), side by side
// in one run:
//   1. k3-medium (synthesized into models/bench/k3-medium-mxfp4, as vs-llama-cpp.js does, or
//      --model DIR): ms per token at 1 and 2 threads, the part of it outside Pool.run (the
//      JavaScript between dispatches, and kernels the calling thread runs alone), and the token's
//      products (every run's matmul ops) replayed back to back with no JavaScript between them
//      ("kernels alone").
//   2. The tiny golden K3 (the same 9 layers and dispatches a token, tensors 16x narrower): its
//      JavaScript per token, warm, and with a --flush-mib read after every dispatch, which evicts
//      the L3 as a large model's weight stream does.
// Medians of blocks of decode tokens. A bench, not a test: nothing here gates CI.
//
//   node dist/bench/glue.js [--model DIR] [--tokens 8] [--blocks 7] [--flush-mib 64]

import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Model } from '../src/model/model.js';
import { argmax } from '../src/generate/greedy.js';
import { Pool, OP_MATMUL, OP_WORDS, STAGING_WORD } from '../src/kernels/pool.js';
import { synthCheckpoint } from '../src/synth/synth.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values } = parseArgs({
  options: { model: { type: 'string' }, tokens: { type: 'string', default: '8' }, blocks: { type: 'string', default: '7' }, 'flush-mib': { type: 'string', default: '64' } },
});
const TOKENS = Number(values.tokens), BLOCKS = Number(values.blocks), FLUSH_MIB = Number(values['flush-mib']);

/** Pool.run, wrapped: its time is counted, an optional hook runs after each call, and calls can be recorded. */
interface Recorded { words: Int32Array; nops: number; nth: number; pool: Pool }
const inner = Pool.prototype.run;
const hooks = { inRun: 0, after: null as (() => void) | null, record: null as Recorded[] | null };
Pool.prototype.run = function (this: Pool, nops: number, nth: number): void {
  if (hooks.record) hooks.record.push({ words: this.ctrl.slice(STAGING_WORD, STAGING_WORD + nops * OP_WORDS), nops, nth, pool: this });
  const t0 = performance.now();
  try {
    inner.call(this, nops, nth);
  } finally {
    hooks.after?.();
    hooks.inRun += performance.now() - t0;
  }
};

const median = (v: number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;

/** A loaded model decoding greedily after an 8-token prompt. */
async function decoder(dir: string, threads: number): Promise<{ model: Model; step: () => Promise<void> }> {
  const model = await Model.load(dir, { ctx: 1024, threads, budget: { preset: 'max' } });
  await model.store.preload();
  const V = model.config.vocabSize;
  const st = model.newState();
  let lg = await model.forward(st, [5, 17, 300, 400, 12, 99, 100, 2].map((t) => t % V), 'last');
  const step = async (): Promise<void> => {
    lg = await model.forward(st, [argmax(lg, 0, V)], 'last');
  };
  for (let i = 0; i < 3; i++) await step();
  return { model, step };
}

/** Median ms per token and ms outside Pool.run per token over BLOCKS blocks of TOKENS tokens. */
async function measure(step: () => Promise<void>): Promise<{ token: number; outside: number }> {
  const tok: number[] = [], out: number[] = [];
  for (let b = 0; b < BLOCKS; b++) {
    hooks.inRun = 0;
    const t0 = performance.now();
    for (let i = 0; i < TOKENS; i++) await step();
    const ms = (performance.now() - t0) / TOKENS;
    tok.push(ms);
    out.push(ms - hooks.inRun / TOKENS);
  }
  return { token: median(tok), outside: median(out) };
}

/** The matmul dispatches of one token, replayed back to back on at most nth threads: median ms. The
 *  replays write into released arena memory, so the model is closed right after. */
function replay(calls: Recorded[], nth: number): number {
  const ms: number[] = [];
  for (let r = 0; r < BLOCKS; r++) {
    const t0 = performance.now();
    for (const c of calls) {
      c.pool.ctrl.set(c.words, STAGING_WORD);
      inner.call(c.pool, c.nops, Math.min(c.nth, nth));
    }
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

const dir = values.model ?? (await synthCheckpoint({ arch: 'k3', preset: 'k3-medium', out: path.join(ROOT, 'models', 'bench', 'k3-medium-mxfp4') })).dir;
console.log(`== ${dir}: decode after an 8-token prompt, ${BLOCKS} blocks of ${TOKENS} tokens (medians) ==`);
const rows: { threads: number; token: number; outside: number }[] = [];
/** Kernels alone at 1 and 2 threads (both replayed on the 2-thread model). */
const alone = [0, 0];
for (const threads of [1, 2]) {
  const d = await decoder(dir, threads);
  const m = await measure(d.step);
  if (threads === 2) {
    const all: Recorded[] = (hooks.record = []);
    await d.step();
    // each run's products only (a chained run's other ops read parameter blocks in the released
    // arena, which later calls overwrite): the same products, back to back
    const calls = all.flatMap((c): Recorded[] => {
      const ops: Int32Array[] = [];
      for (let i = 0; i < c.nops; i++) if (c.words[i * OP_WORDS] === OP_MATMUL) ops.push(c.words.subarray(i * OP_WORDS, (i + 1) * OP_WORDS));
      if (ops.length === 0) return [];
      const words = new Int32Array(ops.length * OP_WORDS);
      ops.forEach((o, i) => words.set(o, i * OP_WORDS));
      return [{ ...c, words, nops: ops.length }];
    });
    const products = calls.reduce((n, c) => n + c.nops, 0);
    hooks.record = null;
    alone[0] = replay(calls, 1);
    alone[1] = replay(calls, 2);
    console.log(`(kernels alone: the ${products} products of the ${calls.length} of ${all.length} pooled runs of one token that have any, replayed on the 2-thread model at 1 and 2 threads, one run each)`);
  }
  rows.push({ threads, ...m });
  await d.model.close();
}
console.log('| threads | ms/token | outside Pool.run | kernels alone (products) |');
console.log('| ---: | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.threads} | ${r.token.toFixed(1)} | ${r.outside.toFixed(1)} | ${alone[r.threads - 1]!.toFixed(1)} |`);
console.log(`scaling 1 -> 2 threads: token ${(rows[0]!.token / rows[1]!.token).toFixed(2)}x, kernels alone ${(alone[0]! / alone[1]!).toFixed(2)}x`);

// The same JavaScript on a tiny model, warm and with the L3 flushed after every dispatch.
const tiny = path.join(ROOT, '..', 'shared', 'golden', 'k3');
const flush = new Int32Array((FLUSH_MIB << 20) / 4).fill(1);
let sink = 0;
const glue: number[] = [];
for (const flushed of [false, true]) {
  const d = await decoder(tiny, 1);
  for (let i = 0; i < 20; i++) await d.step();
  hooks.after = flushed ? () => {
    let s = 0;
    for (let i = 0; i < flush.length; i += 16) s += flush[i]!;
    sink += s;
  } : null;
  glue.push((await measure(d.step)).outside);
  hooks.after = null;
  await d.model.close();
}
console.log('\n== tiny golden K3, 1 thread: JavaScript outside Pool.run per token ==');
console.log(`warm ${glue[0]!.toFixed(2)} ms; with a ${FLUSH_MIB} MiB read after every dispatch ${glue[1]!.toFixed(2)} ms (${(glue[1]! / glue[0]!).toFixed(1)}x)`);
(globalThis as { glueSink?: number }).glueSink = sink; // (keeps the flush reads)
process.exit(0);
