// Worker pool over one shared WebAssembly.Memory. Every thread (the main thread is thread 0)
// runs the same kernel module on the same memory. A dispatch is a list of independent ops written
// into the control block at the start of the memory; each op's rows [r0, r1) are split into
// pieces that the threads claim as they go (guided self-scheduling: a claim takes a share of what
// is left, halving as the op drains). Threads split rows (or heads), never a dot product, and a
// row's numbers do not depend on which thread computes it or with which neighbours, so the result
// is the same bytes for any thread count and any order of claims. Claiming rather than a fixed
// half each means a worker that wakes late, or runs slower, leaves its rows to the others instead
// of making them wait.
//
// Signalling: control word SEQ is bumped (Atomics.add + notify) to start a dispatch; workers spin
// on it for SPIN_US.worker, then sleep in Atomics.wait. Each worker adds 1 to DONE (and notifies)
// when its share is done; the main thread, after its own share, spins then waits until DONE
// reaches the worker count.

import { Worker, isMainThread, parentPort, workerData, type WorkerOptions } from 'node:worker_threads';
import { instantiate, type KernelExports } from './wasm/loader.js';
import { FMTS, CTRL_BYTES } from './wasm/kernels.js';
import { ACT_FNS } from './wasm/act.js';

// control block layout (i32 words from the start of the memory)
const SEQ = 0;
const DONE = 1;
const NOPS = 2;
const NTHREADS = 3;
const QUIT = 4;
const ERROR = 5;
const OPS = 16; // first op word
export const OP_WORDS = 16;
/** Ops one dispatch can hold: their words, then one claim word each (the next row or head to take). */
const MAX_OPS = Math.floor((CTRL_BYTES / 4 - OPS) / (OP_WORDS + 1));
const CLAIMS = OPS + MAX_OPS * OP_WORDS;
/** A claimed piece of a matmul is at least this many multiply-adds (a few microseconds), so the
 *  claims (one compare-exchange each) cost little next to the products. */
const MIN_PIECE_MACS = 1 << 15;

/** Op kinds: a matmul (mm_<fmt> for FMTS[word 1]), or one of the fused kernels (wasm/fused.ts). */
export const OP_MATMUL = 0;
export const OP_KDA = 1;
export const OP_MLA_SCORES = 2;
export const OP_MLA_WSUM = 3;
/** Transposed products of several heads (absorbed MLA): words fmt, w, s, sdt, rows, cols, r0,
 *  rStride, n, x, xStride, y, yStride (strides in rows / bytes), heads [h0, h1) in words 14, 15;
 *  head h is mvT_<fmt> over rows r0 + h*rStride .. +n, x at x + h*xStride, y at y + h*yStride. */
export const OP_MVT = 4;
/** The whole KDA block of a token (wasm/kda-block.ts): one word, its parameter block. */
export const OP_KDA_BLOCK = 5;
/** Gated activations of a batch (wasm/act.ts), split by 4-element units: words fn (index into
 *  ACT_OPS), g, u, o, pb, units [a, b) in words 14, 15; a thread runs act(g + 16a, u + 16a, o + 16a, 4(b - a), pb). */
export const OP_ACT = 6;
export const ACT_OPS = [ACT_FNS.silu, ACT_FNS.situ, ACT_FNS.situ_bl] as const;
/** Fused ops: the export and its argument count (words 1 ..), before the range [h0, h1) in words 14, 15. */
const FUSED: Record<number, [string, number]> = {
  [OP_KDA]: ['kda_step', 8],
  [OP_MLA_SCORES]: ['mla_scores', 10],
  [OP_MLA_WSUM]: ['mla_wsum', 5],
  [OP_MVT]: ['', 13],
  [OP_KDA_BLOCK]: ['kda_block', 1],
  [OP_ACT]: ['', 5],
};

/** Microseconds a worker spins for the next dispatch before sleeping, and the main thread for
 *  the workers before sleeping. Spinning avoids a futex wake-up (tens of microseconds) between
 *  the many small dispatches of a decode step, at the cost of a busy core meanwhile. The worker
 *  spins 1 ms: the JavaScript between a decode step's ~90 dispatches (norms, AttnRes, routing)
 *  leaves gaps mostly of 50-500 µs (k3-medium), and a worker asleep in each costs a wake-up per dispatch. */
