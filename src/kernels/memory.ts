// The memory of a Kernels instance (fast.ts): one shared WebAssembly.Memory whose bump arena
// hands out regions; mark()/release() free them in stack order.

import type { WeightView } from '../formats/weight.js';
import { align, type Region } from './options.js';
import { GiB, formatMiB } from '../util/format.js';

const PAGE = 65536;

export class KernelMemory {
  protected top: number;
  private readonly buffers = new WeakSet<ArrayBufferLike>();
  /** The memory's buffer and its length as of the last grow (only this instance grows its
   *  memory; a grown shared memory hands out a new buffer, the old one staying valid). Kept so
   *  that the many allocations and checks of a call do not go through the buffer getter. */
  protected mem: ArrayBufferLike;
  private memBytes: number;

  constructor(readonly memory: WebAssembly.Memory, arenaStart: number) {
    this.top = arenaStart;
    this.mem = memory.buffer;
    this.memBytes = this.mem.byteLength;
    this.buffers.add(this.mem);
  }

  /** Make the memory at least `end` bytes long. */
  private growTo(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      try {
        this.memory.grow(Math.ceil((end - have) / PAGE));
      } catch {
        throw new RangeError(`kernel memory exhausted: need ${end} bytes, maximum ${formatMiB(have)} reached`);
      }
    }
    this.mem = this.memory.buffer;
    this.memBytes = this.mem.byteLength;
    this.buffers.add(this.mem);
  }

  /** Allocate `bytes` (aligned to `align`, default 64) from the arena, zero-filled on first use only. */
  alloc(bytes: number, alignment = 64): Region {
    if (!(bytes >= 0) || !Number.isInteger(bytes)) throw new RangeError(`alloc: bad size ${bytes}`);
    const offset = this.allocOffset(bytes, alignment);
    return { offset, bytes, u8: new Uint8Array(this.mem, offset, bytes) };
  }

  /** alloc without the view: the offset only (kernel arguments). */
  protected allocOffset(bytes: number, alignment = 64): number {
    const offset = align(this.top, alignment);
    const end = offset + bytes;
    if (end > this.memBytes) this.growTo(end);
    this.top = end;
    if (end > this.peak) this.peak = end;
    return offset;
  }

  /** A Float32Array of n elements in kernel memory. */
  allocF32(n: number): Float32Array {
    const r = this.alloc(n * 4, 64);
    return new Float32Array(this.mem, r.offset, n);
  }

  private peak = 0;

  /** The highest the arena top has been: what stays allocated, and the temporaries of the
   *  largest call on top (test/store/memory.test.ts checks them against the plan's count). */
  get peakTop(): number {
    return this.peak;
  }

  /** Current arena top, for release(). */
  mark(): number {
    return this.top;
  }

  /** Free everything allocated since mark() returned m. */
  release(m: number): void {
    if (m > this.top) throw new RangeError('release: mark is above the arena top');
    this.top = m;
  }

  /** Whether a view lies in this kernel memory (then it can be used in place). */
  contains(a: ArrayBufferView): boolean {
    const b = a.buffer;
    return b === this.mem || this.buffers.has(b);
  }

  /** Copy a weight into the arena; the returned view is used in place by every call. */
  upload(w: WeightView): WeightView {
    const d = this.alloc(w.data.byteLength);
    d.u8.set(w.data);
    let scale: Uint8Array | undefined;
    if (w.scale) {
      const s = this.alloc(w.scale.byteLength);
      s.u8.set(w.scale);
      scale = s.u8;
    }
    return { ...w, data: d.u8, scale };
  }

  protected copyIn(a: ArrayBufferView): number {
    const r = this.alloc(a.byteLength);
    r.u8.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    return r.offset;
  }
}

/** Weight bytes placed in one instance's memory (below its 4 GiB maximum, leaving room for copies of activations). */
export const PER_MEMORY = Math.floor(3.75 * GiB);

/** Kernel instances (each with its own memory and threads) a group makes for `weightBytes`. */
export function kernelMembers(weightBytes: number): number {
  return Math.max(1, Math.ceil(weightBytes / PER_MEMORY));
}
