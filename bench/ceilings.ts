// The two ceilings of this machine as WebAssembly sees them, at 1 and 2 threads, and what they
// allow a model's tokens (a roofline):
// - Memory read bandwidth: the ceiling of a decode step that streams its weights. Each thread sums
//   its own region of one shared memory with 128-bit loads, in two streams half a region apart (as
//   the single-token matmul walks rows: wasm/mm1.ts MM1_ROWS), after a first pass that makes the
//   pages resident. The regions are far larger than the caches. A decode bound by this bandwidth
//   cannot scale from 1 to 2 threads by more than this does (issue 13: decode scaling on a machine
//   whose memory scales ~1.7x measured 1.56-1.59x for us and 1.68x for llama.cpp).
// - Multiply-add rate: the ceiling of a prompt's products, which the exact path computes as f32x4
//   fused multiply-adds (docs/NUMERICS.md), 4 a vector: ten independent chains of relaxed_madd
//   (f32x4.mul + add where the machine does not fuse it, and then the exact path emulates it).
//   WebAssembly has 128-bit vectors only, so this is the ceiling of our exact prompt, not of
//   llama.cpp's (AVX2 / AVX-512 where the machine has them).
//
// Usage (alone): node dist/bench/ceilings.js [--mib 256]

import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as path from 'node:path';
import { Fn, assemble, block, br_if, f32, f32x4, get, i32, I32, loop, set, V128, v128 } from '../src/kernels/wasm/emit.js';
import { fusedMaddAvailable } from '../src/kernels/wasm/loader.js';
import type { Layout } from '../src/store/layout.js';
import type { ModelConfig } from '../src/checkpoint/config.js';

const PAGE = 65536;

/** sum(p, n): reads bytes [p, p + n) as two streams (n a multiple of 128), returns nothing. */
function readModule(pages: number): Uint8Array<ArrayBuffer> {
  const f = new Fn('run', { p: I32, n: I32 }, null, true);
  const acc = [0, 1, 2, 3].map((k) => f.local(`a${k}`, V128));
  const q0 = f.local('q0', I32), q1 = f.local('q1', I32), end = f.local('end', I32);
  f.body = [
    set(q0, get(f.p('p'))),
    set(q1, i32.add(get(f.p('p')), i32.shr_u(get(f.p('n')), i32.const(1)))),
    set(end, get(q1)),
    block(loop(
      // 64 bytes of each stream a step, into 4 accumulators (the sums only keep the loads alive)
      ...[q0, q1].flatMap((q) => acc.map((a, k) => set(a, f32x4.add(get(a), v128.load(get(q), 16 * k))))),
      set(q0, i32.add(get(q0), i32.const(64))),
      set(q1, i32.add(get(q1), i32.const(64))),
      br_if(0, i32.lt_u(get(q0), get(end))),
    )),
  ];
  return assemble([f], { module: 'env', name: 'memory', minPages: pages, maxPages: pages, shared: true });
}

/** Chains of multiply-adds (FMA_CHAINS: enough to cover the latency on every machine we measured). */
const FMA_CHAINS = 10;
/** run(p, n): n steps of FMA_CHAINS f32x4 multiply-adds (4 * FMA_CHAINS each), the chains then stored at p. */
function fmaModule(fused: boolean): Uint8Array<ArrayBuffer> {
  const f = new Fn('run', { p: I32, n: I32 }, null, true);
  const acc = Array.from({ length: FMA_CHAINS }, (_, k) => f.local(`a${k}`, V128));
  const m = f.local('m', V128), c = f.local('c', V128), i = f.local('i', I32);
  const madd = (a: number) => set(a, fused ? f32x4.relaxed_madd(get(a), get(m), get(c)) : f32x4.add(f32x4.mul(get(a), get(m)), get(c)));
  f.body = [
    // a -> a * (1 - 2^-20) + 2^-20 stays near 1: no overflow, no subnormals
    set(m, f32x4.splat(f32.const(1 - 2 ** -20))), set(c, f32x4.splat(f32.const(2 ** -20))),
    ...acc.map((a, k) => set(a, f32x4.splat(f32.const(1 + k / 64)))),
    set(i, get(f.p('n'))),
    block(loop(...acc.map(madd), set(i, i32.sub(get(i), i32.const(1))), br_if(0, i32.gt_u(get(i), i32.const(0))))),
    ...acc.map((a, k) => v128.store(get(f.p('p')), get(a), 16 * k)),
  ];
  return assemble([f], { module: 'env', name: 'memory', minPages: 1, maxPages: 1, shared: true });
}

