// A small WebAssembly binary emitter: enough of the instruction set (core + SIMD 128 + relaxed
// swizzle) to write the kernels in kernels.ts as folded expressions, the way WAT's folded form
// reads: `f32x4.add(get(acc), f32x4.mul(w, x))`. Code fragments are nested arrays of bytes,
// flattened once when the module is assembled. No build step and no dependency: the module is
// generated and compiled when the engine starts (a few milliseconds).

export type Code = number | readonly Code[];

export const I32 = 0x7f;
export const I64 = 0x7e;
export const F32 = 0x7d;
export const F64 = 0x7c;
export const V128 = 0x7b;
export type ValType = typeof I32 | typeof I64 | typeof F32 | typeof F64 | typeof V128;

export function uleb(n: number): number[] {
  if (!Number.isInteger(n) || n < 0) throw new Error(`uleb: bad value ${n}`);
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return out;
}

export function sleb(n: number): number[] {
  if (!Number.isInteger(n)) throw new Error(`sleb: bad value ${n}`);
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n = Math.floor(n / 128);
    const done = (n === 0 && (b & 0x40) === 0) || (n === -1 && (b & 0x40) !== 0);
    out.push(done ? b : b | 0x80);
    if (done) return out;
  }
}

/** Signed LEB128 of a 64-bit value. */
export function slebBig(n: bigint): number[] {
  const out: number[] = [];
  for (;;) {
    const b = Number(n & 0x7fn);
    n >>= 7n;
    const done = (n === 0n && (b & 0x40) === 0) || (n === -1n && (b & 0x40) !== 0);
    out.push(done ? b : b | 0x80);
    if (done) return out;
  }
}

function flatten(c: Code, out: number[]): void {
  if (typeof c === 'number') out.push(c);
  else for (const x of c) flatten(x, out);
}

const enc = new TextEncoder();
function name(s: string): number[] {
  const b = enc.encode(s);
  return [...uleb(b.length), ...b];
}
function vec(items: number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}
function section(id: number, body: number[]): number[] {
  return body.length ? [id, ...uleb(body.length), ...body] : [];
}

// ---- core instructions -------------------------------------------------------------------

const memarg = (align: number, off: number): number[] => [...uleb(align), ...uleb(off)];

export const get = (l: number): Code => [0x20, uleb(l)];
export const set = (l: number, v: Code): Code => [v, 0x21, uleb(l)];
export const tee = (l: number, v: Code): Code => [v, 0x22, uleb(l)];
export const drop = (v: Code): Code => [v, 0x1a];
export const call = (f: number, ...args: Code[]): Code => [args, 0x10, uleb(f)];
export const ret = (v?: Code): Code => [v ?? [], 0x0f];

const bin = (op: number) => (a: Code, b: Code): Code => [a, b, op];
const un = (op: number) => (a: Code): Code => [a, op];

export const i32 = {
  const: (n: number): Code => [0x41, sleb(n | 0)],
  load: (a: Code, off = 0): Code => [a, 0x28, memarg(2, off)],
  load8_u: (a: Code, off = 0): Code => [a, 0x2d, memarg(0, off)],
  load16_u: (a: Code, off = 0): Code => [a, 0x2f, memarg(1, off)],
  store: (a: Code, v: Code, off = 0): Code => [a, v, 0x36, memarg(2, off)],
  eqz: un(0x45),
  eq: bin(0x46), ne: bin(0x47), lt_s: bin(0x48), lt_u: bin(0x49), gt_s: bin(0x4a), gt_u: bin(0x4b),
  le_s: bin(0x4c), le_u: bin(0x4d), ge_s: bin(0x4e), ge_u: bin(0x4f),
  add: bin(0x6a), sub: bin(0x6b), mul: bin(0x6c), div_u: bin(0x6e), rem_u: bin(0x70),
  and: bin(0x71), or: bin(0x72), xor: bin(0x73), shl: bin(0x74), shr_s: bin(0x75), shr_u: bin(0x76),
  reinterpret_f32: un(0xbc),
};