export const SPIN_US = { worker: 1000, main: 1000 };

/** Spin until ctrl[i] !== v or `us` microseconds pass; returns the last value read. */
function spinWhile(ctrl: Int32Array, i: number, v: number, us: number): number {
  let x = Atomics.load(ctrl, i);
  if (x !== v) return x;
  const end = performance.now() + us / 1000;
  for (;;) {
    for (let k = 0; k < 64; k++) {
      x = Atomics.load(ctrl, i);
      if (x !== v) return x;
    }
    if (performance.now() > end) return x;
  }
}

/** An instance's exports looked up once (runOps runs for every dispatch on every thread). */
interface Bound {
  mm: ((...a: number[]) => number)[];
  mvT: ((...a: number[]) => number)[];
  act: ((...a: number[]) => number)[];
  fused: Record<number, (...a: number[]) => number>;
}
const bound = new WeakMap<KernelExports, Bound>();

function bind(ex: KernelExports): Bound {
  let b = bound.get(ex);
  if (!b) {
    const fused: Record<number, (...a: number[]) => number> = {};
    for (const [k, [fn]] of Object.entries(FUSED)) if (fn) fused[Number(k)] = ex[fn]!;
    b = { mm: FMTS.map((f) => ex[`mm_${f}`]!), mvT: FMTS.map((f) => ex[`mvT_${f}`]!), act: ACT_OPS.map((f) => ex[f]!), fused };
    bound.set(ex, b);
  }
  return b;
}

/** Claim the next piece of op i's range (ends at hi): its start, or hi when none is left. The
 *  piece is a 1/(2n) share of what is left, at least `min`, in multiples of `gran`. */
function claim(ctrl: Int32Array, i: number, hi: number, nth: number, min: number, gran: number): [number, number] {
  for (;;) {
    const a = Atomics.load(ctrl, CLAIMS + i);
    if (a >= hi) return [hi, hi];
    let c = Math.max(min, Math.ceil((hi - a) / (2 * nth)));
    c = Math.ceil(c / gran) * gran;
    const b = Math.min(hi, a + c);
    if (Atomics.compareExchange(ctrl, CLAIMS + i, a, b) === a) return [a, b];
  }
}

/** Run one piece [a, b) of op o (rows of a matmul; heads or activation units of the others). */
function runPiece(B: Bound, ctrl: Int32Array, o: number, kind: number, a: number, b: number, scratch: number): void {
  if (kind === OP_MATMUL) {
    B.mm[ctrl[o + 1]!]!(ctrl[o + 2]!, ctrl[o + 3]!, ctrl[o + 4]!, ctrl[o + 5]!, ctrl[o + 6]!, ctrl[o + 7]!, ctrl[o + 8]!, ctrl[o + 9]!, a, b, scratch);
  } else if (kind === OP_MVT) {
    const mvT = B.mvT[ctrl[o + 1]!]!;
    for (let h = a; h < b; h++) {
      mvT(ctrl[o + 2]!, ctrl[o + 3]!, ctrl[o + 4]!, ctrl[o + 5]!, ctrl[o + 6]!, ctrl[o + 7]! + h * ctrl[o + 8]!, ctrl[o + 9]!,
        ctrl[o + 10]! + h * ctrl[o + 11]!, ctrl[o + 12]! + h * ctrl[o + 13]!, scratch);
    }
  } else if (kind === OP_ACT) {
    B.act[ctrl[o + 1]!]!(ctrl[o + 2]! + 16 * a, ctrl[o + 3]! + 16 * a, ctrl[o + 4]! + 16 * a, 4 * (b - a), ctrl[o + 5]!);
  } else {
    // fused op: its arguments, then the head range
    const nargs = FUSED[kind]![1];
    const args: number[] = [];
    for (let k = 1; k <= nargs; k++) args.push(ctrl[o + k]!);
    B.fused[kind]!(...args, a, b);
  }
}

