// Lossless coding of bf16 matrices (`k3 pack --compress`): the format, its encoder, the plain
// TypeScript reference decoder, and the in-place driver the store calls. The WebAssembly SIMD
// decoder (src/kernels/wasm/bf16-decode.ts) gives the same bytes; test/formats/bf16-code.test.ts checks both.
//
// Why it saves bytes: a bf16 weight is sign (1 bit), exponent (8), mantissa (7). Sign and
// mantissa are close to random, but trained (and N(0, 1/in) synthetic) weights use a dozen or so
// exponents, so the exponent byte carries ~3 bits. Each value is split into a sign+mantissa byte
// (stored as is) and its exponent, coded as a 4-bit symbol through a per-block table of the 16
// most frequent exponents; rarer exponents are escapes. 2 bytes -> ~1.5 bytes. A nibble code is
// ~1 bit/weight above the exponent entropy, but it decodes with one byte shuffle per 16 weights
// (i8x16.swizzle), far faster than any disk; bench/compress.ts reports the entropy bound next
// to the ratio.
//
// A coded tensor is [rows, cols] BF16, cut into blocks of `blockRows` whole rows (the last may be
// shorter), each stored one after the other; the manifest lists every block's stored length. A
// block of n values (n16 = n rounded up to 16) is stored either
//   raw:   exactly 2n bytes, the bf16 values (when coding would not be smaller), or
//   coded: less than 2n bytes:
//     u32 sumA, u32 sumB     checksum of the decoded block (below)
//     u32 nEsc               escapes
//     u8  table[16]          exponent of each symbol
//     u8  nib[n16 / 2]       symbol of value i in nibble i%2 (low first) of byte i/2
//     u8  sm[n16]            sign << 7 | mantissa of value i
//     u32 escPos[nEsc]       strictly increasing positions < n whose exponent is not in the table
//     u8  escExp[nEsc]       their exponents
// Decoding: e = table[nib(i)] (escExp[k] at escPos[k]), value = (sm & 0x80 | e >> 1) << 8 |
// (e & 1) << 7 | sm & 0x7f, for all n16 positions (padding: nibble 0, sm 0). The checksum runs over
// those n16 u16 values in groups of 8: for lane j < 4, a_j += v[8g+j] + v[8g+4+j], then b_j += a_j
// (all mod 2^32); sumA = a_0+a_1+a_2+a_3, sumB = b_0+..+b_3. A damaged block fails it (or the
// length check) and the read fails with a clear error instead of giving other numbers.

import { ReadError } from '../util/errors.js';

export const CODE_NAME = 'bf16-exp-nibble';
export const HEADER_BYTES = 28;
/** Raw bytes a block aims at: small enough to stay in L2 while decoding, big enough to amortize a call. */
export const BLOCK_TARGET_BYTES = 64 * 1024;

/** Rows per block for a bf16 matrix of `cols` columns (at least one row). */
export function blockRowsFor(cols: number): number {
  return Math.max(1, Math.floor(BLOCK_TARGET_BYTES / (2 * cols)));
}

export const pad16 = (n: number): number => Math.ceil(n / 16) * 16;

/** Stored length of a coded block of n values with nEsc escapes. */
export const codedLength = (n: number, nEsc: number): number => HEADER_BYTES + pad16(n) * 1.5 + 5 * nEsc;

/** The checksum over n16 decoded u16 values (see the top of this file). */
export function checksumRef(v: Uint16Array, n16: number): [number, number] {
  let a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
  for (let g = 0; g < n16; g += 8) {
    a0 = (a0 + v[g]! + v[g + 4]!) >>> 0;
    a1 = (a1 + v[g + 1]! + v[g + 5]!) >>> 0;
    a2 = (a2 + v[g + 2]! + v[g + 6]!) >>> 0;
    a3 = (a3 + v[g + 3]! + v[g + 7]!) >>> 0;
    b0 = (b0 + a0) >>> 0;
    b1 = (b1 + a1) >>> 0;
    b2 = (b2 + a2) >>> 0;
    b3 = (b3 + a3) >>> 0;
  }
  return [(a0 + a1 + a2 + a3) >>> 0, (b0 + b1 + b2 + b3) >>> 0];
}

const value = (e: number, sm: number): number => (((sm & 0x80) | (e >> 1)) << 8) | ((e & 1) << 7) | (sm & 0x7f);

