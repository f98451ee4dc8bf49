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
// Signalling. The caller writes a dispatch's ops into a staging area; run() copies them to the
// live area the workers read. SEQ is odd while a dispatch is published and even while the main
// thread is preparing the next one. A worker that sees a new odd SEQ announces itself (ACTIVE),
// checks SEQ again (the main thread may have closed it meanwhile), claims pieces until none is
// left, and adds each finished piece's size to DONE. The main thread claims pieces too, then waits
// until DONE reaches the dispatch's total, not for every worker to check in: a worker that wakes
// late finds nothing left and leaves. Before it rewrites the live area the main thread closes SEQ
// and waits until no worker is inside (ACTIVE = 0). Workers spin on SEQ for SPIN_US.worker, then
// sleep in Atomics.wait, counted in SLEEPERS: the main thread notifies only when that count is
// not zero (a notify costs ~10 µs even with nobody waiting; sequentially consistent atomics make
// the count and SEQ a Dekker pair: a worker counted after the main thread looked sees the new SEQ
// in Atomics.wait and does not sleep). The main thread's sleep on DONE is flagged the same way
// (DONE_SLEEPER) for whoever finishes the last piece.
//
// Steps. A dispatch may hold several steps separated by OP_BARRIER ops (a chained dispatch,
// chain.ts): a thread leaves a step once DONE has reached the step's end, then claims in the
// next, so a step may read what the steps before it wrote.

import { Worker, isMainThread, parentPort, workerData, type WorkerOptions } from 'node:worker_threads';
import { instantiate, type KernelExports } from './wasm/loader.js';
import { CTRL_BYTES } from './wasm/kernels.js';
import { OPS as REGISTRY, OP_WORDS, RANGE_AT, opCode, runners } from './ops/registry.js';
import { MATMUL } from './ops/matmul.js';
import { BARRIER } from './ops/barrier.js';
import type { OpDef, Runner } from './ops/op.js';

// control block layout (i32 words from the start of the memory)
const SEQ = 0;
/** Rows (or heads, units) of the live dispatch finished so far; TOTAL: all of them. */
const DONE = 1;
const NOPS = 2;
const NTHREADS = 3;
const QUIT = 4;
const ERROR = 5;
const TOTAL = 6;
/** Workers inside the live dispatch. */
const ACTIVE = 7;
/** Workers asleep (or about to be) in Atomics.wait on SEQ: the only ones a notify is for. */
const SLEEPERS = 8;
/** 1 while the main thread sleeps (or is about to) in Atomics.wait on DONE. */
const DONE_SLEEPER = 9;
const OPS = 16; // first op word of the staging area (written by the caller)
/** The staging area's first word (benches that record and replay dispatches: bench/glue.ts). */
export const STAGING_WORD = OPS;
export { OP_WORDS };
/** Ops one dispatch can hold: their staging words, live words and one claim word each (the next
 *  row or head to take). */
const MAX_OPS = Math.floor((CTRL_BYTES / 4 - OPS) / (2 * OP_WORDS + 1));
const LIVE = OPS + MAX_OPS * OP_WORDS;
const CLAIMS = LIVE + MAX_OPS * OP_WORDS;

/** The op codes the pool itself knows: a matmul (bench/glue.ts replays them) and the step barrier. */
export const OP_MATMUL = opCode(MATMUL);
export const OP_BARRIER = opCode(BARRIER);
/** Claim sizes per code (ops/op.ts claim): granularity and the least piece. */
const CLAIM = REGISTRY.map((d) => d.claim ?? null);

/** Microseconds a worker spins for the next dispatch before sleeping, and the main thread for
 *  the workers before sleeping. Spinning avoids a futex wake-up between the many small dispatches
 *  of a decode step, at the cost of a busy core meanwhile; after a forward the worker keeps its core
 *  2 ms more, then sleeps. Measurements: docs/TUNING.md "SPIN_US" (`tune.js spin`). */
export const SPIN_US = { worker: 2000, main: 1000 };

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

/** An instance's piece runners per op code, made once (every dispatch on every thread runs through them). */
const bound = new WeakMap<KernelExports, Runner[]>();

