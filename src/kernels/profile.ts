// Where a token's time goes inside the kernels (`k3 bench --profile`). A Kernels instance with a
// profile attached adds the wall time of each of its calls to one bucket; the caller measures the
// whole forward, and what the buckets do not hold is JavaScript outside the kernels (norms, rope,
// router, softmax, AttnRes, the store). Off (null) by default: then nothing is timed.
//
//   matmul      trunk products (every format but the expert formats), the calling thread's share
//   experts     dispatches holding products of mxfp4 / int4 weights (routed experts; K3's shared
//               expert joins them when no expert is being read), the calling thread's share
//   fused       KDA step, MLA scores and weighted sum, gated activations
//   dispatch    JavaScript around a kernel call: checks, activation copies and permutes, q8
//               quantization, op words, output copies
//   wait        the calling thread waiting for the workers after its own share (load imbalance
//               and wake-up latency; zero on one thread)

export type ProfileBucket = 'matmul' | 'experts' | 'fused' | 'dispatch' | 'wait';
export const PROFILE_BUCKETS: readonly ProfileBucket[] = ['matmul', 'experts', 'fused', 'dispatch', 'wait'];

export class KernelProfile {
  /** Milliseconds per bucket since the last reset. */
  readonly ms: Record<ProfileBucket, number> = { matmul: 0, experts: 0, fused: 0, dispatch: 0, wait: 0 };
  /** Kernel calls (dispatches to the pool or direct calls on the calling thread). */
  calls = 0;
  /** Of those, calls that woke the workers. */
  pooled = 0;
  /** Milliseconds of kernel calls (in matmul, experts or fused) that ran on the calling thread
   *  alone although the instance has workers (too small to split, or single-threaded kernels:
   *  matvecT, gated activations): what the other threads sit out. */
  soloMs = 0;

  add(b: ProfileBucket, ms: number): void {
    this.ms[b] += ms;
  }

  reset(): void {
    for (const b of PROFILE_BUCKETS) this.ms[b] = 0;
    this.calls = 0;
    this.pooled = 0;
    this.soloMs = 0;
  }
}

/** What the timers need of the pool (pool.ts Pool). */
export interface TimedPool {
  readonly size: number;
  waitMs: number;
  run(nops: number, nth: number): void;
}

/** pool.run, its time split into `bucket` (the calling thread's share) and waiting for the workers. */
export function timedRun(p: KernelProfile, pool: TimedPool, nops: number, nth: number, bucket: ProfileBucket): void {
  const t0 = performance.now();
  pool.waitMs = 0;
  try {
    pool.run(nops, nth);
  } finally {
    const w = pool.waitMs, ms = performance.now() - t0 - w;
    p.add(bucket, ms);
    if (nth <= 1 && pool.size > 1) p.soloMs += ms;
    p.add('wait', w);
    p.calls++;
    if (nth > 1) p.pooled++;
  }
}

/** Adds the time of a whole call to 'dispatch', less what timedRun put in other buckets meanwhile. */
export function timedCall<R>(p: KernelProfile | null, fn: () => R): R {
  if (!p) return fn();
  const inner = (): number => p.ms.matmul + p.ms.experts + p.ms.fused + p.ms.wait;
  const t0 = performance.now(), i0 = inner();
  try {
    return fn();
  } finally {
    p.add('dispatch', performance.now() - t0 - (inner() - i0));
  }
}