export const f32 = {
  const: (x: number): Code => {
    const b = new Uint8Array(new Float32Array([x]).buffer);
    return [0x43, ...b];
  },
  load: (a: Code, off = 0): Code => [a, 0x2a, memarg(2, off)],
  store: (a: Code, v: Code, off = 0): Code => [a, v, 0x38, memarg(2, off)],
  eq: bin(0x5b), ne: bin(0x5c),
  add: bin(0x92), sub: bin(0x93), mul: bin(0x94), div: bin(0x95),
  convert_i32_s: un(0xb2),
  reinterpret_i32: un(0xbe),
  demote_f64: un(0xb6),
};

export const f64 = {
  const: (x: number): Code => [0x44, ...new Uint8Array(new Float64Array([x]).buffer)],
  load: (a: Code, off = 0): Code => [a, 0x2b, memarg(3, off)],
  store: (a: Code, v: Code, off = 0): Code => [a, v, 0x39, memarg(3, off)],
  lt: bin(0x63), gt: bin(0x64),
  neg: un(0x9a), sqrt: un(0x9f),
  add: bin(0xa0), sub: bin(0xa1), mul: bin(0xa2), div: bin(0xa3),
  convert_i32_s: un(0xb7),
  promote_f32: un(0xbb),
  reinterpret_i64: un(0xbf),
};

export const i64 = {
  const: (n: bigint): Code => [0x42, slebBig(n)],
  sub: bin(0x7d), shl: bin(0x86),
  reinterpret_f64: un(0xbd),
};

/** select(a, b, c): c ? a : b (both evaluated). */
export const select = (a: Code, b: Code, c: Code): Code => [a, b, c, 0x1b];

// ---- SIMD ----------------------------------------------------------------------------------

const simd = (op: number): number[] => [0xfd, ...uleb(op)];
const vbin = (op: number) => (a: Code, b: Code): Code => [a, b, simd(op)];
const vun = (op: number) => (a: Code): Code => [a, simd(op)];
const vshift = (op: number) => (a: Code, n: Code): Code => [a, n, simd(op)];

export const v128 = {
  load: (a: Code, off = 0): Code => [a, simd(0x00), memarg(4, off)],
  load8x8_u: (a: Code, off = 0): Code => [a, simd(0x02), memarg(3, off)],
  load16x4_u: (a: Code, off = 0): Code => [a, simd(0x04), memarg(3, off)],
  load32_splat: (a: Code, off = 0): Code => [a, simd(0x09), memarg(2, off)],
  load64_zero: (a: Code, off = 0): Code => [a, simd(0x5d), memarg(3, off)],
  store: (a: Code, v: Code, off = 0): Code => [a, v, simd(0x0b), memarg(4, off)],
  /** 16 bytes, given as bytes. */
  constBytes: (b: ArrayLike<number>): Code => {
    if (b.length !== 16) throw new Error('v128.const needs 16 bytes');
    return [simd(0x0c), Array.from(b, (x) => x & 0xff)];
  },
  i32x4: (a: number, b: number, c: number, d: number): Code =>
    v128.constBytes(new Uint8Array(new Int32Array([a, b, c, d]).buffer)),
  i8x16: (...x: number[]): Code => v128.constBytes(new Uint8Array(new Int8Array(x).buffer)),
  f32x4: (a: number, b: number, c: number, d: number): Code =>
    v128.constBytes(new Uint8Array(new Float32Array([a, b, c, d]).buffer)),
  not: vun(0x4d), and: vbin(0x4e), andnot: vbin(0x4f), or: vbin(0x50), xor: vbin(0x51),
  bitselect: (a: Code, b: Code, m: Code): Code => [a, b, m, simd(0x52)],
};

export const i8x16 = {
  /** Byte shuffle of two vectors; lanes 0..15 pick from a, 16..31 from b. */
  shuffle: (a: Code, b: Code, lanes: readonly number[]): Code => {
    if (lanes.length !== 16 || lanes.some((l) => l < 0 || l > 31)) throw new Error('bad shuffle');
    return [a, b, simd(0x0d), lanes];
  },
  swizzle: vbin(0x0e),
  /** Relaxed swizzle: same as swizzle whenever every index is in 0..15. */
  relaxed_swizzle: vbin(0x100),
  splat: vun(0x0f),
  eq: vbin(0x23),
  sub: vbin(0x71),
  shr_u: vshift(0x6d),
  /** Signed saturating narrow: lanes 0-7 from a, 8-15 from b. */
  narrow_i16x8_s: vbin(0x65),
};

