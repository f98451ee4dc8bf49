// Compiles the generated kernel module once per process and option set, and instantiates it on a
// given shared memory. Relaxed SIMD (relaxed_swizzle with in-range indices, the 7-bit dot, and
// relaxed_madd where the probe below finds it fused: none can change a result) needs
// `--experimental-wasm-relaxed-simd` on Node 20: we set it at run time before compiling, and fall
// back to plain SIMD if the engine still refuses it.

import * as fs from 'node:fs';
import * as v8 from 'node:v8';
import { generate, MX_PLANES, FP8_TAB, KCONST } from './kernels.js';
import { E2M1_TABLE, FP8_TABLE, e8m0ToF32 } from '../../formats/dtypes.js';

export interface KernelOptions {
  relaxed: boolean;
  /** GenOptions.intDotAdd; default intDotAddIsOne(). */
  intDotAdd?: boolean;
  /** Column tiles of the fused kernels (fused.ts). */
  kdaTile?: number;
  wsumTile?: number;
}

export type KernelExports = Record<string, (...args: number[]) => number>;

/** A compiled kernel module and the vector constants it expects in memory. */
export interface CompiledKernels {
  module: WebAssembly.Module;
  consts: Uint8Array;
  relaxed: boolean;
}

const cache = new Map<string, CompiledKernels>();
let relaxedState: boolean | undefined;
let tieringSet = false;

/** Whether relaxed SIMD can be compiled here (turning the V8 flag on if needed). */
export function relaxedSimdAvailable(): boolean {
  if (relaxedState !== undefined) return relaxedState;
  // (func (param v128 v128) (result v128) local.get 0 local.get 1 i8x16.relaxed_swizzle)
  const body = [0x00, 0x20, 0, 0x20, 1, 0xfd, 0x80, 0x02, 0x0b];
  const probe = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 7, 1, 0x60, 2, 0x7b, 0x7b, 1, 0x7b,
    3, 2, 1, 0, 10, body.length + 2, 1, body.length, ...body]);
  if (!WebAssembly.validate(probe)) {
    try {
      v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
    } catch {
      // ignore: validation below decides
    }
  }
  relaxedState = WebAssembly.validate(probe);
  return relaxedState;
}

let fusedState: boolean | undefined;

/**
 * Whether f32x4.relaxed_madd is one fused multiply-add here (x86 with FMA3, Arm64): then the
 * dots use it (kernels/wasm/fma.ts). Probed: (1 + 2^-12)^2 - 1 is 2^-11 + 2^-24 fused and 2^-11
 * when the product is rounded first. The probe takes its operands as parameters, so nothing is
 * folded at compile time; V8 emits the instruction the kernels get.
 */
export function fusedMaddAvailable(): boolean {
  if (fusedState !== undefined) return fusedState;
  fusedState = false;
  if (!relaxedSimdAvailable()) return fusedState;
  // (func (param f32 f32 f32) (result f32)
  //   (f32x4.extract_lane 0 (f32x4.relaxed_madd (f32x4.splat 0) (f32x4.splat 1) (f32x4.splat 2))))
  const splat = (l: number): number[] => [0x20, l, 0xfd, 0x13];
  const body = [0x00, ...splat(0), ...splat(1), ...splat(2), 0xfd, 0x85, 0x02, 0xfd, 0x1f, 0, 0x0b];
  const bytes = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 8, 1, 0x60, 3, 0x7d, 0x7d, 0x7d, 1, 0x7d,
    3, 2, 1, 0, 7, 5, 1, 1, 0x66, 0, 0, 10, body.length + 2, 1, body.length, ...body]);
  try {
    const fn = new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports.f as (a: number, b: number, c: number) => number;
    const a = 1 + 2 ** -12;
    fusedState = fn(a, a, -1) === 2 ** -11 + 2 ** -24 && fn(-a, a, 1) === -(2 ** -11 + 2 ** -24);
  } catch {
    fusedState = false;
  }
  return fusedState;
}

