// Fast deterministic random weights for synthetic checkpoints.
//
// One xoshiro128** stream per tensor, seeded from (seed, tensor name), so a tensor's bytes do not
// depend on the tensor order, the sharding or the chunk sizes the writer uses. Every element is
// drawn as a lookup of 16 random bits in a 65,536-entry table of that element's encoded values
// (bf16 / f32 bits, fp8 bytes, nibble pairs ...): the table holds the distribution's quantiles at
// (i + 0.5) / 65536, so "N(0, s)" means a normal truncated at about ±4.3 s. One 32-bit draw makes
// two elements, with no per-element transcendental math: gigabytes take seconds, not hours.

import { E2M1_TABLE, f32ToBf16, FP8_TABLE } from '../formats/dtypes.js';

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('synth: a little-endian host is required (safetensors data is little-endian)');
}

/** 32-bit FNV-1a of a string's UTF-16 code units. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** splitmix32 step: a well-mixed 32-bit value from a counter. */
function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  let z = x;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** xoshiro128** with 32-bit state words. */
export class Rng {
  /** The state words a, b, c, d. */
  private readonly s = new Int32Array(4);

  /** Stream for (seed, name); seed may be any non-negative safe integer. */
  constructor(seed: number, name: string) {
    const lo = seed >>> 0;
    const hi = Math.floor(seed / 4294967296) >>> 0;
    let x = splitmix32(lo ^ hashString(name));
    x = splitmix32(x ^ hi);
    for (let i = 0; i < 4; i++) this.s[i] = splitmix32(x + i + 1);
    if ((this.s[0]! | this.s[1]! | this.s[2]! | this.s[3]!) === 0) this.s[0] = 1;
  }

  nextU32(): number {
    return step(this.s) >>> 0;
  }

  /** Uniform in [0, 1). */
  nextFloat(): number {
    return this.nextU32() / 4294967296;
  }

  /**
   * out[i] = tab[16 random bits]; two elements per draw (an odd last element uses the low half).
   * One method per typed-array type keeps each loop monomorphic, which is what lets multi-GB
   * checkpoints be written at disk speed; `step` is inlined into each.
   */
  map16(out: Uint16Array, tab: Uint16Array): void {
    const s = this.s, n = out.length;
    for (let i = 0; i < n; i += 2) {
      const r = step(s);
      out[i] = tab[r & 0xffff]!;
      if (i + 1 < n) out[i + 1] = tab[r >>> 16]!;
    }
  }

  /** As map16 for 32-bit elements (f32 bit patterns). */
  map32(out: Uint32Array, tab: Uint32Array): void {
    const s = this.s, n = out.length;
    for (let i = 0; i < n; i += 2) {
      const r = step(s);
      out[i] = tab[r & 0xffff]!;
      if (i + 1 < n) out[i + 1] = tab[r >>> 16]!;
    }
  }

  /** As map16 for bytes. */
  map8(out: Uint8Array, tab: Uint8Array): void {
    const s = this.s, n = out.length;
    for (let i = 0; i < n; i += 2) {
      const r = step(s);
      out[i] = tab[r & 0xffff]!;
      if (i + 1 < n) out[i + 1] = tab[r >>> 16]!;
    }
  }
}