/** Run the ops in the control block: all of each on one thread, or, on several, the pieces this
 *  thread claims. */
export function runOps(ex: KernelExports, ctrl: Int32Array, tid: number, scratch: number): void {
  const nops = ctrl[NOPS]!;
  const nth = ctrl[NTHREADS]!;
  if (tid >= nth) return;
  const B = bind(ex);
  for (let i = 0; i < nops; i++) {
    const o = OPS + i * OP_WORDS;
    const kind = ctrl[o]!;
    // a matmul's rows are words 10, 11; the other kinds split a range [h0, h1) in words 14, 15
    const mm = kind === OP_MATMUL;
    const lo = ctrl[o + (mm ? 10 : 14)]!, hi = ctrl[o + (mm ? 11 : 15)]!;
    if (nth === 1) {
      if (lo < hi) runPiece(B, ctrl, o, kind, lo, hi, scratch);
      continue;
    }
    // matmul pieces: an even number of rows (the tiled kernel takes rows in pairs), enough work each
    const min = mm ? Math.max(2, Math.ceil(MIN_PIECE_MACS / Math.max(1, ctrl[o + 6]! * ctrl[o + 8]!))) : 1;
    for (;;) {
      const [a, b] = claim(ctrl, i, hi, nth, min, mm ? 2 : 1);
      if (a >= b) break;
      runPiece(B, ctrl, o, kind, a, b, scratch);
    }
  }
}

/** Before a dispatch on several threads: every op's claim word at the start of its range. */
function resetClaims(ctrl: Int32Array, nops: number): void {
  for (let i = 0; i < nops; i++) {
    const o = OPS + i * OP_WORDS;
    ctrl[CLAIMS + i] = ctrl[o + (ctrl[o] === OP_MATMUL ? 10 : 14)]!;
  }
}

/** Words of a matmul op: kind, fmt (index into FMTS), w, s, sdt, rows, cols, x, T, y, r0, r1 (offsets in bytes). */
export function writeMatmulOp(ctrl: Int32Array, i: number, fmt: number, w: number, s: number, sdt: number, rows: number, cols: number,
  x: number, T: number, y: number, r0: number, r1: number): void {
  const o = OPS + i * OP_WORDS;
  ctrl[o] = OP_MATMUL;
  ctrl[o + 1] = fmt;
  ctrl[o + 2] = w | 0;
  ctrl[o + 3] = s | 0;
  ctrl[o + 4] = sdt;
  ctrl[o + 5] = rows;
  ctrl[o + 6] = cols;
  ctrl[o + 7] = x | 0;
  ctrl[o + 8] = T;
  ctrl[o + 9] = y | 0;
  ctrl[o + 10] = r0;
  ctrl[o + 11] = r1;
}

/** A fused op: `args` (at most 13 i32 words) then the head range [h0, h1). */
export function writeFusedOp(ctrl: Int32Array, i: number, kind: number, args: readonly number[], h0: number, h1: number): void {
  const [, nargs] = FUSED[kind]!;
  if (args.length !== nargs) throw new Error(`fused op ${kind}: ${args.length} arguments, want ${nargs}`);
  const o = OPS + i * OP_WORDS;
  ctrl[o] = kind;
  for (let k = 0; k < args.length; k++) ctrl[o + 1 + k] = args[k]! | 0;
  ctrl[o + 14] = h0;
  ctrl[o + 15] = h1;
}

/** Ops one dispatch can hold. */
export function maxOps(): number {
  return MAX_OPS;
}

interface WorkerInit {
  kimiKernelPool: true;
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  tid: number;
  scratch: number;
  spinUs: number;
}

export class Pool {
  private closed = false;
  /** When true, run() adds the calling thread's time waiting for the workers to waitMs. */
  timed = false;
  waitMs = 0;

  private constructor(
    readonly ctrl: Int32Array,
    private readonly workers: Worker[],
    private readonly ex: KernelExports,
    private readonly mainScratch: number,
    private readonly spinUs: number,
  ) {}

  /** Threads in all, the main thread included. */
  get size(): number {
    return this.workers.length + 1;
  }