interface Job {
  bin: Uint8Array<ArrayBuffer>;
  memory: WebAssembly.Memory;
  ctrl: SharedArrayBuffer;
  off: number;
  n: number;
  reps: number;
}

export interface MemBandwidth {
  /** GB/s (1e9 bytes) read by 1 and by 2 threads together, best of `tries`. */
  gbs: Record<1 | 2, number>;
  scaling: number;
  mibPerThread: number;
}

export interface MaddRate {
  /** GMAC/s (1e9 f32 multiply-adds) of 1 and of 2 threads together, best of `tries`. */
  gmacs: Record<1 | 2, number>;
  fused: boolean;
}

/** Runs `nth` threads, each run(off_i, n) `reps` times after one untimed call; the slowest
 *  thread's milliseconds. Thread i's off is offOf(i). */
async function measure(bin: Uint8Array<ArrayBuffer>, memory: WebAssembly.Memory, nth: number, offOf: (i: number) => number, n: number, reps: number): Promise<number> {
  const ctrl = new SharedArrayBuffer(8);
  const flag = new Int32Array(ctrl);
  const ws = Array.from({ length: nth }, (_, i) => new Worker(fileURLToPath(import.meta.url), { workerData: { bin, memory, ctrl, off: offOf(i), n, reps } satisfies Job }));
  try {
    const ready = ws.map((w) => new Promise<void>((res, rej) => w.once('message', () => res()).once('error', rej)));
    await Promise.all(ready); // each has done its untimed call
    const done = ws.map((w) => new Promise<number>((res, rej) => w.once('message', (ms: number) => res(ms)).once('error', rej)));
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
    return Math.max(...await Promise.all(done));
  } finally {
    await Promise.all(ws.map((w) => w.terminate()));
  }
}

/** Read bandwidth at 1 and 2 threads, `mib` MiB a thread, alternating `tries` times, best of each. */
export async function memoryBandwidth(mib = 256, tries = 5): Promise<MemBandwidth> {
  const bytes = mib * 2 ** 20;
  const pages = 1 + (2 * bytes) / PAGE;
  const memory = new WebAssembly.Memory({ initial: pages, maximum: pages, shared: true });
  new Uint8Array(memory.buffer).fill(1); // (every page made resident before timing)
  const bin = readModule(pages);
  const gbs: Record<1 | 2, number> = { 1: 0, 2: 0 };
  for (let k = 0; k < tries; k++) {
    for (const n of [1, 2] as const) {
      const ms = await measure(bin, memory, n, (i) => PAGE + i * bytes, bytes, 3);
      gbs[n] = Math.max(gbs[n], (n * bytes * 3) / (ms / 1000) / 1e9);
    }
  }
  return { gbs, scaling: gbs[2] / gbs[1], mibPerThread: mib };
}

/** The f32x4 multiply-add rate at 1 and 2 threads (~50 ms a try), alternating `tries` times, best of each. */
export async function maddRate(tries = 5): Promise<MaddRate> {
  const fused = fusedMaddAvailable();
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
  const bin = fmaModule(fused);
  const steps = 4_000_000, reps = 3;
  const gmacs: Record<1 | 2, number> = { 1: 0, 2: 0 };
  for (let k = 0; k < tries; k++) {
    for (const n of [1, 2] as const) {
      const ms = await measure(bin, memory, n, (i) => 1024 * i, steps, reps);
      gmacs[n] = Math.max(gmacs[n], (n * steps * reps * 4 * FMA_CHAINS) / (ms / 1000) / 1e9);
    }
  }
  return { gmacs, fused };
}

/** One line for a bench report. */
export function memoryBandwidthLine(m: MemBandwidth): string {
  return `memory read (WebAssembly, ${m.mibPerThread} MiB a thread, two streams each): 1 thread ${m.gbs[1].toFixed(1)} GB/s, 2 threads ${m.gbs[2].toFixed(1)} GB/s, scaling ${m.scaling.toFixed(2)}x (a decode bound by memory scales at most this much)`;
}

