// Memory read bandwidth as WebAssembly sees it, at 1 and 2 threads: the ceiling of a decode step
// that streams its weights. Each thread sums its own region of one shared memory with 128-bit loads,
// in two streams half a region apart (as the single-token matmul walks rows: wasm/mm1.ts MM1_ROWS),
// after a first pass that makes the pages resident. The regions are far larger than the caches.
// A decode bound by this bandwidth cannot scale from 1 to 2 threads by more than this does; the
// vs-llama-cpp bench prints the two side by side (issue 13: decode scaling on a machine whose
// memory scales ~1.7x measured 1.56-1.59x for us and 1.68x for llama.cpp).
//
// Usage (alone): node dist/bench/membw.js [--mib 256]

import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as path from 'node:path';
import { Fn, assemble, block, br_if, f32x4, get, i32, I32, loop, set, V128, v128 } from '../src/kernels/wasm/emit.js';

const PAGE = 65536;

/** sum(p, n): reads bytes [p, p + n) as two streams (n a multiple of 128), returns nothing. */
function readModule(pages: number): Uint8Array<ArrayBuffer> {
  const f = new Fn('sum', { p: I32, n: I32 }, null, true);
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

interface Job {
  bin: Uint8Array<ArrayBuffer>;
  memory: WebAssembly.Memory;
  ctrl: SharedArrayBuffer;
  off: number;
  bytes: number;
  reps: number;
}

export interface MemBandwidth {
  /** GB/s (1e9 bytes) read by 1 and by 2 threads together, best of `tries`. */
  gbs: Record<1 | 2, number>;
  scaling: number;
  mibPerThread: number;
}

/** Runs `nth` threads over their regions, `reps` passes each after one untimed pass; GB/s. */
async function measure(bin: Uint8Array<ArrayBuffer>, memory: WebAssembly.Memory, nth: number, bytes: number, reps: number): Promise<number> {
  const ctrl = new SharedArrayBuffer(8);
  const flag = new Int32Array(ctrl);
  const ws = Array.from({ length: nth }, (_, i) => new Worker(fileURLToPath(import.meta.url), { workerData: { bin, memory, ctrl, off: PAGE + i * bytes, bytes, reps } satisfies Job }));
  try {
    const ready = ws.map((w) => new Promise<void>((res, rej) => w.once('message', () => res()).once('error', rej)));
    await Promise.all(ready); // each has done its untimed pass
    const done = ws.map((w) => new Promise<number>((res, rej) => w.once('message', (ms: number) => res(ms)).once('error', rej)));
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
    const ms = Math.max(...await Promise.all(done));
    return (nth * bytes * reps) / (ms / 1000) / 1e9;
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
    for (const n of [1, 2] as const) gbs[n] = Math.max(gbs[n], await measure(bin, memory, n, bytes, 3));
  }
  return { gbs, scaling: gbs[2] / gbs[1], mibPerThread: mib };
}

/** One line for a bench report. */
export function memoryBandwidthLine(m: MemBandwidth): string {
  return `memory read (WebAssembly, ${m.mibPerThread} MiB a thread, two streams each): 1 thread ${m.gbs[1].toFixed(1)} GB/s, 2 threads ${m.gbs[2].toFixed(1)} GB/s, scaling ${m.scaling.toFixed(2)}x (a decode bound by memory scales at most this much)`;
}

if (!isMainThread && (workerData as Job | undefined)?.ctrl) {
  const job = workerData as Job;
  const instance = new WebAssembly.Instance(new WebAssembly.Module(job.bin), { env: { memory: job.memory } });
  const sum = instance.exports.sum as (p: number, n: number) => void;
  sum(job.off, job.bytes);
  parentPort!.postMessage('ready');
  const flag = new Int32Array(job.ctrl);
  Atomics.wait(flag, 0, 0);
  const t0 = performance.now();
  for (let r = 0; r < job.reps; r++) sum(job.off, job.bytes);
  parentPort!.postMessage(performance.now() - t0);
} else if (isMainThread && process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const i = process.argv.indexOf('--mib');
  console.log(memoryBandwidthLine(await memoryBandwidth(i > 0 ? Number(process.argv[i + 1]) : 256)));
}