/** One xoshiro128** step of the state s (a, b, c, d): returns the output word (signed). */
function step(s: Int32Array): number {
  let a = s[0]!, b = s[1]!, c = s[2]!, d = s[3]!;
  const r = Math.imul(rotl(Math.imul(b, 5), 7), 9);
  const t = b << 9;
  c ^= a; d ^= b; b ^= c; a ^= d; c ^= t; d = rotl(d, 11);
  s[0] = a; s[1] = b; s[2] = c; s[3] = d;
  return r;
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

// ---- distributions as 65,536-entry quantile tables ----

export const TABLE_SIZE = 65536;

/** Inverse standard normal CDF (Acklam; relative error < 1.2e-9, ample for weights). */
export function invNormal(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const lo = 0.02425;
  if (p < lo) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  if (p > 1 - lo) return -invNormal(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

let stdQuantiles: Float64Array | null = null;
/** Standard normal quantiles at (i + 0.5) / 65536. */
function normalQuantiles(): Float64Array {
  if (!stdQuantiles) {
    stdQuantiles = new Float64Array(TABLE_SIZE);
    for (let i = 0; i < TABLE_SIZE; i++) stdQuantiles[i] = invNormal((i + 0.5) / TABLE_SIZE);
  }
  return stdQuantiles;
}

/** A real-valued distribution of weight values. */
export type Dist = { kind: 'normal'; mean: number; std: number } | { kind: 'uniform'; lo: number; hi: number };

function distValues(d: Dist): Float64Array {
  const v = new Float64Array(TABLE_SIZE);
  if (d.kind === 'normal') {
    const q = normalQuantiles();
    for (let i = 0; i < TABLE_SIZE; i++) v[i] = d.mean + d.std * q[i]!;
  } else {
    for (let i = 0; i < TABLE_SIZE; i++) v[i] = d.lo + ((d.hi - d.lo) * (i + 0.5)) / TABLE_SIZE;
  }
  return v;
}

const cache = new Map<string, Uint8Array | Uint16Array | Uint32Array>();
function cached<T extends Uint8Array | Uint16Array | Uint32Array>(key: string, make: () => T): T {
  let t = cache.get(key);
  if (!t) {
    t = make();
    if (cache.size > 256) cache.clear();
    cache.set(key, t);
  }
  return t as T;
}

function distKey(d: Dist): string {
  return d.kind === 'normal' ? `n${d.mean},${d.std}` : `u${d.lo},${d.hi}`;
}

/** bf16 bit patterns of the distribution's quantiles. */
export function bf16Table(d: Dist): Uint16Array {
  return cached(`bf16:${distKey(d)}`, () => {
    const v = distValues(d);
    const t = new Uint16Array(TABLE_SIZE);
    for (let i = 0; i < TABLE_SIZE; i++) t[i] = f32ToBf16(v[i]!);
    return t;
  });
}

/** f32 bit patterns of the distribution's quantiles. */
export function f32Table(d: Dist): Uint32Array {
  return cached(`f32:${distKey(d)}`, () => {
    const v = distValues(d);
    const f = new Float32Array(TABLE_SIZE);
    for (let i = 0; i < TABLE_SIZE; i++) f[i] = v[i]!;
    return new Uint32Array(f.buffer);
  });
}

/**
 * Bytes of two 4-bit codes (low nibble from the low 8 bits of the index, high nibble from the
 * high 8), each code drawn from a 256-level quantile table of N(0, sigma) rounded to the code's
 * value set. Used for MXFP4 (E2M1 codes) and INT4 (offset-binary nibble - 8).
 */
function nibblePairTable(codes: Uint8Array): Uint8Array {
  const t = new Uint8Array(TABLE_SIZE);
  for (let i = 0; i < TABLE_SIZE; i++) t[i] = codes[i & 255]! | (codes[i >>> 8]! << 4);
  return t;
}

/** Std of the E2M1 values the MXFP4 codes take (in units of the block scale). */
export const MXFP4_CODE_SIGMA = 1.1;

/** 256 E2M1 codes: N(0, 1.1) quantiles rounded to the nearest E2M1 value (±0 by the quantile's sign). */
function mxfp4Codes(): Uint8Array {
  const codes = new Uint8Array(256);
  for (let i = 0; i < 256; i++) {
    const x = MXFP4_CODE_SIGMA * invNormal((i + 0.5) / 256);
    let best = 0;
    for (let c = 1; c < 8; c++) if (Math.abs(E2M1_TABLE[c]! - Math.abs(x)) < Math.abs(E2M1_TABLE[best]! - Math.abs(x))) best = c;
    codes[i] = x < 0 ? best | 8 : best;
  }
  return codes;
}

export function mxfp4Table(): Uint8Array {
  return cached('mxfp4', () => nibblePairTable(mxfp4Codes()));
}

/** Actual std of the MXFP4 code values (so scales hit a target std). */
let mxfp4StdMemo = 0;
export function mxfp4CodeStd(): number {
  if (mxfp4StdMemo) return mxfp4StdMemo;
  const codes = mxfp4Codes();
  let s = 0;
  for (const c of codes) s += E2M1_TABLE[c]! ** 2;
  return (mxfp4StdMemo = Math.sqrt(s / 256));
}

/**
 * E8M0 scale bytes giving weights of std `target` from code values of std `codeStd`: the exact
 * exponent x = 127 + log2(target / codeStd) is split into base = floor(x) and base + 1, the
 * latter with probability p = (4^(x - base) - 1) / 3, which makes the mean square exact.
 * (Real K3 experts: x is about 120.9 -> bytes 120 / 121, as the shipped scales 120..122.)
 */
export function e8m0Mix(target: number, codeStd: number): { base: number; pHigh: number } {
  const x = Math.max(1, Math.min(253, 127 + Math.log2(target / codeStd)));
  const base = Math.floor(x);
  const pHigh = Math.round(((4 ** (x - base) - 1) / 3) * 1e6) / 1e6;
  return { base, pHigh };
}

/** Scale bytes: `base` or `base + 1` (the latter with probability pHigh). */
export function e8m0Table(base: number, pHigh: number): Uint8Array {
  return cached(`e8m0:${base},${pHigh}`, () => {
    const t = new Uint8Array(TABLE_SIZE);
    const cut = Math.round((1 - pHigh) * TABLE_SIZE);
    for (let i = 0; i < TABLE_SIZE; i++) t[i] = i < cut ? base : base + 1;
    return t;
  });
}

/** Std of q = nibble - 8 for the INT4 codes (units of the group scale). */
export const INT4_CODE_SIGMA = 2.5;

/** 256 INT4 nibbles: round(N(0, 2.5)) clamped to [-7, 7] (the QAT checkpoints use 15 levels), + 8. */
function int4Codes(): Uint8Array {
  const codes = new Uint8Array(256);
  for (let i = 0; i < 256; i++) {
    const q = Math.max(-7, Math.min(7, Math.round(INT4_CODE_SIGMA * invNormal((i + 0.5) / 256))));
    codes[i] = q + 8;
  }
  return codes;
}

export function int4Table(): Uint8Array {
  return cached('int4', () => nibblePairTable(int4Codes()));
}

export function int4CodeStd(): number {
  let s = 0;
  for (const c of int4Codes()) s += (c - 8) ** 2;
  return Math.sqrt(s / 256);
}

/** Std of the fp8 values before the block scale. */
export const FP8_SIGMA = 64;

/** e4m3fn bytes of N(0, 64) quantiles (max |x| about 275 < 448: no saturation). */
export function fp8Table(): Uint8Array {
  return cached('fp8', () => {
    const q = normalQuantiles();
    const t = new Uint8Array(TABLE_SIZE);
    // Nearest-value encoding through a sorted list of the non-negative finite e4m3 values.
    const pos: { v: number; b: number }[] = [];
    for (let b = 0; b < 128; b++) if (Number.isFinite(FP8_TABLE[b]!)) pos.push({ v: FP8_TABLE[b]!, b });
    pos.sort((x, y) => x.v - y.v);
    for (let i = 0; i < TABLE_SIZE; i++) {
      const x = FP8_SIGMA * q[i]!;
      const ax = Math.abs(x);
      let lo = 0;
      let hi = pos.length - 1;
      while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (pos[mid]!.v <= ax) lo = mid;
        else hi = mid;
      }
      const pick = ax - pos[lo]!.v <= pos[hi]!.v - ax ? pos[lo]!.b : pos[hi]!.b;
      t[i] = x < 0 ? pick | 0x80 : pick;
    }
    return t;
  });
}

let fp8StdMemo = 0;
export function fp8Std(): number {
  if (fp8StdMemo) return fp8StdMemo;
  const t = fp8Table();
  let s = 0;
  for (let i = 0; i < TABLE_SIZE; i += 1) s += FP8_TABLE[t[i]!]! ** 2;
  return (fp8StdMemo = Math.sqrt(s / TABLE_SIZE));
}