/** One line where the dots' multiply-add is emulated on this machine (fma.ts: the same numbers,
 *  the products ~20x slower); null where it is one instruction. */
export function maddHint(): string | null {
  if (fusedMaddAvailable()) return null;
  const why = relaxedSimdAvailable() ? 'this CPU has no fused multiply-add instruction (x86 without FMA3)' : 'this JavaScript engine has no relaxed SIMD';
  return `the products' fused multiply-add is emulated here, as ${why}: the same numbers, but matrix products run ~20x slower (docs/NUMERICS.md)`;
}

let intDotAddState: boolean | undefined;

/**
 * Whether this engine compiles i32x4.relaxed_dot_i8x16_i7x16_add_s to one instruction: `sdot` on
 * Arm64 (with the dot product extension, Armv8.4 and most Armv8.2 cores: Apple M1 on, Graviton 2
 * on), `vpdpbusd` on x86 with AVX-VNNI where V8 uses it (its `--enable-avx-vnni` flag, V8 12 /
 * Node 22 on; Node 20's V8 11.3 has neither). Elsewhere V8 emits it as five instructions, a ones
 * vector built each time, and the 8-bit kernels take the i16x8 dot + widening form (three). A
 * guess from the platform, made once per process (kernelModule asks at every Kernels), and only
 * the speed depends on it.
 */
export function intDotAddIsOne(): boolean {
  if (intDotAddState !== undefined) return intDotAddState;
  intDotAddState = false;
  if (process.arch === 'arm64') intDotAddState = true;
  else if (process.arch === 'x64' && Number(process.versions.v8.split('.')[0]) >= 12) {
    try {
      intDotAddState = /^flags\s*:.*\bavx_vnni\b/m.test(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    } catch {
      // no /proc/cpuinfo: the widening form
    }
  }
  return intDotAddState;
}

/** Compile (or fetch) the kernel module for these options. */
export function kernelModule(opts: KernelOptions): CompiledKernels {
  const relaxed = opts.relaxed && relaxedSimdAvailable();
  const intDotAdd = opts.intDotAdd ?? intDotAddIsOne();
  const key = JSON.stringify([relaxed, opts.kdaTile, opts.wsumTile, intDotAdd]);
  let m = cache.get(key);
  if (!m) {
    if (!tieringSet) {
      // The kernels are few and hot: compile them with the optimizing tier straight away rather
      // than running the baseline tier until dynamic tier-up kicks in.
      tieringSet = true;
      try {
        v8.setFlagsFromString('--no-liftoff');
      } catch {
        // ignore
      }
    }
    const g = generate({ ...opts, relaxed, fusedMadd: relaxed && fusedMaddAvailable(), intDotAdd });
    m = { module: new WebAssembly.Module(g.bytes), consts: g.consts, relaxed };
    cache.set(key, m);
  }
  return m;
}

export function instantiate(module: WebAssembly.Module, memory: WebAssembly.Memory): KernelExports {
  // exp: the kernels' softmax takes JavaScript's own (gen.ts FUNC_IMPORTS)
  const inst = new WebAssembly.Instance(module, { env: { memory, exp: Math.exp } });
  return inst.exports as unknown as KernelExports;
}

/** Write the constant tables into a fresh kernel memory. */
export function initConstants(memory: WebAssembly.Memory, k: CompiledKernels): void {
  const u8 = new Uint8Array(memory.buffer);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let s = 0; s < 256; s++) {
    const scale = e8m0ToF32(s);
    for (let n = 0; n < 16; n++) {
      f[0] = E2M1_TABLE[n]! * scale;
      const bits = u[0]!;
      if (bits & 0xffff) throw new Error('mxfp4 value not a bf16');
      u8[MX_PLANES + s * 32 + n] = (bits >>> 16) & 0xff;
      u8[MX_PLANES + s * 32 + 16 + n] = bits >>> 24;
    }
  }
  new Float32Array(memory.buffer, FP8_TAB, 256).set(FP8_TABLE);
  u8.set(k.consts, KCONST);
}
