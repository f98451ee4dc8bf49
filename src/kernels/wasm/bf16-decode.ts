// WebAssembly SIMD decoder of the bf16 block code (src/formats/bf16-code.ts has the format and the
// reference decoder, whose bytes this must give). Per 16 values: one 8-byte load of symbols, a
// nibble split, one i8x16.swizzle through the block's exponent table, and bit moves that rebuild
// the two bytes of each bf16 from the exponent and the sign+mantissa byte, and the checksum in
// the same pass. The rare escapes are patched from TypeScript; a block that has any gets its
// checksum from a second SIMD pass over the patched values.
//
// It has its own small (not shared) memory: the block in, the block out, 16 bytes of result.
// Decoding runs on the calling thread, one block (~64 KiB raw) per call.

import { Fn, I32, V128, assemble, block, br_if, get, i32, i32x4, i8x16, loop, set, tee, v128, type Code } from './emit.js';
import { HEADER_BYTES, checkHeader, pad16, type BlockDecoder } from '../../formats/bf16-code.js';

const PAGE = 65536;
const shl8 = (a: Code, n: Code): Code => [a, n, 0xfd, 0x6b]; // i8x16.shl
const INTERLEAVE_LO = [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23];
const INTERLEAVE_HI = [8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31];

const hsum = (v: number): Code =>
  i32.add(i32.add(i32x4.extract_lane(get(v), 0), i32x4.extract_lane(get(v), 1)), i32.add(i32x4.extract_lane(get(v), 2), i32x4.extract_lane(get(v), 3)));

/** One group of 8 decoded values into the checksum: a += lanes 0-3 + lanes 4-7, then b += a. */
const sumGroup = (a: number, b: number, x: Code): Code[] => [
  set(a, i32x4.add(get(a), i32x4.add(i32x4.extend_low_i16x8_u(x), i32x4.extend_high_i16x8_u(x)))),
  set(b, i32x4.add(get(b), get(a))),
];

/** Decode n16 values and, in the same pass, their checksum (valid when the block has no escapes). */
function decodeFn(): Fn {
  const f = new Fn('decode', { nib: I32, sm: I32, tab: I32, n16: I32, out: I32, res: I32 });
  const end = f.local('end', I32), tbl = f.local('tbl', V128), b = f.local('b', V128), e = f.local('e', V128), s = f.local('s', V128);
  const lo = f.local('lo', V128), hi = f.local('hi', V128), o = f.local('o', V128), a = f.local('a', V128), bb = f.local('bb', V128);
  const m0f = f.local('m0f', V128), m80 = f.local('m80', V128), m7f = f.local('m7f', V128);
  const [nib, sm, tab, n16, out] = ['nib', 'sm', 'tab', 'n16', 'out'].map((n) => f.p(n)) as [number, number, number, number, number];
  f.prologue.push(
    set(tbl, v128.load(get(tab))),
    set(m0f, i8x16.splat(i32.const(0x0f))),
    set(m80, i8x16.splat(i32.const(0x80))),
    set(m7f, i8x16.splat(i32.const(0x7f))),
    set(end, i32.add(get(sm), get(n16))),
    set(a, i32x4.splat(i32.const(0))),
    set(bb, i32x4.splat(i32.const(0))),
  );
  f.body = [block(
    br_if(0, i32.ge_u(get(sm), get(end))),
    loop(
      set(b, v128.load64_zero(get(nib))),
      set(e, i8x16.swizzle(get(tbl), i8x16.shuffle(v128.and(get(b), get(m0f)), i8x16.shr_u(get(b), i32.const(4)), INTERLEAVE_LO))),
      set(s, v128.load(get(sm))),
      set(hi, v128.or(v128.and(get(s), get(m80)), i8x16.shr_u(get(e), i32.const(1)))),
      set(lo, v128.or(shl8(get(e), i32.const(7)), v128.and(get(s), get(m7f)))),
      v128.store(get(out), tee(o, i8x16.shuffle(get(lo), get(hi), INTERLEAVE_LO))),
      sumGroup(a, bb, get(o)),
      v128.store(get(out), tee(o, i8x16.shuffle(get(lo), get(hi), INTERLEAVE_HI)), 16),
      sumGroup(a, bb, get(o)),
      set(nib, i32.add(get(nib), i32.const(8))),
      set(out, i32.add(get(out), i32.const(32))),
      br_if(0, i32.lt_u(tee(sm, i32.add(get(sm), i32.const(16))), get(end))),
    ),
  ), i32.store(get(f.p('res')), hsum(a)), i32.store(get(f.p('res')), hsum(bb), 4)];
  return f;
}

