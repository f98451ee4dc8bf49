// The dot's multiply-add (docs/NUMERICS.md): fma32 in the reference, f32x4.relaxed_madd where the
// machine fuses it, and the f64 emulation of kernels/wasm/fma.ts, each against an exact rounding
// computed with BigInt, on random operands and on ones built to catch a double rounding.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { dot, fma32 } from '../../src/kernels/ref.js';
import { addMadd } from '../../src/kernels/wasm/fma.js';
import { Fn, I32, assemble, block, br, br_if, get, i32, loop, set, v128, type ValType } from '../../src/kernels/wasm/emit.js';
import { fusedMaddAvailable, maddHint, relaxedSimdAvailable } from '../../src/kernels/wasm/loader.js';
import { xorshift } from '../helpers.js';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** x (a finite f32) as sign * m * 2^e with m a BigInt. */
function parts(x: number): { m: bigint; e: number } {
  f32[0] = x;
  const b = u32[0]!;
  const ex = (b >>> 23) & 0xff, fr = b & 0x7fffff;
  const m = BigInt(ex === 0 ? fr : fr | 0x800000) * (b >>> 31 ? -1n : 1n);
  return { m, e: (ex === 0 ? 1 : ex) - 150 };
}

const bitLength = (n: bigint): number => (n === 0n ? 0 : n.toString(2).length);

/** a*b + c rounded once to f32, nearest even, computed exactly (finite operands). */
function exactFma(a: number, b: number, c: number): number {
  const pa = parts(a), pb = parts(b), pc = parts(c);
  const E = Math.min(pa.e + pb.e, pc.e);
  const N = pa.m * pb.m * (1n << BigInt(pa.e + pb.e - E)) + pc.m * (1n << BigInt(pc.e - E));
  if (N === 0n) return Object.is(a * b, -0) && Object.is(c, -0) ? -0 : 0;
  const neg = N < 0n, M = neg ? -N : N;
  // exponent of the f32 ulp at this magnitude (subnormals: 2^-149)
  const q = Math.max(bitLength(M) + E - 24, -149);
  let r: bigint;
  if (q <= E) r = M << BigInt(E - q);
  else {
    const sh = BigInt(q - E);
    r = M >> sh;
    const rem = M - (r << sh), half = 1n << (sh - 1n);
    if (rem > half || (rem === half && (r & 1n) === 1n)) r += 1n;
  }
  const v = Math.fround(Number(r) * 2 ** q);
  return neg ? -v : v;
}

/** A module whose `run(a, b, c, out, n)` applies the madd to n vectors of f32x4 at a, b, c. */
function maddModule(fused: boolean): (a: Float32Array, b: Float32Array, c: Float32Array) => Float32Array {
  const fns: Fn[] = [];
  const fnx = (name: string, params: Record<string, ValType>, result: ValType | null = null, exported = true): Fn => {
    const f = new Fn(name, params, result, exported);
    f.index = fns.length;
    fns.push(f);
    return f;
  };
  const madd = addMadd(fnx, fused);
  const f = fnx('run', { a: I32, b: I32, c: I32, out: I32, n: I32 });
  const i = f.local('i', I32), o = f.local('o', I32);
  const at = (p: string): ReturnType<typeof get> => i32.add(get(f.p(p)), get(o));
  f.body = [
    set(i, i32.const(0)),
    block(loop(br_if(1, i32.ge_u(get(i), get(f.p('n')))),
      set(o, i32.shl(get(i), i32.const(4))),
      v128.store(at('out'), madd.v(v128.load(at('a')), v128.load(at('b')), v128.load(at('c')))),
      set(i, i32.add(get(i), i32.const(1))), br(0))),
  ];
  const memory = new WebAssembly.Memory({ initial: 64, maximum: 64, shared: true });
  const bytes = assemble(fns, { module: 'env', name: 'memory', minPages: 64, maxPages: 64, shared: true });
  const run = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } }).exports.run as (...x: number[]) => void;
  return (a, b, c) => {
    const n = a.length, mem = new Float32Array(memory.buffer);
    mem.set(a, 0);
    mem.set(b, n);
    mem.set(c, 2 * n);
    run(0, 4 * n, 8 * n, 12 * n, n / 4);
    return mem.slice(3 * n, 4 * n);
  };
}

/** Operands: random f32 of all magnitudes and few or many mantissa bits, and built cases where
 *  a*b + c rounded to double lies exactly on an f32 midpoint while the exact sum does not. */