export const i16x8 = {
  splat: vun(0x10),
  /** Signed saturating narrow: lanes 0-3 from a, 4-7 from b. */
  narrow_i32x4_s: vbin(0x85),
  extend_low_i8x16_s: vun(0x87),
  extend_high_i8x16_s: vun(0x88),
  extend_low_i8x16_u: vun(0x89),
  extend_high_i8x16_u: vun(0x8a),
  shl: vshift(0x8b), shr_u: vshift(0x8d),
};

export const i32x4 = {
  splat: vun(0x11),
  extract_lane: (a: Code, l: number): Code => [a, simd(0x1b), l],
  eq: vbin(0x37), lt_s: vbin(0x39), gt_s: vbin(0x3b),
  extend_low_i16x8_s: vun(0xa7),
  extend_high_i16x8_s: vun(0xa8),
  extend_low_i16x8_u: vun(0xa9),
  extend_high_i16x8_u: vun(0xaa),
  shl: vshift(0xab), shr_s: vshift(0xac), shr_u: vshift(0xad),
  add: vbin(0xae), sub: vbin(0xb1),
  min_s: vbin(0xb6),
  /** Both f64 lanes toward zero into lanes 0-1 (NaN -> 0, out of range -> INT32_MIN / MAX); lanes 2-3 zero. */
  trunc_sat_f64x2_s_zero: vun(0xfc),
};

export const f32x4 = {
  splat: vun(0x13),
  extract_lane: (a: Code, l: number): Code => [a, simd(0x1f), l],
  abs: vun(0xe0),
  add: vbin(0xe4), sub: vbin(0xe5), mul: vbin(0xe6),
  /** pmin(a, b) = b < a ? b : a;  pmax(a, b) = a < b ? b : a (per lane, as written: a NaN b leaves a). */
  pmin: vbin(0xea), pmax: vbin(0xeb),
  convert_i32x4_s: vun(0xfa),
  /** Both f64 lanes rounded to f32 (nearest even) in lanes 0-1; lanes 2-3 zero. */
  demote_f64x2_zero: vun(0x5e),
  /** relaxed_madd(a, b, c) = a*b + c: fused (one rounding) or not, as the machine does it
   *  (loader.ts fusedMaddAvailable tells which). */
  relaxed_madd: (a: Code, b: Code, c: Code): Code => [a, b, c, simd(0x105)],
};

export const f64x2 = {
  splat: vun(0x14),
  /** Lanes 0-1 of an f32x4, exactly. */
  promote_low_f32x4: vun(0x5f),
  lt: vbin(0x49), gt: vbin(0x4a),
  abs: vun(0xec), neg: vun(0xed),
  add: vbin(0xf0), sub: vbin(0xf1), mul: vbin(0xf2), div: vbin(0xf3),
  /** pmin(a, b) = b < a ? b : a;  pmax(a, b) = a < b ? b : a (per lane, as written). */
  pmin: vbin(0xf6), pmax: vbin(0xf7),
};

export const i64x2 = {
  shl: vshift(0xcb), shr_s: vshift(0xcc), add: vbin(0xce), sub: vbin(0xd1), eq: vbin(0xd6),
};

/** 32-bit-lane shuffle of two vectors: lanes 0..3 pick from a, 4..7 from b. */
export function shuffle32(a: Code, b: Code, l: readonly number[]): Code {
  return i8x16.shuffle(a, b, l.flatMap((x) => [4 * x, 4 * x + 1, 4 * x + 2, 4 * x + 3]));
}

// ---- control -------------------------------------------------------------------------------

export const block = (...body: Code[]): Code => [0x02, 0x40, body, 0x0b];
export const loop = (...body: Code[]): Code => [0x03, 0x40, body, 0x0b];
export const br = (depth: number): Code => [0x0c, uleb(depth)];
export const br_if = (depth: number, cond: Code): Code => [cond, 0x0d, uleb(depth)];
export const if_ = (cond: Code, then: Code[], els?: Code[]): Code =>
  els ? [cond, 0x04, 0x40, then, 0x05, els, 0x0b] : [cond, 0x04, 0x40, then, 0x0b];