function bind(ex: KernelExports): Runner[] {
  let b = bound.get(ex);
  if (!b) bound.set(ex, (b = runners(ex)));
  return b;
}

/** Where the last claim's piece starts (claim returns its end): no array per claim, a few
 *  thousand of which a decode token makes. */
let claimedFrom = 0;

/** Claim the next piece of op i's range (ends at hi): its end, its start in claimedFrom (both hi
 *  when none is left). The piece is a 1/(2n) share of what is left, at least `min`, in multiples of `gran`. */
function claim(ctrl: Int32Array, i: number, hi: number, nth: number, min: number, gran: number): number {
  for (;;) {
    const a = Atomics.load(ctrl, CLAIMS + i);
    if (a >= hi) return (claimedFrom = hi);
    let c = Math.max(min, Math.ceil((hi - a) / (2 * nth)));
    c = Math.ceil(c / gran) * gran;
    const b = Math.min(hi, a + c);
    if (Atomics.compareExchange(ctrl, CLAIMS + i, a, b) === a) {
      claimedFrom = a;
      return b;
    }
  }
}

/** Where the split range [lo, hi) of the op at word o lies (after its arguments). */
function rangeWord(ctrl: Int32Array, o: number): number {
  return o + RANGE_AT[ctrl[o]!]!;
}

/** Run the staged ops on the calling thread alone, each whole (no claims, no live area). */
function runAll(ex: KernelExports, ctrl: Int32Array, nops: number, scratch: number): void {
  const run = bind(ex);
  for (let i = 0; i < nops; i++) {
    const o = OPS + i * OP_WORDS, r = rangeWord(ctrl, o);
    if (ctrl[r]! < ctrl[r + 1]!) run[ctrl[o]!]!(ctrl, o, ctrl[r]!, ctrl[r + 1]!, scratch);
  }
}

/** Claim and run pieces of the live ops until none is left, adding each finished piece to DONE
 *  (a failed one too, so nobody waits for it: the first error is returned after the rest).
 *  The ops come in steps separated by OP_BARRIER: a thread leaves a step only when all of its
 *  rows are done (DONE has reached the step's end), so a step may read what the ones before it
 *  wrote. Within a step, thread `tid` starts at op tid·n/nth of its n ops and wraps around: in a
 *  dispatch of unlike products (the shared expert's rows, bound by memory bandwidth, next to
 *  routed experts, bound by arithmetic) the threads start on different kinds and overlap them;
 *  each op is still claimed to its end, so which thread runs a row never matters. */
function runClaims(ex: KernelExports, ctrl: Int32Array, scratch: number, tid: number, steps = Infinity): unknown {
  const run = bind(ex);
  const nops = ctrl[NOPS]!, nth = ctrl[NTHREADS]!;
  let err: unknown = null;
  let end = 0; // DONE once every step so far is finished
  leftEarly = false;
  for (let p0 = 0, s = 0; p0 < nops; s++) {
    let p1 = p0;
    while (p1 < nops && ctrl[LIVE + p1 * OP_WORDS] !== OP_BARRIER) {
      const r = rangeWord(ctrl, LIVE + p1 * OP_WORDS);
      end += Math.max(0, ctrl[r + 1]! - ctrl[r]!);
      p1++;
    }
    err = runStep(run, ctrl, scratch, tid, nth, p0, p1) ?? err;
    if (p1 < nops) while (Atomics.load(ctrl, DONE) < end) { /* spin: the other threads' last pieces of this step */ }
    p0 = p1 + 1;
    if (s + 1 >= steps && p0 < nops) {
      leftEarly = true; // (Pool.run's launch: the rest is the workers' until join)
      break;
    }
  }
  return err;
}

/** Set by runClaims when it left after its first `steps` steps with more to come. */
let leftEarly = false;

