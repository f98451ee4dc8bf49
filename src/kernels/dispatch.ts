// Which kernel runs a product: the WebAssembly kernels whose memory holds the weight's bytes
// (zero copy), or the TypeScript reference. Both give the same bytes (docs/NUMERICS.md), so the
// choice is only about speed. Node 20 caps one WebAssembly.Memory at 4 GiB, so a large budget
// uses a group of kernel instances, each with its own memory and workers; a weight is computed
// by the instance whose memory it lives in.

import { createKernels, type Kernels, type KernelsOptions } from './fast.js';
import * as ref from './ref.js';
import type { WeightView } from './types.js';

const GiB = 2 ** 30;
/** Weight bytes placed in one instance's memory (below its 4 GiB maximum, leaving room for copies of activations). */
const PER_MEMORY = Math.floor(3.75 * GiB);

export class KernelGroup {
  private current = 0;
  private used: number[];

  private constructor(readonly members: Kernels[]) {
    this.used = members.map(() => 0);
  }

  /** Enough instances for `weightBytes` bytes of weight memory. */
  static async create(weightBytes: number, opts: KernelsOptions): Promise<KernelGroup> {
    const n = Math.max(1, Math.ceil(weightBytes / PER_MEMORY));
    const members: Kernels[] = [];
    for (let i = 0; i < n; i++) members.push(await createKernels({ ...opts, memoryBytes: Math.min(PER_MEMORY, weightBytes) + 64 * 2 ** 20 }));
    return new KernelGroup(members);
  }

  get threads(): number {
    return this.members[0]!.threads;
  }

  /** Bytes of kernel memory for weights, used in place by the kernels. */
  alloc(bytes: number): Uint8Array {
    while (this.current < this.members.length) {
      if (this.used[this.current]! + bytes <= PER_MEMORY) {
        this.used[this.current]! += bytes;
        return this.members[this.current]!.alloc(bytes, 4096).u8;
      }
      this.current++;
    }
    // Over the planned size (should not happen): plain memory, computed with a copy per call.
    return new Uint8Array(bytes);
  }

  owner(w: WeightView): Kernels | null {
    for (const k of this.members) if (k.contains(w.data)) return k;
    return null;
  }

  async close(): Promise<void> {
    for (const k of this.members) await k.close();
  }
}

let active: KernelGroup | null = null;

/** Route products through `group` (null: the TypeScript reference only). */
export function useKernels(group: KernelGroup | null): void {
  active = group;
}

export function activeKernels(): KernelGroup | null {
  return active;
}

/** y[t, r] = W[r, :] · x[t, :] for t < T (see ref.matmul). */
export function matmul(w: WeightView, x: Float32Array, T: number, y: Float32Array): void {
  const k = active?.owner(w);
  if (k) k.matmul(w, x, T, y);
  else ref.matmul(w, x, T, y);
}

/** y[c] = Σ_k x[xo+k] · W[r0+k, c] (see ref.matvecT). */
export function matvecT(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
  const k = active?.owner(w);
  if (k) k.matvecT(w, r0, n, x, xo, y);
  else ref.matvecT(w, r0, n, x, xo, y);
}