function checksumFn(): Fn {
  const f = new Fn('checksum', { p: I32, n16: I32, res: I32 });
  const end = f.local('end', I32), x = f.local('x', V128), a = f.local('a', V128), bb = f.local('bb', V128);
  const [p, n16, res] = [f.p('p'), f.p('n16'), f.p('res')];
  f.prologue.push(set(a, i32x4.splat(i32.const(0))), set(bb, i32x4.splat(i32.const(0))), set(end, i32.add(get(p), i32.shl(get(n16), i32.const(1)))));
  f.body = [
    block(
      br_if(0, i32.ge_u(get(p), get(end))),
      loop(
        set(x, v128.load(get(p))),
        sumGroup(a, bb, get(x)),
        br_if(0, i32.lt_u(tee(p, i32.add(get(p), i32.const(16))), get(end))),
      ),
    ),
    i32.store(get(res), hsum(a)),
    i32.store(get(res), hsum(bb), 4),
  ];
  return f;
}

let compiled: WebAssembly.Module | null = null;

const RES = 0;
const IN = 64;

/** The WebAssembly block decoder; one per process is enough (see bf16Decoder()). */
export class WasmBf16Decoder implements BlockDecoder {
  private readonly memory: WebAssembly.Memory;
  private readonly ex: { decode: (...a: number[]) => void; checksum: (...a: number[]) => void };
  private u8: Uint8Array;

  constructor() {
    compiled ??= new WebAssembly.Module(assemble([decodeFn(), checksumFn()], { module: 'env', name: 'memory', minPages: 1, maxPages: 65535, shared: false }));
    this.memory = new WebAssembly.Memory({ initial: 4, maximum: 65535 });
    this.ex = new WebAssembly.Instance(compiled, { env: { memory: this.memory } }).exports as unknown as WasmBf16Decoder['ex'];
    this.u8 = new Uint8Array(this.memory.buffer);
  }

  /** Bytes of memory this decoder holds now (it grows to the largest block seen). */
  get bytes(): number {
    return this.memory.buffer.byteLength;
  }

  decodeBlock(src: Uint8Array, n: number, dst: Uint8Array): string | null {
    const nEsc = checkHeader(src, n);
    if (typeof nEsc === 'string') return nEsc;
    const n16 = pad16(n);
    const out = Math.ceil((IN + src.byteLength) / 64) * 64;
    const need = out + 2 * n16;
    if (need > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((need - this.memory.buffer.byteLength) / PAGE));
      this.u8 = new Uint8Array(this.memory.buffer);
    }
    const u8 = this.u8;
    u8.set(src, IN);
    const nib = IN + HEADER_BYTES, sm = nib + n16 / 2, esc = sm + n16;
    this.ex.decode(nib, sm, IN + 12, n16, out, RES); // checksum too: right unless escapes are patched below
    if (nEsc > 0) {
      const dv = new DataView(this.memory.buffer);
      let last = -1;
      for (let k = 0; k < nEsc; k++) {
        const p = dv.getUint32(esc + 4 * k, true);
        if (p <= last || p >= n) return `escape ${k} at position ${p} is out of order or range`;
        last = p;
        const e = u8[esc + 4 * nEsc + k]!, s = u8[sm + p]!;
        dv.setUint16(out + 2 * p, (((s & 0x80) | (e >> 1)) << 8) | ((e & 1) << 7) | (s & 0x7f), true);
      }
    }
    if (nEsc > 0) this.ex.checksum(out, n16, RES);
    const got = new DataView(this.memory.buffer, RES, 8);
    const want = new DataView(src.buffer, src.byteOffset, 8);
    if (got.getUint32(0, true) !== want.getUint32(0, true) || got.getUint32(4, true) !== want.getUint32(4, true)) return 'checksum mismatch';
    dst.set(u8.subarray(out, out + 2 * n));
    return null;
  }
}

let shared: WasmBf16Decoder | null = null;

/** The process's WebAssembly bf16 block decoder (created on first use). */
export function bf16Decoder(): WasmBf16Decoder {
  shared ??= new WasmBf16Decoder();
  return shared;
}
