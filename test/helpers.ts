// Shared test helpers: paths to fixtures, an in-memory tensor store, byte comparison.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TensorEntry } from '../src/checkpoint/safetensors.js';
import type { DType } from '../src/formats/dtypes.js';
import type { ModelConfig } from '../src/checkpoint/config.js';
import { WeightStore, type ByteReader } from '../src/store/store.js';
import { buildLayout } from '../src/store/layout.js';
import { stateSize } from '../src/model/state.js';
import { KERNEL_PIECES } from '../src/graph/pieces.js';

/** Repository root (tests run from dist/test/). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');
/** Third-party data (goldens, real K3 bytes and traces) is read in place beside the clone, never copied in. */
export const SHARED = path.join(ROOT, '..', 'shared');
export const GOLDEN = path.join(SHARED, 'golden');
export const REALDATA = path.join(SHARED, 'realdata');
export const CLI = path.join(ROOT, 'dist', 'src', 'main.js');

/**
 * Max |logit - golden| allowed against the float64 reference logits of ../shared/golden, on
 * the 32- and the 300-token prompt alike. What f32 arithmetic justifies: the golden README puts
 * llama.cpp's f32 CPU build within 1e-5 .. 6e-5 (K2, Kimi Linear) and about 1e-4 (K3) of the same
 * reference; this engine measures at most 5.5e-5 (K3 short), 4.6e-5 (K3 long), under 1.5e-5 for
 * the others. 2e-4 leaves a margin over f32 noise; a wrong formula moves logits by units.
 */
export const GOLDEN_TOL = 2e-4;

export interface MemTensor {
  dtype: DType;
  shape: number[];
  bytes: Uint8Array;
}

/** A WeightStore over tensors held in memory (one fake file), for block-level fixtures that hold part of a model. */
export function memoryStore(cfg: ModelConfig, tensors: Record<string, MemTensor>): WeightStore {
  // One fake file: the tensors back to back, read by (offset, length) like a real shard.
  const entries = new Map<string, TensorEntry>();
  let off = 0;
  for (const [name, t] of Object.entries(tensors)) {
    entries.set(name, { name, file: 'memory', dtype: t.dtype, shape: t.shape, offset: off, nbytes: t.bytes.byteLength });
    off += t.bytes.byteLength;
  }
  const file = new Uint8Array(off);
  for (const [name, t] of Object.entries(tensors)) file.set(t.bytes, entries.get(name)!.offset);
  const reader: ByteReader = {
    async read(_file, offset, into) {
      into.set(file.subarray(offset, offset + into.byteLength));
    },
    close() {},
  };
  return new WeightStore({ cfg, entries, layout: buildLayout(cfg, entries, undefined, true), reader, state: stateSize(cfg), budget: Number.MAX_SAFE_INTEGER, ctx: 64, chunk: 64, pieces: KERNEL_PIECES });
}

export function f32Tensor(data: number[] | Float32Array, shape: number[]): MemTensor {
  const f = Float32Array.from(data);
  return { dtype: 'F32', shape, bytes: new Uint8Array(f.buffer) };
}

export function sameBytes(a: Float32Array, b: Float32Array): boolean {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

/** Largest |a-b| - (abs + rel·|b|) over all elements; <= 0 means within tolerance. */
export function worstExcess(a: ArrayLike<number>, b: ArrayLike<number>, abs: number, rel: number): { excess: number; maxAbs: number; at: number } {
  let excess = -Infinity, maxAbs = 0, at = -1;
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    const e = d - (abs + rel * Math.abs(b[i]!));
    if (e > excess) {
      excess = e;
      at = i;
    }
    if (d > maxAbs) maxAbs = d;
  }
  return { excess, maxAbs, at };
}

/**
 * The path of a fixture that must exist: a missing one fails the test with a message naming the
 * path (never a silent fallback to other data).
 */
export function fixture(...parts: string[]): string {
  const p = path.join(...parts);
  if (!fs.existsSync(p)) throw new Error(`missing test fixture ${p}`);
  return p;
}

/** The tokenizer goldens. */
export const TOKENIZER = path.join(GOLDEN, 'tokenizer');

/** A fixture file's text, and a .jsonl fixture as parsed lines. */
export function readFixture(dir: string, f: string): string {
  return fs.readFileSync(path.join(dir, f), 'utf8');
}
export function readJsonl<T>(dir: string, f: string): T[] {
  return readFixture(dir, f)
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as T);
}

/** A deterministic xorshift32 generator of uniforms in [0, 1), for random test inputs. */
export function xorshift(seed: number): () => number {
  let s = seed;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

/** A tensor's bytes from its file, by positioned read. */
export function readTensorBytes(e: TensorEntry): Buffer {
  const fd = fs.openSync(e.file, 'r');
  try {
    const buf = Buffer.alloc(e.nbytes);
    fs.readSync(fd, buf, 0, e.nbytes, e.offset);
    return buf;
  } finally {
    fs.closeSync(fd);
  }
}