/** runClaims for the ops [p0, p1) of one step. */
function runStep(run: Runner[], ctrl: Int32Array, scratch: number, tid: number, nth: number, p0: number, p1: number): unknown {
  const n = p1 - p0, total = ctrl[TOTAL]!;
  const first = Math.floor((tid * n) / nth);
  let err: unknown = null;
  for (let j = 0; j < n; j++) {
    const i = p0 + (first + j < n ? first + j : first + j - n);
    const o = LIVE + i * OP_WORDS;
    const kind = ctrl[o]!, piece = run[kind]!, cl = CLAIM[kind];
    const hi = ctrl[rangeWord(ctrl, o) + 1]!;
    const min = cl ? cl.min(ctrl, o) : 1, gran = cl ? cl.gran : 1;
    for (;;) {
      const b = claim(ctrl, i, hi, nth, min, gran), a = claimedFrom;
      if (a >= b) break;
      try {
        piece(ctrl, o, a, b, scratch);
      } catch (e) {
        err ??= e;
        Atomics.store(ctrl, ERROR, 1);
      }
      if (Atomics.add(ctrl, DONE, b - a) + (b - a) === total && Atomics.load(ctrl, DONE_SLEEPER) !== 0) Atomics.notify(ctrl, DONE);
    }
  }
  return err;
}

/** Publish the staged ops (only while no worker is inside): copy them to the live area, each
 *  claim word at the start of its range, DONE = 0; returns TOTAL, the sum of the ranges. */
function stage(ctrl: Int32Array, nops: number): number {
  let total = 0;
  ctrl.copyWithin(LIVE, OPS, OPS + nops * OP_WORDS);
  for (let i = 0; i < nops; i++) {
    const r = rangeWord(ctrl, LIVE + i * OP_WORDS);
    ctrl[CLAIMS + i] = ctrl[r]!;
    total += Math.max(0, ctrl[r + 1]! - ctrl[r]!);
  }
  ctrl[TOTAL] = total;
  Atomics.store(ctrl, DONE, 0);
  Atomics.store(ctrl, ERROR, 0);
  return total;
}

/** Words of a matmul op: kind, fmt (index into FMTS), w, s, sdt, rows, cols, x, T, y, r0, r1 (offsets in bytes). */
export function writeMatmulOp(ctrl: Int32Array, i: number, fmt: number, w: number, s: number, sdt: number, rows: number, cols: number,
  x: number, T: number, y: number, r0: number, r1: number): void {
  writeOp(ctrl, i, MATMUL, [fmt, w, s, sdt, rows, cols, x, T, y], r0, r1);
}

/** Op `def` in slot i: its code, its arguments (i32 words, as many as it declares), then the range [h0, h1). */
export function writeOp(ctrl: Int32Array, i: number, def: OpDef, args: readonly number[], h0: number, h1: number): void {
  const n = def.args.length;
  if (args.length !== n) throw new Error(`op ${def.name}: ${args.length} arguments, want ${n}`);
  const o = OPS + i * OP_WORDS;
  ctrl[o] = opCode(def);
  for (let k = 0; k < n; k++) ctrl[o + 1 + k] = args[k]! | 0;
  ctrl[o + 1 + n] = h0;
  ctrl[o + 2 + n] = h1;
}

/** Ops one dispatch can hold. */
export function maxOps(): number {
  return MAX_OPS;
}

/** V8 heap limits of a kernel worker: its JavaScript is the claim loop over wasm calls, so a few
 *  MiB of Node's own bootstrap objects is all it keeps; capped so the memory plan's count of a
 *  worker (store/plan.ts WORKER_BYTES) is a ceiling, not a guess. */
