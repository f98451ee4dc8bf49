// What an op of the kernel pool is (docs/KERNELS.md is generated from these declarations): its
// arguments as the worker passes them (i32 words), how its range splits over threads, what must
// lie in kernel memory, the TypeScript reference it reproduces byte for byte, and its emitter.
// An op's code and its word offsets are its place in ops/registry.ts, never numbered by hand.

import type { Code, Fn, ValType } from '../wasm/emit.js';
import type { Madd } from '../wasm/fma.js';

/**
 * One i32 word of an op. `int`: a plain integer (a dim when it names one); `bytes`: a byte stride
 * (`value`, an expression over the dims); `f32`/`f64`/`i32`: the byte offset of an array of that
 * element type holding `shape` elements (u8: bytes); `table`: the offset of `count` i32 byte offsets, each of
 * an f32 array of `shape` elements.
 */
export interface ArgDecl {
  name: string;
  kind: 'int' | 'bytes' | 'u8' | 'f32' | 'f64' | 'i32' | 'table';
  shape?: string;
  count?: string;
  value?: string;
  /** in (read), out (written), inout (both), scratch (written, meaningless after). */
  io?: 'in' | 'out' | 'inout' | 'scratch';
  /** Values the registry test draws for it: [lo, hi) uniform. Default [-1, 1). */
  draw?: readonly [number, number];
  doc?: string;
}

/** What an emitter gets while the module is generated (wasm/kernels.ts generate). */
export interface EmitCtx {
  fnx: (name: string, params: Record<string, ValType>, result?: ValType | null, exported?: boolean) => Fn;
  finalize: (f: Fn, perm: 'id', acc: readonly number[], tag: string) => Code;
  madd: Madd;
  /** The function index of the imported Math.exp. */
  expFn: number;
  opts: { kdaTile?: number; wsumTile?: number };
  /** The index of a function already in the module, by name; `make` adds it first when it is not. */
  fn(name: string, make?: () => Fn): number;
}

/** A piece of the op at word o of `w`: its range [a, b). */
export type Runner = (w: Int32Array, o: number, a: number, b: number, scratch: number) => void;

/** The reference the registry test compares with: functions by name, each from a module under
 *  src/ ('model/mla.js'), and how to call them on the drawn arguments. */
export interface RefDecl {
  /** What the docs name: function and file. */
  name: string;
  fns: Readonly<Record<string, string>>;
  run(f: Record<string, (...a: any[]) => any>, a: DrawnArgs, dims: Readonly<Record<string, number>>): void;
}

/** Arrays and values of one draw, by argument name (tables as arrays of arrays). */
export type DrawnArgs = Record<string, Float32Array | Float64Array | Int32Array | Float32Array[] | number>;

export interface OpDef {
  /** The module's export (generic ops) or the op's own name (ops with a runner). */
  name: string;
  summary: string;
  args: readonly ArgDecl[];
  /** What the range [a, b) counts, over which threads split the op, and its extent. */
  split: { unit: string; range: string };
  /** What must lie in kernel memory when the op runs in a chain (docs/KERNELS.md). */
  place: string;
  /** The reference (generic ops): drawn, run and compared by test/kernels/ops.test.ts. */
  ref?: RefDecl;
  /** Where the reference is and which test compares with it, for ops the registry test does not draw. */
  refNote?: string;
  /** Dims the registry test draws, [lo, hi] inclusive. */
  dims?: Readonly<Record<string, readonly [number, number]>>;
  /** Adds the op's functions to the module (ops emitted with the matmuls have none). */
  emit?: (c: EmitCtx) => void;
  /** A custom piece runner (ops that are not one export called as (...words, a, b)). */
  bind?: (ex: Record<string, (...a: number[]) => number>) => Runner;
  /** Claimed pieces: a multiple of `gran` units, at least min(w, o). Default 1, 1. */
  claim?: { gran: number; min(w: Int32Array, o: number): number };
}

/** The value of an expression of dims: sums of products of names and integers ('T*Lk+T*dr'). */
export function dimExpr(e: string, dims: Readonly<Record<string, number>>): number {
  let sum = 0;
  for (const term of e.split('+')) {
    let p = 1;
    for (const f of term.split('*')) {
      const t = f.trim();
      const v = /^\d+$/.test(t) ? Number(t) : dims[t];
      if (v === undefined) throw new Error(`op shape ${e}: no dim ${t}`);
      p *= v;
    }
    sum += p;
  }
  return sum;
}
