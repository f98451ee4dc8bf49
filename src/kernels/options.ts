// The options and argument types of a Kernels instance (fast.ts), and the scratch it sizes.

import type { WeightView } from '../formats/weight.js';
import { TILE_SCRATCH } from './wasm/kernels.js';
import { PANEL_ACC_BYTES } from './wasm/mm1.js';
import type { ChainMlp } from './chain.js';

/** Kernel memory of one thread's scratch area for matrices up to `maxCols` columns: decoded /
 *  widened rows, or a panelled product's accumulators (wasm/mm1.ts addPanelled). */
export function threadScratchBytes(maxCols: number): number {
  return Math.max(3 * align(align(Math.max(16, maxCols), 16) * 4, 64), PANEL_ACC_BYTES) + 256 + TILE_SCRATCH;
}

export interface KernelsOptions {
  /** Threads in all, the calling thread included. Default: os.availableParallelism(). */
  threads?: number;
  /** Bytes of memory committed at start; the arena grows on demand. Default 64 MiB. */
  memoryBytes?: number;
  /** Declared maximum of the shared memory, at most 4 GiB - 64 KiB (the default). */
  maxMemoryBytes?: number;
  /** Use relaxed SIMD where it cannot change results (table lookups). Default true if available. */
  relaxed?: boolean;
  /** Widest matrix (columns) the per-thread scratch must hold. Default 32768. */
  maxCols?: number;
  /** Multiply-adds per extra thread below which a call stays on the calling thread. Default 2^17. */
  minWorkPerThread?: number;
  /** Spin before sleeping, microseconds: workers waiting for work, the caller waiting for workers. */
  spinMicros?: { worker: number; main: number };
  /** Column tiles of the fused kernels (tuning; see ops/kda-step.ts, ops/mla-wsum.ts). */
  kdaTile?: number;
  wsumTile?: number;
  /** The 8-bit paths' integer dot form (wasm/loader.ts intDotAddIsOne; the same bytes either way). */
  intDotAdd?: boolean;
}

/** A region of kernel memory. */
export interface Region {
  /** Byte offset in the memory (what the kernels address). */
  offset: number;
  bytes: number;
  u8: Uint8Array;
}

/** One independent product of a batch: y[t, r] = W[r, :] . x[t, :] for t < T, r in [r0, r1). */
export interface MatmulOp {
  w: WeightView;
  x: Float32Array;
  T: number;
  y: Float32Array;
  r0?: number;
  r1?: number;
}

export const align = (n: number, a: number): number => Math.ceil(n / a) * a;

/** One gated MLP of a batch: y [T, down.rows] = down · act(gate · x, up · x), x [T, gate.cols]. */
export type GatedMlpOp = ChainMlp & { y: Float32Array };

/** An output computed in the arena at `off`, copied to `y` (rows [r0, r1) of each token) after the dispatch. */
export interface OutCopy {
  y: Float32Array;
  off: number;
  T: number;
  rows: number;
  r0: number;
  r1: number;
}