export const WORKER_LIMITS = { maxYoungGenerationSizeMb: 2, maxOldGenerationSizeMb: 12, stackSizeMb: 1 };

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
    Atomics.store(ctrl, SLEEPERS, 0);
    Atomics.store(ctrl, DONE_SLEEPER, 0);
    const workers: Worker[] = [];
    const ready: Promise<void>[] = [];
    for (let tid = 1; tid < threads; tid++) {
      const init: WorkerInit = { kimiKernelPool: true, module, memory, tid, scratch: scratch[tid]!, spinUs: spin.worker };
      const w = new Worker(new URL(import.meta.url), { workerData: init, resourceLimits: WORKER_LIMITS } as WorkerOptions);
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

  /** A dispatch left to the workers after the calling thread's steps (run's `steps`), until join(). */
  private launched: { total: number } | null = null;

  /**
   * Run the `nops` ops already written into the control block on `nth` threads (1 = main thread
   * only, no workers woken). Synchronous: returns when every share is done; or, with `steps`, a
   * launch: returns once the first `steps` steps are done (their outputs may be read), the rest
   * going on in the workers while the caller does other work, until join(). Every run, and
   * close(), joins a launched dispatch first. Which thread runs a row never changes a number.
   */
  run(nops: number, nth: number, steps = Infinity): void {
    if (this.closed) throw new Error('kernel pool is closed');
    this.join();
    const c = this.ctrl;
    nth = Math.max(1, Math.min(nth, this.size));
    if (nth === 1) {
      // the staged ops, which no worker reads: nothing to publish or wait for
      runAll(this.ex, c, nops, this.mainScratch);
      return;
    }
    // close the last dispatch (SEQ even) and wait until no late worker is still inside it (one
    // that is finds nothing left to claim and leaves at once)
    if (Atomics.load(c, SEQ) & 1) Atomics.add(c, SEQ, 1);
    while (Atomics.load(c, ACTIVE) !== 0) {
      /* spin */
    }
    c[NOPS] = nops;
    c[NTHREADS] = nth;
    const total = stage(c, nops);
    Atomics.add(c, SEQ, 1); // odd: published
    if (Atomics.load(c, SLEEPERS) !== 0) Atomics.notify(c, SEQ);
    const err = runClaims(this.ex, c, this.mainScratch, 0, steps);
    if (leftEarly) {
      if (!err) {
        this.launched = { total };
        return;
      }
      runClaims(this.ex, c, this.mainScratch, 0); // a step failed: no launch, the rest now (its first error reported)
    }
    this.finish(total, err);
  }

  /** Finish a launched dispatch (run with `steps`): the calling thread claims what is left of it
   *  and waits for the rest. Nothing to do when none is under way. */
  join(): void {
    const l = this.launched;
    if (!l) return;
    this.launched = null;
    this.finish(l.total, runClaims(this.ex, this.ctrl, this.mainScratch, 0));
  }

  /** Wait until DONE reaches `total` (the workers' last pieces), then report a failure. */
  private finish(total: number, err: unknown): void {
    const c = this.ctrl;
    const tw = this.timed ? performance.now() : 0;
    for (;;) {
      let d = Atomics.load(c, DONE);
      if (d >= total) break;
      d = spinWhile(c, DONE, d, this.spinUs);
      if (d >= total) break;
      Atomics.store(c, DONE_SLEEPER, 1);
      if (d === Atomics.load(c, DONE)) Atomics.wait(c, DONE, d, 100);
      Atomics.store(c, DONE_SLEEPER, 0);
    }
    if (this.timed) this.waitMs += performance.now() - tw;
    if (err) throw err;
    if (Atomics.load(c, ERROR)) throw new Error('a kernel worker failed (out-of-bounds access?)');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    try {
      this.join();
    } catch {
      // closing anyway: the failure was the launched dispatch's, and nobody reads its outputs now
    }
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
  let seen = Atomics.load(ctrl, SEQ);
  parentPort?.postMessage('ready');
  for (;;) {
    // the next published dispatch: SEQ odd and new
    let s = Atomics.load(ctrl, SEQ);
    while (s === seen || !(s & 1)) {
      if (Atomics.load(ctrl, QUIT)) return;
      const v = s;
      s = spinWhile(ctrl, SEQ, v, init.spinUs);
      if (s === v) {
        Atomics.add(ctrl, SLEEPERS, 1);
        Atomics.wait(ctrl, SEQ, v);
        Atomics.sub(ctrl, SLEEPERS, 1);
        s = Atomics.load(ctrl, SEQ);
      }
    }
    if (Atomics.load(ctrl, QUIT)) return;
    Atomics.add(ctrl, ACTIVE, 1);
    // closed meanwhile: its live area may be rewritten, so stay out
    if (Atomics.load(ctrl, SEQ) === s && init.tid < ctrl[NTHREADS]!) runClaims(ex, ctrl, init.scratch, init.tid);
    Atomics.sub(ctrl, ACTIVE, 1);
    seen = s;
  }
}

if (!isMainThread && (workerData as WorkerInit | undefined)?.kimiKernelPool) {
  // Start after the module graph has settled (top-level code of an ESM worker).
  setImmediate(() => workerMain(workerData as WorkerInit));
}