/** Encode one block of bf16 values (u16): the coded form, or a copy of the raw bytes when that is not smaller. */
export function encodeBlock(v: Uint16Array): Uint8Array {
  const n = v.length;
  const n16 = pad16(n);
  const count = new Uint32Array(256);
  for (let i = 0; i < n; i++) count[(v[i]! >> 7) & 0xff]!++;
  // The 16 most frequent exponents, ties to the smaller exponent: a fixed choice, so packs repeat.
  const order = Array.from({ length: 256 }, (_, e) => e).sort((x, y) => count[y]! - count[x]! || x - y);
  const table = order.slice(0, 16);
  const sym = new Int16Array(256).fill(-1);
  table.forEach((e, s) => {
    if (count[e]! > 0 || s === 0) sym[e] = s;
  });
  let nEsc = 0;
  for (let e = 0; e < 256; e++) if (sym[e]! < 0) nEsc += count[e]!;
  const len = codedLength(n, nEsc);
  const raw = new Uint8Array(v.buffer, v.byteOffset, 2 * n);
  if (len >= 2 * n) return raw.slice();
  const out = new Uint8Array(len);
  const dv = new DataView(out.buffer);
  dv.setUint32(8, nEsc, true);
  out.set(table, 12);
  const nib = HEADER_BYTES, sm = nib + n16 / 2, esc = sm + n16;
  const full = new Uint16Array(n16);
  const pad = value(table[0]!, 0);
  let k = 0;
  for (let i = 0; i < n16; i++) {
    const x = i < n ? v[i]! : pad;
    full[i] = x;
    if (i >= n) continue;
    const e = (x >> 7) & 0xff;
    let s = sym[e]!;
    if (s < 0) {
      s = 15;
      dv.setUint32(esc + 4 * k, i, true);
      out[esc + 4 * nEsc + k] = e;
      k++;
    }
    out[nib + (i >> 1)]! |= s << (4 * (i & 1));
    out[sm + i] = ((x >> 8) & 0x80) | (x & 0x7f);
  }
  const [a, b] = checksumRef(full, n16);
  dv.setUint32(0, a, true);
  dv.setUint32(4, b, true);
  return out;
}

/** Decodes one block: reads all of `src` before writing `dst` (they may overlap in the caller's buffer). */
export interface BlockDecoder {
  /** Decode the coded block `src` (n values) into dst (2n bytes); a reason string when it is damaged. */
  decodeBlock(src: Uint8Array, n: number, dst: Uint8Array): string | null;
}

/** Length, escape-count and position checks shared by both decoders; returns nEsc or a reason. */
export function checkHeader(src: Uint8Array, n: number): number | string {
  if (src.byteLength < HEADER_BYTES) return `${src.byteLength} bytes, below the header`;
  const nEsc = new DataView(src.buffer, src.byteOffset, HEADER_BYTES).getUint32(8, true);
  if (codedLength(n, nEsc) !== src.byteLength) return `${src.byteLength} bytes, but ${nEsc} escapes for ${n} values make ${codedLength(n, nEsc)}`;
  return nEsc;
}

/** The reference decoder (plain TypeScript): defines the bytes the wasm decoder must give. */
export const REF_DECODER: BlockDecoder = {
  decodeBlock(srcIn: Uint8Array, n: number, dst: Uint8Array): string | null {
    const nEsc = checkHeader(srcIn, n);
    if (typeof nEsc === 'string') return nEsc;
    const src = srcIn.slice(); // all of src is read before dst is written
    const dv = new DataView(src.buffer);
    const n16 = pad16(n);
    const nib = HEADER_BYTES, sm = nib + n16 / 2, esc = sm + n16;
    const v = new Uint16Array(n16);
    for (let i = 0; i < n16; i++) v[i] = value(src[12 + ((src[nib + (i >> 1)]! >> (4 * (i & 1))) & 15)]!, src[sm + i]!);
    let last = -1;
    for (let k = 0; k < nEsc; k++) {
      const p = dv.getUint32(esc + 4 * k, true);
      if (p <= last || p >= n) return `escape ${k} at position ${p} is out of order or range`;
      last = p;
      v[p] = value(src[esc + 4 * nEsc + k]!, src[sm + p]!);
    }
    const [a, b] = checksumRef(v, n16);
    if (a !== dv.getUint32(0, true) || b !== dv.getUint32(4, true)) return 'checksum mismatch';
    new Uint8Array(dst.buffer, dst.byteOffset, 2 * n).set(new Uint8Array(v.buffer, 0, 2 * n));
    return null;
  },
};

/** The coded blocks of one row range of a tensor: what the store reads for a trunk piece. */
export interface CodedRun {
  cols: number;
  /** Rows of each block, in order. */
  blockRows: number[];
  /** Stored bytes of each block, in order. */
  stored: number[];
  /** For error messages: the file and tensor. */
  where: string;
  /** File offset of the first block (for error messages). */
  offset: number;
}

export const runRawBytes = (r: CodedRun): number => r.blockRows.reduce((s, x) => s + 2 * x * r.cols, 0);
export const runStoredBytes = (r: CodedRun): number => r.stored.reduce((s, x) => s + x, 0);

/**
 * Decode a run in place: `buf` holds the run's raw size, with the stored bytes read into its last
 * runStoredBytes bytes. Every block is no bigger stored than raw, so the unread input always lies
 * at or after the output being written; each block is read whole before its output is written.
 */
export function decodeRunInPlace(buf: Uint8Array, run: CodedRun, dec: BlockDecoder): void {
  const raw = runRawBytes(run);
  let inOff = raw - runStoredBytes(run);
  let outOff = 0;
  let fileOff = run.offset;
  for (let j = 0; j < run.stored.length; j++) {
    const n = run.blockRows[j]! * run.cols;
    const s = run.stored[j]!;
    if (s === 2 * n) buf.copyWithin(outOff, inOff, inOff + s);
    else {
      const why = dec.decodeBlock(buf.subarray(inOff, inOff + s), n, buf.subarray(outOff, outOff + 2 * n));
      if (why !== null) throw new ReadError(`${run.where}: compressed block at file offset ${fileOff} is damaged (${why}); check the pack with k3 pack --verify`, 4);
    }
    inOff += s;
    outOff += 2 * n;
    fileOff += s;
  }
}