function cases(): { a: Float32Array; b: Float32Array; c: Float32Array } {
  const rnd = xorshift(0x5eed1234);
  const A: number[] = [], B: number[] = [], C: number[] = [];
  const val = (expRange: number): number => {
    const bits = rnd() < 0.5 ? 24 : 1 + Math.floor(rnd() * 6);
    let m = 1;
    for (let k = 1; k < bits; k++) if (rnd() < 0.5) m += 2 ** -k;
    return Math.fround((rnd() < 0.5 ? -1 : 1) * m * 2 ** Math.floor((rnd() - 0.5) * expRange));
  };
  for (let i = 0; i < 20000; i++) {
    const a = val(40), b = val(40);
    // c near a*b's magnitude, or far from it (the product's low bits then straddle the f32 ulp)
    const c = Math.fround(val(4) * Math.abs(a * b) * 2 ** Math.floor((rnd() - 0.5) * 70) || val(40));
    A.push(a), B.push(b), C.push(c);
  }
  // (1 + 2^-23)(1 - 2^-23) 2^-24 = 2^-24 - 2^-70: added to 1 + 2^-23 it rounds (to double) to the
  // midpoint 1 + 2^-23 + 2^-24, which ties to 1 + 2^-22; the exact sum is below: 1 + 2^-23
  for (const k of [0, -20, 30, -126, -140, 100]) {
    for (const s of [1, -1]) {
      A.push(Math.fround(s * (1 + 2 ** -23))), B.push(Math.fround((1 - 2 ** -23) * 2 ** (-24 + k))), C.push(Math.fround(s * (1 + 2 ** -23) * 2 ** k));
      A.push(Math.fround(s * (1 + 2 ** -23))), B.push(Math.fround(-(1 - 2 ** -23) * 2 ** (-24 + k))), C.push(Math.fround(s * 2 ** k));
    }
  }
  while (A.length % 4) A.push(0), B.push(0), C.push(0);
  return { a: new Float32Array(A), b: new Float32Array(B), c: new Float32Array(C) };
}

const { a, b, c } = cases();
const want = new Float32Array(a.length).map((_, i) => exactFma(a[i]!, b[i]!, c[i]!));

function sameBits(got: Float32Array, what: string): void {
  const g = new Uint32Array(got.buffer), w = new Uint32Array(want.buffer);
  for (let i = 0; i < w.length; i++) {
    if (g[i] !== w[i]) assert.fail(`${what}: fma(${a[i]}, ${b[i]}, ${c[i]}) = ${got[i]}, exact ${want[i]}`);
  }
}

test('fma32 (reference) == the exact rounding, and the naive f32(a*b + c) in double is not (a double rounding is caught)', () => {
  sameBits(new Float32Array(a.length).map((_, i) => fma32(a[i]!, b[i]!, c[i]!)), 'fma32');
  const naive = new Float32Array(a.length).map((_, i) => Math.fround(a[i]! * b[i]! + c[i]!));
  assert.ok(naive.some((x, i) => !Object.is(x, want[i])), 'the cases include a double rounding');
});

test('the emulated multiply-add (kernels/wasm/fma.ts) == the exact rounding, bits', () => {
  sameBits(maddModule(false)(a, b, c), 'fma_emu');
});

test('f32x4.relaxed_madd == the exact rounding where the loader finds it fused', (t) => {
  if (!relaxedSimdAvailable() || !fusedMaddAvailable()) {
    t.skip('relaxed_madd is not a fused multiply-add here: the kernels use the emulation');
    return;
  }
  sameBits(maddModule(true)(a, b, c), 'relaxed_madd');
});

test('dot (its lane steps written out) takes fma32 in every lane: w = [c, a], x = [1, b] in one lane gives fma(a, b, c)', () => {
  const w = new Float32Array(32), x = new Float32Array(32);
  for (let i = 0; i < a.length; i++) {
    const l = i % 16;
    w.fill(0), x.fill(0);
    w[l] = c[i]!, x[l] = 1, w[16 + l] = a[i]!, x[16 + l] = b[i]!;
    // the other lanes are +0, which the combine adds: -0 comes out +0
    assert.equal(dot(w, 0, x, 0, 32), want[i]! + 0, `lane ${l}: fma(${a[i]}, ${b[i]}, ${c[i]})`);
  }
});

test('maddHint: a line (printed at load, by k3 bench and k3 plan) exactly where the multiply-add is emulated', () => {
  const hint = maddHint();
  if (fusedMaddAvailable()) assert.equal(hint, null);
  else assert.match(hint ?? '', /emulated here.*same numbers/);
});