  static async create(module: WebAssembly.Module, memory: WebAssembly.Memory, ex: KernelExports, threads: number, scratch: number[],
    spin: { worker: number; main: number } = SPIN_US): Promise<Pool> {
    const ctrl = new Int32Array(memory.buffer, 0, CTRL_BYTES / 4);
    Atomics.store(ctrl, SEQ, 0);
    Atomics.store(ctrl, QUIT, 0);
    const workers: Worker[] = [];
    const ready: Promise<void>[] = [];
    for (let tid = 1; tid < threads; tid++) {
      const init: WorkerInit = { kimiKernelPool: true, module, memory, tid, scratch: scratch[tid]!, spinUs: spin.worker };
      const w = new Worker(new URL(import.meta.url), { workerData: init } as WorkerOptions);
      ready.push(new Promise((resolve, reject) => {
        w.once('message', () => resolve());
        w.once('error', reject);
        w.once('exit', (code) => reject(new Error(`kernel worker exited with code ${code}`)));
      }));
      workers.push(w);
    }
    await Promise.all(ready);
    for (const w of workers) {
      w.removeAllListeners('exit');
      w.removeAllListeners('error');
      w.on('error', () => {
        /* reported through the ERROR word */
      });
      w.unref();
    }
    return new Pool(ctrl, workers, ex, scratch[0]!, spin.main);
  }

  /**
   * Run the `nops` ops already written into the control block on `nth` threads (1 = main thread
   * only, no workers woken). Synchronous: returns when every share is done.
   */
  run(nops: number, nth: number): void {
    if (this.closed) throw new Error('kernel pool is closed');
    const c = this.ctrl;
    nth = Math.max(1, Math.min(nth, this.size));
    c[NOPS] = nops;
    c[NTHREADS] = nth;
    if (nth === 1) {
      runOps(this.ex, c, 0, this.mainScratch);
      return;
    }
    resetClaims(c, nops);
    Atomics.store(c, DONE, 0);
    Atomics.store(c, ERROR, 0);
    Atomics.add(c, SEQ, 1);
    Atomics.notify(c, SEQ);
    let err: unknown;
    try {
      runOps(this.ex, c, 0, this.mainScratch);
    } catch (e) {
      err = e;
    }
    const want = this.workers.length;
    const tw = this.timed ? performance.now() : 0;
    for (;;) {
      let d = Atomics.load(c, DONE);
      if (d >= want) break;
      d = spinWhile(c, DONE, d, this.spinUs);
      if (d >= want) break;
      if (d === Atomics.load(c, DONE)) Atomics.wait(c, DONE, d, 100);
    }
    if (this.timed) this.waitMs += performance.now() - tw;
    if (err) throw err;
    if (Atomics.load(c, ERROR)) throw new Error('a kernel worker failed (out-of-bounds access?)');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    Atomics.store(this.ctrl, QUIT, 1);
    Atomics.add(this.ctrl, SEQ, 1);
    Atomics.notify(this.ctrl, SEQ);
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

function workerMain(init: WorkerInit): void {
  const ex = instantiate(init.module, init.memory);
  const ctrl = new Int32Array(init.memory.buffer, 0, CTRL_BYTES / 4);
  let seq = Atomics.load(ctrl, SEQ);
  parentPort?.postMessage('ready');
  for (;;) {
    let s = spinWhile(ctrl, SEQ, seq, init.spinUs);
    while (s === seq) {
      Atomics.wait(ctrl, SEQ, seq);
      s = Atomics.load(ctrl, SEQ);
    }
    seq = s;
    if (Atomics.load(ctrl, QUIT)) return;
    try {
      runOps(ex, ctrl, init.tid, init.scratch);
    } catch {
      Atomics.store(ctrl, ERROR, 1);
    }
    Atomics.add(ctrl, DONE, 1);
    Atomics.notify(ctrl, DONE);
  }
}

if (!isMainThread && (workerData as WorkerInit | undefined)?.kimiKernelPool) {
  // Start after the module graph has settled (top-level code of an ESM worker).
  setImmediate(() => workerMain(workerData as WorkerInit));
}