/** Typed if/else producing a value. */
export const ifv = (t: ValType, cond: Code, then: Code, els: Code): Code => [cond, 0x04, t, then, 0x05, els, 0x0b];

// ---- functions and modules -----------------------------------------------------------------

export class Fn {
  readonly params: ValType[] = [];
  readonly locals: ValType[] = [];
  private readonly names = new Map<string, number>();
  body: Code = [];
  /** Code run first (constants loaded into locals: V8 then keeps them in registers). */
  readonly prologue: Code[] = [];
  index = -1;

  constructor(
    readonly name: string,
    params: Record<string, ValType>,
    readonly result: ValType | null = null,
    readonly exported = true,
  ) {
    for (const [n, t] of Object.entries(params)) {
      this.names.set(n, this.params.length);
      this.params.push(t);
    }
  }

  /** Index of parameter or local `n`. */
  p(n: string): number {
    const i = this.names.get(n);
    if (i === undefined) throw new Error(`${this.name}: no local ${n}`);
    return i;
  }

  has(n: string): boolean {
    return this.names.has(n);
  }

  /** Declare a local (or return the existing one of that name). */
  local(n: string, t: ValType): number {
    const i = this.names.get(n);
    if (i !== undefined) return i;
    const idx = this.params.length + this.locals.length;
    this.locals.push(t);
    this.names.set(n, idx);
    return idx;
  }
}

export interface MemoryImport {
  module: string;
  name: string;
  minPages: number;
  maxPages: number;
  shared: boolean;
}

/** An imported function (env.<name>): it takes the function indices before the module's own. */
export interface FuncImport {
  module: string;
  name: string;
  params: ValType[];
  result: ValType | null;
}

/** The module: the `imported` functions (indices 0 ..), then `fns` (indices imported.length ..). */
export function assemble(fns: Fn[], mem: MemoryImport, imported: readonly FuncImport[] = []): Uint8Array<ArrayBuffer> {
  const types: string[] = [];
  const typeBytes: number[][] = [];
  const typeOf = (params: readonly ValType[], result: ValType | null): number => {
    const t = [0x60, ...uleb(params.length), ...params, ...(result === null ? [0] : [1, result])];
    const key = t.join(',');
    let ti = types.indexOf(key);
    if (ti < 0) {
      ti = types.length;
      types.push(key);
      typeBytes.push(t);
    }
    return ti;
  };
  fns.forEach((f, i) => {
    if (f.index >= 0 && f.index !== imported.length + i) throw new Error(`${f.name}: numbered ${f.index}, placed at ${imported.length + i}`);
    f.index = imported.length + i;
  });
  const importTypes = imported.map((g) => typeOf(g.params, g.result));
  const fnType = fns.map((f) => typeOf(f.params, f.result));
  const limits = mem.shared ? [0x03, ...uleb(mem.minPages), ...uleb(mem.maxPages)] : [0x01, ...uleb(mem.minPages), ...uleb(mem.maxPages)];
  const imports = vec([
    [...name(mem.module), ...name(mem.name), 0x02, ...limits],
    ...imported.map((g, i) => [...name(g.module), ...name(g.name), 0x00, ...uleb(importTypes[i]!)]),
  ]);
  const funcs = vec(fnType.map((t) => uleb(t)));
  const exports = vec(fns.filter((f) => f.exported).map((f) => [...name(f.name), 0x00, ...uleb(f.index)]));
  const bodies = fns.map((f) => {
    // locals, run-length encoded by type
    const groups: number[][] = [];
    for (const t of f.locals) {
      const g = groups[groups.length - 1];
      if (g && g[1] === t) g[0]!++;
      else groups.push([1, t]);
    }
    const code: number[] = [];
    flatten(f.prologue, code);
    flatten(f.body, code);
    const body = [...vec(groups.map(([n, t]) => [...uleb(n!), t!])), ...code, 0x0b];
    return [...uleb(body.length), ...body];
  });
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec(typeBytes)),
    ...section(2, imports),
    ...section(3, funcs),
    ...section(7, exports),
    ...section(10, vec(bodies)),
  ]);
}