export function maddRateLine(m: MaddRate): string {
  return `multiply-adds (WebAssembly f32x4 ${m.fused ? 'relaxed_madd, fused' : 'mul + add (not fused here)'}, ${FMA_CHAINS} chains): 1 thread ${m.gmacs[1].toFixed(1)} GMAC/s, 2 threads ${m.gmacs[2].toFixed(1)} GMAC/s`;
}

/**
 * The work of one token of a model: the multiply-adds of a prompt token's products (every trunk
 * matrix but the output head, which a prompt runs for its last token only, and top-k experts per
 * MoE layer) and the weight bytes a decode step reads (the whole trunk with the head, and top-k
 * experts per MoE layer, each a different one). Attention's own products (the scores, a few per
 * cached position) are left out: small beside the weights at the contexts benched.
 */
export function tokenWork(cfg: ModelConfig, layout: Layout): { promptMacs: number; decodeBytes: number } {
  let trunk = 0;
  for (const [name, m] of layout.matrices) if (!name.endsWith('lm_head')) trunk += m.rows * m.cols;
  const active = layout.moeLayers * Math.min(cfg.moe.topK, cfg.moe.experts);
  const moeLayer = cfg.layers.findIndex((L) => L.ffn === 'moe');
  const expertMacs = moeLayer < 0 || layout.expertBytes === 0 ? 0 : layout.experts(moeLayer, 0).reduce((a, p) => a + p.rows * p.cols, 0);
  return { promptMacs: trunk + active * expertMacs, decodeBytes: layout.trunkBytes + active * layout.expertBytes };
}

/** The roofline's two lines: tokens/s at most, per thread count, and each engine's share of it. */
export function rooflineLines(work: { promptMacs: number; decodeBytes: number }, madd: MaddRate, mem: MemBandwidth,
  engines: { name: string; threads: number; pp: number; tg: number }[]): string[] {
  const ppMax = (t: 1 | 2) => (madd.gmacs[t] * 1e9) / work.promptMacs;
  const tgMax = (t: 1 | 2) => (mem.gbs[t] * 1e9) / work.decodeBytes;
  const share = (pick: (e: { pp: number; tg: number }) => number, max: (t: 1 | 2) => number) => engines
    .filter((e) => e.threads === 1 || e.threads === 2)
    .map((e) => `${e.name} t=${e.threads} ${((100 * pick(e)) / max(e.threads as 1 | 2)).toFixed(0)}%`).join(', ');
  return [
    `roofline, prompt: ${(work.promptMacs / 1e6).toFixed(0)} M multiply-adds a token -> at most ${ppMax(1).toFixed(1)} tok/s at 1 thread, ${ppMax(2).toFixed(1)} at 2 at the rate above; reached: ${share((e) => e.pp, ppMax)}`,
    `roofline, decode: ${(work.decodeBytes / 1e6).toFixed(0)} MB of weights a token -> at most ${tgMax(1).toFixed(1)} tok/s at 1 thread, ${tgMax(2).toFixed(1)} at 2 at the read rate above; reached: ${share((e) => e.tg, tgMax)}`,
  ];
}

if (!isMainThread && (workerData as Job | undefined)?.ctrl) {
  const job = workerData as Job;
  const instance = new WebAssembly.Instance(new WebAssembly.Module(job.bin), { env: { memory: job.memory } });
  const run = instance.exports.run as (p: number, n: number) => void;
  run(job.off, job.n);
  parentPort!.postMessage('ready');
  const flag = new Int32Array(job.ctrl);
  Atomics.wait(flag, 0, 0);
  const t0 = performance.now();
  for (let r = 0; r < job.reps; r++) run(job.off, job.n);
  parentPort!.postMessage(performance.now() - t0);
} else if (isMainThread && process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const i = process.argv.indexOf('--mib');
  console.log(memoryBandwidthLine(await memoryBandwidth(i > 0 ? Number(process.argv[i + 1]) : 256)));
  console.log(maddRateLine(await maddRate()));
}
