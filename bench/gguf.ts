// GGUF (version 3) for the llama.cpp comparison bench: a streaming writer, a minimal reader (used
// by the tests and as a self-check), the lossless MXFP4 repack between the compressed-tensors
// layout of the K3 checkpoint and ggml's `block_mxfp4`, and a converter from one of our K3
// checkpoint directories to a GGUF that llama.cpp's `kimi-k3` architecture loads.
//
// File layout written here (all little-endian):
//   u32 magic "GGUF", u32 version 3, u64 tensor count, u64 metadata count,
//   metadata: (string key, u32 value type, value)*,
//   tensor infos: (string name, u32 n_dims, u64 ne[n_dims] (ne[0] = innermost), u32 ggml type,
//                  u64 offset relative to the data section, a multiple of the alignment)*,
//   zero padding to the alignment (general.alignment, default 32), then the tensor data, each
//   tensor padded to the alignment. A string is a u64 byte length and UTF-8 bytes (no NUL).
//
// A safetensors weight [out, in] (row-major) is a ggml tensor with ne = [in, out] holding the very
// same bytes, so linear weights need no transposition: only a type change. What the `kimi-k3`
// loader wants beyond that (checked against llama.cpp's kimi-k3 model and its HF converter):
//   - `<site>_res_norm.weight` and `<site>_res_proj.weight` of every Attention Residuals site are
//     used only as their product: one F32 vector `*_res_score` = norm ⊙ proj.
//   - KDA `A_log` becomes `ssm_a` = −exp(A_log) for the first `heads` entries (K3 pads it to 128).
//   - KDA conv taps [P, 1, W] are ggml [W, 1, P]: the same bytes, current input at tap W−1.
//   - MLA `kv_b_proj` [H·(nope+v), kvLora] is split per head into `attn_k_b` (ggml [nope, kvLora, H],
//     i.e. the nope rows transposed) and `attn_v_b` (ggml [kvLora, v, H]); the cache holds the latent.
//     `head_count_kv` is 1 on MLA layers and 0 on KDA layers (that is how KDA layers are marked).
//   - routed experts are stacked into 3-D `ffn_{gate,up,down}_exps` (ggml [in, out, E]).
//   - one `head_count` serves both attention kinds: MLA heads must equal KDA heads.
//   - a tokenizer must be present: we write a byte-level "gpt2" vocabulary of the model's size with
//     no merges (the benches feed token ids, so it is never used to split text).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../src/checkpoint/config.js';
import { indexCheckpointDir } from '../src/checkpoint/dir.js';
import { type TensorEntry } from '../src/checkpoint/safetensors.js';

// ---------------------------------------------------------------------------------------------
// Types

/** GGUF metadata value types. */
export const GGUF_TYPE = {
  UINT8: 0, INT8: 1, UINT16: 2, INT16: 3, UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8,
  ARRAY: 9, UINT64: 10, INT64: 11, FLOAT64: 12,
} as const;
export type GgufValueType = (typeof GGUF_TYPE)[keyof typeof GGUF_TYPE];

/** The ggml tensor types this file writes. */
export const GGML_TYPE = { F32: 0, F16: 1, BF16: 30, MXFP4: 39 } as const;
export type GgmlType = (typeof GGML_TYPE)[keyof typeof GGML_TYPE];

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** Elements per MXFP4 block and bytes per block (1 E8M0 scale + 16 bytes of nibbles). */
export const MXFP4_BLOCK = 32;
export const MXFP4_BLOCK_BYTES = 17;

const TYPE_NAME: Record<number, string> = { 0: 'F32', 1: 'F16', 30: 'BF16', 39: 'MXFP4' };

export type GgufScalar =
  | { type: 0 | 1 | 2 | 3 | 4 | 5 | 6 | 12; value: number }
  | { type: 10 | 11; value: bigint }
  | { type: 7; value: boolean }
  | { type: 8; value: string };
export type GgufValue = GgufScalar | { type: 9; elemType: GgufValueType; values: (number | bigint | boolean | string)[] };

/** Ordered metadata with typed setters (GGUF keys are typed: llama.cpp rejects a u32 key stored as i32). */
export class GgufMeta {
  readonly entries = new Map<string, GgufValue>();
  u32(k: string, v: number): this { return this.set(k, { type: GGUF_TYPE.UINT32, value: v }); }
  i32(k: string, v: number): this { return this.set(k, { type: GGUF_TYPE.INT32, value: v }); }
  f32(k: string, v: number): this { return this.set(k, { type: GGUF_TYPE.FLOAT32, value: v }); }
  u64(k: string, v: bigint): this { return this.set(k, { type: GGUF_TYPE.UINT64, value: v }); }
  bool(k: string, v: boolean): this { return this.set(k, { type: GGUF_TYPE.BOOL, value: v }); }
  str(k: string, v: string): this { return this.set(k, { type: GGUF_TYPE.STRING, value: v }); }
  arr(k: string, elemType: GgufValueType, values: (number | bigint | boolean | string)[]): this {
    if (elemType === GGUF_TYPE.ARRAY) throw new Error(`gguf: ${k}: nested arrays are not supported`);
    return this.set(k, { type: GGUF_TYPE.ARRAY, elemType, values });
  }
  set(k: string, v: GgufValue): this {
    this.entries.set(k, v);
    return this;
  }
}

export interface GgufTensorSpec {
  name: string;
  type: GgmlType;
  /** ggml dims, ne[0] innermost (the reverse of a row-major / safetensors shape). */
  ne: number[];
  /** The tensor's bytes, exactly `ggmlBytes(type, ne)` of them; called once, in file order. */
  data: () => Uint8Array;
}

/** Bytes of a ggml tensor of `type` with dims `ne`. */
export function ggmlBytes(type: GgmlType, ne: number[]): number {
  const n = ne.reduce((a, b) => a * b, 1);
  switch (type) {
    case GGML_TYPE.F32: return n * 4;
    case GGML_TYPE.F16:
    case GGML_TYPE.BF16: return n * 2;
    case GGML_TYPE.MXFP4:
      if (ne[0]! % MXFP4_BLOCK !== 0) throw new Error(`gguf: MXFP4 rows must be a multiple of ${MXFP4_BLOCK} long, got ${ne[0]}`);
      return (n / MXFP4_BLOCK) * MXFP4_BLOCK_BYTES;
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

class ByteSink {
  private chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u8(v: number): void { const b = Buffer.alloc(1); b.writeUInt8(v); this.push(b); }
  i8(v: number): void { const b = Buffer.alloc(1); b.writeInt8(v); this.push(b); }
  u16(v: number): void { const b = Buffer.alloc(2); b.writeUInt16LE(v); this.push(b); }
  i16(v: number): void { const b = Buffer.alloc(2); b.writeInt16LE(v); this.push(b); }
  u32(v: number): void { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.push(b); }
  i32(v: number): void { const b = Buffer.alloc(4); b.writeInt32LE(v); this.push(b); }
  f32(v: number): void { const b = Buffer.alloc(4); b.writeFloatLE(v); this.push(b); }
  f64(v: number): void { const b = Buffer.alloc(8); b.writeDoubleLE(v); this.push(b); }
  u64(v: bigint | number): void { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.push(b); }
  i64(v: bigint | number): void { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v)); this.push(b); }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  concat(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

function writeScalar(out: ByteSink, type: GgufValueType, v: number | bigint | boolean | string, key: string): void {
  const num = (): number => {
    if (typeof v !== 'number') throw new Error(`gguf: ${key}: expected a number, got ${typeof v}`);
    return v;
  };
  switch (type) {
    case GGUF_TYPE.UINT8: out.u8(num()); break;
    case GGUF_TYPE.INT8: out.i8(num()); break;
    case GGUF_TYPE.UINT16: out.u16(num()); break;
    case GGUF_TYPE.INT16: out.i16(num()); break;
    case GGUF_TYPE.UINT32: out.u32(num()); break;
    case GGUF_TYPE.INT32: out.i32(num()); break;
    case GGUF_TYPE.FLOAT32: out.f32(num()); break;
    case GGUF_TYPE.FLOAT64: out.f64(num()); break;
    case GGUF_TYPE.UINT64: out.u64(v as bigint | number); break;
    case GGUF_TYPE.INT64: out.i64(v as bigint | number); break;
    case GGUF_TYPE.BOOL:
      if (typeof v !== 'boolean') throw new Error(`gguf: ${key}: expected a boolean`);
      out.u8(v ? 1 : 0);
      break;
    case GGUF_TYPE.STRING:
      if (typeof v !== 'string') throw new Error(`gguf: ${key}: expected a string`);
      out.str(v);
      break;
    default:
      throw new Error(`gguf: ${key}: unsupported value type ${type}`);
  }
}

function alignUp(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

export interface WriteGgufResult {
  file: string;
  bytes: number;
  tensors: number;
  dataOffset: number;
}

/**
 * Write a GGUF v3 file. The header (metadata + tensor infos) is written first, then each tensor's
 * data in order, produced one at a time (only one tensor's bytes are held at once). Written to a
 * temporary name and renamed when complete.
 */
export function writeGguf(file: string, meta: GgufMeta, tensors: GgufTensorSpec[]): WriteGgufResult {
  const alignEntry = meta.entries.get('general.alignment');
  const alignment = alignEntry && alignEntry.type === GGUF_TYPE.UINT32 ? alignEntry.value : GGUF_DEFAULT_ALIGNMENT;
  if (!Number.isInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0) throw new Error(`gguf: alignment ${alignment} is not a power of two`);
  const names = new Set<string>();
  const head = new ByteSink();
  head.u32(GGUF_MAGIC);
  head.u32(GGUF_VERSION);
  head.u64(tensors.length);
  head.u64(meta.entries.size);
  for (const [k, v] of meta.entries) {
    head.str(k);
    head.u32(v.type);
    if (v.type === GGUF_TYPE.ARRAY) {
      head.u32(v.elemType);
      head.u64(v.values.length);
      for (const x of v.values) writeScalar(head, v.elemType, x, k);
    } else {
      writeScalar(head, v.type, v.value, k);
    }
  }
  const offsets: number[] = [];
  let off = 0;
  for (const t of tensors) {
    if (names.has(t.name)) throw new Error(`gguf: duplicate tensor ${t.name}`);
    names.add(t.name);
    if (Buffer.byteLength(t.name) >= 64) throw new Error(`gguf: tensor name ${t.name} is longer than ggml's 63 bytes`);
    if (t.ne.length < 1 || t.ne.length > 4) throw new Error(`gguf: ${t.name}: ${t.ne.length} dims (1..4 allowed)`);
    head.str(t.name);
    head.u32(t.ne.length);
    for (const d of t.ne) head.u64(d);
    head.u32(t.type);
    head.u64(off);
    offsets.push(off);
    off = alignUp(off + ggmlBytes(t.type, t.ne), alignment);
  }
  const headBytes = head.concat();
  const dataOffset = alignUp(headBytes.length, alignment);

  const tmp = `${file}.tmp-${process.pid}`;
  fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
  const fd = fs.openSync(tmp, 'w');
  let ok = false;
  try {
    writeAll(fd, headBytes, 0);
    if (dataOffset > headBytes.length) writeAll(fd, new Uint8Array(dataOffset - headBytes.length), headBytes.length);
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i]!;
      const data = t.data();
      const want = ggmlBytes(t.type, t.ne);
      if (data.byteLength !== want) throw new Error(`gguf: ${t.name}: produced ${data.byteLength} bytes, ${TYPE_NAME[t.type]} [${t.ne.join(', ')}] needs ${want}`);
      writeAll(fd, data, dataOffset + offsets[i]!);
    }
    // Pad the last tensor so the file length is aligned too (as ggml's own writer does).
    const end = dataOffset + off;
    const size = fs.fstatSync(fd).size;
    if (size < end) writeAll(fd, new Uint8Array(end - size), size);
    fs.closeSync(fd);
    fs.renameSync(tmp, file);
    ok = true;
    return { file, bytes: end, tensors: tensors.length, dataOffset };
  } finally {
    if (!ok) {
      try { fs.closeSync(fd); } catch { /* already closed */ }
      fs.rmSync(tmp, { force: true });
    }
  }
}

function writeAll(fd: number, data: Uint8Array, position: number): void {
  let done = 0;
  while (done < data.byteLength) {
    const n = fs.writeSync(fd, data, done, Math.min(data.byteLength - done, 1 << 30), position + done);
    done += n;
  }
}

// ---------------------------------------------------------------------------------------------
// Minimal reader (tests, self-check)

export interface GgufTensorInfo {
  name: string;
  ne: number[];
  type: number;
  /** Offset relative to the data section, as stored. */
  relOffset: number;
  /** Absolute file offset. */
  offset: number;
  nbytes: number;
}

export interface GgufFile {
  version: number;
  alignment: number;
  /** Metadata values: numbers, bigints (64-bit ints), booleans, strings, or arrays of those. */
  meta: Map<string, { type: number; value: unknown }>;
  tensors: GgufTensorInfo[];
  dataOffset: number;
  fileBytes: number;
}

/** Parse a GGUF header (metadata and tensor infos; tensor data is not read). */
export function readGgufHeader(file: string): GgufFile {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    // Headers of the files we write are small; read up to 64 MiB (a big vocabulary fits).
    const buf = Buffer.alloc(Math.min(size, 64 * 1024 * 1024));
    fs.readSync(fd, buf, 0, buf.length, 0);
    let p = 0;
    const need = (n: number) => {
      if (p + n > buf.length) throw new Error(`gguf: ${file}: header truncated at byte ${p}`);
    };
    const u32 = () => { need(4); const v = buf.readUInt32LE(p); p += 4; return v; };
    const u64 = () => { need(8); const v = buf.readBigUInt64LE(p); p += 8; return v; };
    const num64 = () => {
      const v = u64();
      if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`gguf: ${file}: value ${v} too large`);
      return Number(v);
    };
    const str = () => { const n = num64(); need(n); const s = buf.toString('utf8', p, p + n); p += n; return s; };
    const scalar = (t: number): unknown => {
      switch (t) {
        case GGUF_TYPE.UINT8: need(1); return buf.readUInt8(p++);
        case GGUF_TYPE.INT8: need(1); return buf.readInt8(p++);
        case GGUF_TYPE.UINT16: { need(2); const v = buf.readUInt16LE(p); p += 2; return v; }
        case GGUF_TYPE.INT16: { need(2); const v = buf.readInt16LE(p); p += 2; return v; }
        case GGUF_TYPE.UINT32: return u32();
        case GGUF_TYPE.INT32: { need(4); const v = buf.readInt32LE(p); p += 4; return v; }
        case GGUF_TYPE.FLOAT32: { need(4); const v = buf.readFloatLE(p); p += 4; return v; }
        case GGUF_TYPE.FLOAT64: { need(8); const v = buf.readDoubleLE(p); p += 8; return v; }
        case GGUF_TYPE.UINT64: return u64();
        case GGUF_TYPE.INT64: { need(8); const v = buf.readBigInt64LE(p); p += 8; return v; }
        case GGUF_TYPE.BOOL: { need(1); const v = buf.readUInt8(p++); if (v > 1) throw new Error(`gguf: ${file}: bool byte ${v}`); return v === 1; }
        case GGUF_TYPE.STRING: return str();
        default: throw new Error(`gguf: ${file}: unknown value type ${t} at byte ${p}`);
      }
    };
    if (u32() !== GGUF_MAGIC) throw new Error(`gguf: ${file}: bad magic`);
    const version = u32();
    if (version !== 3) throw new Error(`gguf: ${file}: version ${version}, only 3 is read`);
    const nTensors = num64();
    const nKv = num64();
    const meta = new Map<string, { type: number; value: unknown }>();
    for (let i = 0; i < nKv; i++) {
      const k = str();
      const t = u32();
      if (t === GGUF_TYPE.ARRAY) {
        const et = u32();
        const n = num64();
        const vals: unknown[] = [];
        for (let j = 0; j < n; j++) vals.push(scalar(et));
        meta.set(k, { type: t, value: vals });
      } else {
        meta.set(k, { type: t, value: scalar(t) });
      }
    }
    const al = meta.get('general.alignment');
    const alignment = al ? Number(al.value) : GGUF_DEFAULT_ALIGNMENT;
    const infos: Omit<GgufTensorInfo, 'offset'>[] = [];
    for (let i = 0; i < nTensors; i++) {
      const name = str();
      const nd = u32();
      const ne: number[] = [];
      for (let j = 0; j < nd; j++) ne.push(num64());
      const type = u32();
      const relOffset = num64();
      if (relOffset % alignment !== 0) throw new Error(`gguf: ${file}: tensor ${name} offset ${relOffset} is not aligned to ${alignment}`);
      if (!(type in TYPE_NAME)) throw new Error(`gguf: ${file}: tensor ${name} has type ${type}, which this reader does not size`);
      infos.push({ name, ne, type, relOffset, nbytes: ggmlBytes(type as GgmlType, ne) });
    }
    const dataOffset = alignUp(p, alignment);
    const tensors = infos.map((t) => ({ ...t, offset: dataOffset + t.relOffset }));
    for (const t of tensors) {
      if (t.offset + t.nbytes > size) throw new Error(`gguf: ${file}: tensor ${t.name} runs past the end of the file`);
    }
    return { version, alignment, meta, tensors, dataOffset, fileBytes: size };
  } finally {
    fs.closeSync(fd);
  }
}

/** Read one tensor's bytes. */
export function readGgufTensor(file: string, t: GgufTensorInfo): Uint8Array {
  const out = new Uint8Array(t.nbytes);
  const fd = fs.openSync(file, 'r');
  try {
    let done = 0;
    while (done < out.length) {
      const n = fs.readSync(fd, out, done, out.length - done, t.offset + done);
      if (n === 0) throw new Error(`gguf: ${file}: short read of ${t.name}`);
      done += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Number formats

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

/** f32 value -> IEEE half bits, round to nearest even; overflow gives ±inf, NaN stays NaN. */
export function f32ToF16Bits(x: number): number {
  f32buf[0] = x;
  const b = u32buf[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127; // unbiased
  if (e >= -14) {
    // Normal half (or overflow): drop 13 mantissa bits with round-to-nearest-even; a carry moves
    // into the exponent, and past the largest finite value it lands exactly on infinity.
    if (e > 15) return sign | 0x7c00;
    let h = ((e + 15) << 10) | (mant >>> 13);
    const rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++;
    return sign | h;
  }
  // Subnormal half: value = m · 2^-24 with m = round(M · 2^(e+1)), M the 24-bit significand.
  const s = -e - 1;
  if (s > 24) return sign;
  const M = exp === 0 ? mant : mant | 0x800000;
  let h = M >>> s;
  const rem = M & ((1 << s) - 1);
  const half = 1 << (s - 1);
  if (rem > half || (rem === half && (h & 1) === 1)) h++;
  return sign | h;
}

/** bf16 bytes -> f32 bytes (exact). */
export function bf16BytesToF32(src: Uint8Array): Uint8Array {
  const n = src.byteLength >>> 1;
  const out = new Uint8Array(n * 4);
  const o32 = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) o32[i] = (src[2 * i]! | (src[2 * i + 1]! << 8)) << 16 >>> 0;
  return out;
}

/** Values (f32-exact) -> bytes of `type` (F32, F16 rounded to nearest even, BF16 rounded to nearest even). */
export function encodeFloats(vals: Float32Array, type: GgmlType): Uint8Array {
  if (type === GGML_TYPE.F32) return new Uint8Array(vals.buffer.slice(vals.byteOffset, vals.byteOffset + vals.byteLength));
  const out = new Uint8Array(vals.length * 2);
  const o16 = new Uint16Array(out.buffer);
  if (type === GGML_TYPE.F16) {
    for (let i = 0; i < vals.length; i++) o16[i] = f32ToF16Bits(vals[i]!);
  } else if (type === GGML_TYPE.BF16) {
    const u = new Uint32Array(vals.buffer, vals.byteOffset, vals.length);
    for (let i = 0; i < vals.length; i++) {
      const b = u[i]!;
      o16[i] = (b & 0x7fffffff) > 0x7f800000 ? ((b >>> 16) | 0x40) & 0xffff : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
    }
  } else {
    throw new Error(`gguf: cannot encode floats as type ${type}`);
  }
  return out;
}

/** Bytes of a BF16 or F32 checkpoint tensor -> f32 values. */
export function decodeFloats(bytes: Uint8Array, dtype: string): Float32Array {
  if (dtype === 'F32') return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  if (dtype === 'BF16') return new Float32Array(bf16BytesToF32(bytes).buffer);
  throw new Error(`gguf: cannot decode dtype ${dtype} as floats`);
}

// ---------------------------------------------------------------------------------------------
// MXFP4: compressed-tensors (checkpoint) <-> ggml block_mxfp4
//
// Checkpoint (K3.md §5): per row, `packed` [in/2] bytes where byte k holds element 2k in its low
// nibble and element 2k+1 in its high nibble; `scale` [in/32] E8M0 bytes, value = E2M1[code] ·
// 2^(scale−127). ggml: per 32 elements one 17-byte block { u8 e; u8 qs[16] } where qs[j] holds
// element j in its low nibble and element j+16 in its high nibble; value = kvalues[code] · 2^(e−128)
// with kvalues = 2·E2M1, i.e. the same value for the same (code, scale byte). So the repack only
// moves nibbles and copies the scale byte: it is lossless. (One exception in meaning, not in bytes:
// scale 255 is NaN in OCP MX and 0 in our engine, but 2^127 in ggml; the converter refuses it.)

/** Repack `rows` rows of `cols` elements from the checkpoint layout to ggml blocks. */
export function mxfp4ToGgml(packed: Uint8Array, scale: Uint8Array, rows: number, cols: number): Uint8Array {
  if (cols % MXFP4_BLOCK !== 0) throw new Error(`mxfp4: ${cols} columns is not a multiple of ${MXFP4_BLOCK}`);
  const nb = cols / MXFP4_BLOCK;
  if (packed.byteLength !== rows * (cols / 2)) throw new Error(`mxfp4: packed has ${packed.byteLength} bytes, want ${rows * (cols / 2)}`);
  if (scale.byteLength !== rows * nb) throw new Error(`mxfp4: scale has ${scale.byteLength} bytes, want ${rows * nb}`);
  const out = new Uint8Array(rows * nb * MXFP4_BLOCK_BYTES);
  const codes = new Uint8Array(MXFP4_BLOCK);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const src = r * (cols / 2) + b * 16;
      for (let k = 0; k < 16; k++) {
        const byte = packed[src + k]!;
        codes[2 * k] = byte & 0x0f;
        codes[2 * k + 1] = byte >>> 4;
      }
      const dst = (r * nb + b) * MXFP4_BLOCK_BYTES;
      out[dst] = scale[r * nb + b]!;
      for (let j = 0; j < 16; j++) out[dst + 1 + j] = codes[j]! | (codes[j + 16]! << 4);
    }
  }
  return out;
}

/** The inverse of `mxfp4ToGgml`. */
export function ggmlToMxfp4(blocks: Uint8Array, rows: number, cols: number): { packed: Uint8Array; scale: Uint8Array } {
  if (cols % MXFP4_BLOCK !== 0) throw new Error(`mxfp4: ${cols} columns is not a multiple of ${MXFP4_BLOCK}`);
  const nb = cols / MXFP4_BLOCK;
  if (blocks.byteLength !== rows * nb * MXFP4_BLOCK_BYTES) throw new Error(`mxfp4: ${blocks.byteLength} block bytes, want ${rows * nb * MXFP4_BLOCK_BYTES}`);
  const packed = new Uint8Array(rows * (cols / 2));
  const scale = new Uint8Array(rows * nb);
  const codes = new Uint8Array(MXFP4_BLOCK);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const src = (r * nb + b) * MXFP4_BLOCK_BYTES;
      scale[r * nb + b] = blocks[src]!;
      for (let j = 0; j < 16; j++) {
        const byte = blocks[src + 1 + j]!;
        codes[j] = byte & 0x0f;
        codes[j + 16] = byte >>> 4;
      }
      const dst = r * (cols / 2) + b * 16;
      for (let k = 0; k < 16; k++) packed[dst + k] = codes[2 * k]! | (codes[2 * k + 1]! << 4);
    }
  }
  return { packed, scale };
}

/** Values of ggml MXFP4 blocks (as ggml decodes them), for checks. */
export function ggmlMxfp4Values(blocks: Uint8Array): Float32Array {
  const kv = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
  const nb = blocks.byteLength / MXFP4_BLOCK_BYTES;
  const out = new Float32Array(nb * MXFP4_BLOCK);
  for (let b = 0; b < nb; b++) {
    const d = 2 ** (blocks[b * MXFP4_BLOCK_BYTES]! - 128);
    for (let j = 0; j < 16; j++) {
      const byte = blocks[b * MXFP4_BLOCK_BYTES + 1 + j]!;
      out[b * MXFP4_BLOCK + j] = kv[byte & 0x0f]! * d;
      out[b * MXFP4_BLOCK + j + 16] = kv[byte >>> 4]! * d;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer stub

/** GPT-2's byte -> printable code point map (the byte-level BPE alphabet). */
function byteLevelAlphabet(): string[] {
  const keep: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Array<string>(256);
  const kept = new Set(keep);
  let extra = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(kept.has(b) ? b : 256 + extra++);
  return map;
}

/**
 * Tokenizer keys for a vocabulary of `vocab` ids: ids 0..255 are the 256 byte-level symbols (so
 * llama.cpp finds its newline token), the rest are placeholders; no merges. Enough for llama.cpp to
 * load and detokenize; the benches feed ids directly.
 */
export function stubTokenizer(meta: GgufMeta, vocab: number, bos: number | null, eos: number[]): void {
  if (vocab < 256) throw new Error(`gguf: the stub tokenizer needs a vocabulary of at least 256, got ${vocab}`);
  const alpha = byteLevelAlphabet();
  const tokens: string[] = [];
  for (let i = 0; i < vocab; i++) tokens.push(i < 256 ? alpha[i]! : `<|id_${i}|>`);
  meta.str('tokenizer.ggml.model', 'gpt2');
  meta.str('tokenizer.ggml.pre', 'default');
  meta.arr('tokenizer.ggml.tokens', GGUF_TYPE.STRING, tokens);
  meta.arr('tokenizer.ggml.token_type', GGUF_TYPE.INT32, tokens.map(() => 1));
  meta.arr('tokenizer.ggml.merges', GGUF_TYPE.STRING, []);
  if (bos !== null && bos < vocab) meta.u32('tokenizer.ggml.bos_token_id', bos);
  const e = eos.find((x) => x < vocab);
  if (e !== undefined) meta.u32('tokenizer.ggml.eos_token_id', e);
  meta.bool('tokenizer.ggml.add_bos_token', false);
  meta.bool('tokenizer.ggml.add_eos_token', false);
}

// ---------------------------------------------------------------------------------------------
// K3 checkpoint -> GGUF

export type TrunkFormat = 'f32' | 'f16' | 'bf16';
export type ExpertsGgufFormat = 'f32' | 'mxfp4';

export interface ConvertOptions {
  /** Type of every 2-D/3-D trunk matrix (embedding and lm_head included). Norms, biases, conv taps,
   *  `ssm_a`, the residual-score vectors and the router stay F32. Default f32. */
  trunk?: TrunkFormat;
  /** Routed experts: F32 (from BF16 or MXFP4 checkpoint experts, exact) or MXFP4 (from MXFP4
   *  checkpoint experts, lossless repack). Default: mxfp4 when the checkpoint has MXFP4 experts. */
  experts?: ExpertsGgufFormat;
  name?: string;
}

export interface ConvertResult extends WriteGgufResult {
  trunk: TrunkFormat;
  experts: ExpertsGgufFormat;
  params: number;
}

const TRUNK_TYPE: Record<TrunkFormat, GgmlType> = { f32: GGML_TYPE.F32, f16: GGML_TYPE.F16, bf16: GGML_TYPE.BF16 };

class CheckpointReader {
  private fds = new Map<string, number>();
  constructor(readonly entries: Map<string, TensorEntry>) {}
  entry(name: string): TensorEntry {
    const e = this.entries.get(name);
    if (!e) throw new Error(`gguf: the checkpoint has no tensor ${name}`);
    return e;
  }
  has(name: string): boolean {
    return this.entries.has(name);
  }
  bytes(name: string): Uint8Array {
    const e = this.entry(name);
    let fd = this.fds.get(e.file);
    if (fd === undefined) {
      fd = fs.openSync(e.file, 'r');
      this.fds.set(e.file, fd);
    }
    const out = new Uint8Array(e.nbytes);
    let done = 0;
    while (done < out.length) {
      const n = fs.readSync(fd, out, done, Math.min(out.length - done, 1 << 30), e.offset + done);
      if (n === 0) throw new Error(`gguf: short read of ${name} in ${e.file}`);
      done += n;
    }
    return out;
  }
  floats(name: string): Float32Array {
    return decodeFloats(this.bytes(name), this.entry(name).dtype);
  }
  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    this.fds.clear();
  }
}

/** The GGUF metadata for a K3 config (architecture `kimi-k3`). */
export function k3Metadata(cfg: ModelConfig, name: string, fileType: number): GgufMeta {
  const A = 'kimi-k3';
  const kda = cfg.kda;
  if (cfg.arch !== 'k3' || !kda || cfg.attnResBlock === null || cfg.moe.latentDim === null) throw new Error('gguf: only K3 checkpoints are converted (arch kimi-k3)');
  if (kda.heads !== cfg.mla.heads) throw new Error(`gguf: llama.cpp's kimi-k3 has one head count for KDA and MLA; this model has ${kda.heads} KDA and ${cfg.mla.heads} MLA heads`);
  if (kda.gateLowerBound === null) throw new Error('gguf: K3 needs gate_lower_bound');
  if (cfg.mla.rope !== null) throw new Error('gguf: K3 MLA is NoPE; this config has RoPE');
  if (cfg.act.kind !== 'situ' || cfg.act.situLinearBeta === null) throw new Error('gguf: K3 uses SiTU with a linear beta');
  const firstDense = cfg.layers.findIndex((L) => L.ffn === 'moe');
  if (firstDense < 0 || cfg.layers.slice(firstDense).some((L) => L.ffn !== 'moe')) throw new Error('gguf: expected leading dense layers then MoE layers');
  const m = cfg.mla;
  const meta = new GgufMeta();
  meta.str('general.architecture', A);
  meta.str('general.name', name);
  meta.u32('general.alignment', GGUF_DEFAULT_ALIGNMENT);
  meta.u32('general.file_type', fileType);
  meta.u32(`${A}.vocab_size`, cfg.vocabSize);
  meta.u32(`${A}.context_length`, Math.min(cfg.maxPositions, 1 << 20));
  meta.u32(`${A}.embedding_length`, cfg.hiddenSize);
  meta.u32(`${A}.block_count`, cfg.numLayers);
  meta.u32(`${A}.feed_forward_length`, cfg.intermediateSize);
  meta.u32(`${A}.attention.head_count`, m.heads);
  // 0 marks a KDA (recurrent) layer; MLA is served as MQA over the latent (1 KV head).
  meta.arr(`${A}.attention.head_count_kv`, GGUF_TYPE.INT32, cfg.layers.map((L) => (L.attn === 'mla' ? 1 : 0)));
  meta.f32(`${A}.attention.layer_norm_rms_epsilon`, cfg.rmsNormEps);
  if (m.qLoraRank !== null) meta.u32(`${A}.attention.q_lora_rank`, m.qLoraRank);
  meta.u32(`${A}.attention.kv_lora_rank`, m.kvLoraRank);
  meta.u32(`${A}.attention.key_length`, m.kvLoraRank + m.ropeDim);
  meta.u32(`${A}.attention.value_length`, m.kvLoraRank);
  meta.u32(`${A}.attention.key_length_mla`, m.nopeDim + m.ropeDim);
  meta.u32(`${A}.attention.value_length_mla`, m.vDim);
  meta.u32(`${A}.rope.dimension_count`, m.ropeDim);
  meta.u32(`${A}.ssm.conv_kernel`, kda.convSize);
  meta.u32(`${A}.kda.head_dim`, kda.headDim);
  meta.f32(`${A}.kda.gate_lower_bound`, kda.gateLowerBound);
  meta.u32(`${A}.expert_count`, cfg.moe.experts);
  meta.u32(`${A}.expert_used_count`, cfg.moe.topK);
  meta.u32(`${A}.expert_shared_count`, cfg.moe.shared);
  meta.u32(`${A}.expert_feed_forward_length`, cfg.moe.intermediate);
  meta.u32(`${A}.leading_dense_block_count`, firstDense);
  meta.f32(`${A}.expert_weights_scale`, cfg.moe.scaling);
  meta.bool(`${A}.expert_weights_norm`, cfg.moe.renormalize);
  meta.u32(`${A}.expert_gating_func`, 2); // sigmoid
  meta.u32(`${A}.expert_latent_length`, cfg.moe.latentDim);
  meta.f32(`${A}.activation.situ_beta`, cfg.act.situBeta);
  meta.f32(`${A}.activation.situ_linear_beta`, cfg.act.situLinearBeta);
  meta.u32(`${A}.attn_res.block_size`, cfg.attnResBlock);
  stubTokenizer(meta, cfg.vocabSize, cfg.bosTokenId, cfg.eosTokenIds);
  return meta;
}

/** Convert a K3 checkpoint directory (official layout) to a GGUF for llama.cpp's `kimi-k3`. */
export function convertK3ToGguf(dir: string, outFile: string, opts: ConvertOptions = {}): ConvertResult {
  const cfg = loadConfig(dir);
  const entries = indexCheckpointDir(dir);
  const rd = new CheckpointReader(entries);
  const trunkFmt = opts.trunk ?? 'f32';
  const TT = TRUNK_TYPE[trunkFmt];
  const P = `${cfg.prefix}model.`;
  const firstMoe = cfg.layers.findIndex((L) => L.ffn === 'moe');
  const mxfp4Src = firstMoe >= 0 && rd.has(`${P}layers.${firstMoe}.block_sparse_moe.experts.0.w1.weight_packed`);
  const expFmt: ExpertsGgufFormat = opts.experts ?? (mxfp4Src ? 'mxfp4' : 'f32');
  if (expFmt === 'mxfp4' && !mxfp4Src) throw new Error('gguf: MXFP4 experts in the GGUF need MXFP4 experts in the checkpoint (a lossless repack); convert BF16 experts as f32');
  // ggml file types: 0 all F32, 1 mostly F16, 32 mostly BF16, 38 mostly MXFP4 (MoE).
  const fileType = expFmt === 'mxfp4' ? 38 : trunkFmt === 'f16' ? 1 : trunkFmt === 'bf16' ? 32 : 0;
  const meta = k3Metadata(cfg, opts.name ?? path.basename(path.resolve(dir)), fileType);
  const D = cfg.hiddenSize;
  const tensors: GgufTensorSpec[] = [];
  let params = 0;

  const shapeOf = (hf: string) => rd.entry(hf).shape;
  /** A checkpoint matrix [out, in] (BF16/F32) as a trunk matrix ggml [in, out]. */
  const mat = (gg: string, hf: string, type: GgmlType = TT) => {
    const sh = shapeOf(hf);
    if (sh.length !== 2) throw new Error(`gguf: ${hf}: expected a 2-D weight, got [${sh.join(', ')}]`);
    tensors.push({ name: gg, type, ne: [sh[1]!, sh[0]!], data: () => encodeFloats(rd.floats(hf), type) });
    params += sh[0]! * sh[1]!;
  };
  /** A vector (any shape, flattened) as F32 with ggml dims `ne`. */
  const vec = (gg: string, hf: string, ne?: number[]) => {
    const n = shapeOf(hf).reduce((a, b) => a * b, 1);
    tensors.push({ name: gg, type: GGML_TYPE.F32, ne: ne ?? [n], data: () => encodeFloats(rd.floats(hf), GGML_TYPE.F32) });
    params += n;
  };
  const derived = (gg: string, ne: number[], type: GgmlType, make: () => Float32Array) => {
    tensors.push({ name: gg, type, ne, data: () => encodeFloats(make(), type) });
    params += ne.reduce((a, b) => a * b, 1);
  };
  const resScore = (gg: string, normHf: string, projHf: string) => {
    derived(gg, [D], GGML_TYPE.F32, () => {
      const nw = rd.floats(normHf);
      const pw = rd.floats(projHf);
      const f = new Float32Array(D);
      for (let i = 0; i < D; i++) f[i] = nw[i]! * pw[i]!;
      return f;
    });
  };

  try {
    mat('token_embd.weight', `${P}embed_tokens.weight`);
    vec('output_norm.weight', `${P}norm.weight`);
    mat('output.weight', `${cfg.prefix}lm_head.weight`);
    resScore('output_res_score.weight', `${P}output_attn_res_norm.weight`, `${P}output_attn_res_proj.weight`);

    for (let l = 0; l < cfg.numLayers; l++) {
      const L = cfg.layers[l]!;
      const h = `${P}layers.${l}.`;
      const a = `${h}self_attn.`;
      const g = `blk.${l}.`;
      vec(`${g}attn_norm.weight`, `${h}input_layernorm.weight`);
      vec(`${g}ffn_norm.weight`, `${h}post_attention_layernorm.weight`);
      resScore(`${g}attn_res_score.weight`, `${h}self_attention_res_norm.weight`, `${h}self_attention_res_proj.weight`);
      resScore(`${g}ffn_res_score.weight`, `${h}mlp_res_norm.weight`, `${h}mlp_res_proj.weight`);
      if (L.attn === 'kda') {
        const k = cfg.kda!;
        const W = k.heads * k.headDim;
        mat(`${g}attn_q.weight`, `${a}q_proj.weight`);
        mat(`${g}attn_k.weight`, `${a}k_proj.weight`);
        mat(`${g}attn_v.weight`, `${a}v_proj.weight`);
        for (const x of ['q', 'k', 'v']) vec(`${g}ssm_conv1d_${x}.weight`, `${a}${x}_conv1d.weight`, [k.convSize, 1, W]);
        mat(`${g}ssm_f_a.weight`, `${a}f_a_proj.weight`);
        mat(`${g}ssm_f_b.weight`, `${a}f_b_proj.weight`);
        mat(`${g}ssm_beta.weight`, `${a}b_proj.weight`);
        derived(`${g}ssm_a`, [k.heads], GGML_TYPE.F32, () => {
          const al = rd.floats(`${a}A_log`);
          const out = new Float32Array(k.heads);
          for (let i = 0; i < k.heads; i++) out[i] = -Math.exp(al[i]!);
          return out;
        });
        vec(`${g}ssm_dt.bias`, `${a}dt_bias`);
        mat(`${g}ssm_g.weight`, `${a}g_proj.weight`);
        vec(`${g}ssm_norm.weight`, `${a}o_norm.weight`);
        mat(`${g}attn_output.weight`, `${a}o_proj.weight`);
      } else {
        const m = cfg.mla;
        if (m.qLoraRank !== null) {
          mat(`${g}attn_q_a.weight`, `${a}q_a_proj.weight`);
          vec(`${g}attn_q_a_norm.weight`, `${a}q_a_layernorm.weight`);
          mat(`${g}attn_q_b.weight`, `${a}q_b_proj.weight`);
        } else {
          mat(`${g}attn_q.weight`, `${a}q_proj.weight`);
        }
        mat(`${g}attn_kv_a_mqa.weight`, `${a}kv_a_proj_with_mqa.weight`);
        vec(`${g}attn_kv_a_norm.weight`, `${a}kv_a_layernorm.weight`);
        // kv_b [H·(nope+v), Lk]: head h's rows are nope key rows then v value rows.
        const H = m.heads;
        const Lk = m.kvLoraRank;
        const per = m.nopeDim + m.vDim;
        let kvb: Float32Array | null = null;
        const kvbOnce = () => (kvb ??= rd.floats(`${a}kv_b_proj.weight`));
        // attn_k_b: ggml [nope, Lk, H] = row-major [H][Lk][nope]: k_b[h][c][n] = kv_b[h·per + n][c].
        derived(`${g}attn_k_b.weight`, [m.nopeDim, Lk, H], TT, () => {
          const src = kvbOnce();
          const out = new Float32Array(H * Lk * m.nopeDim);
          for (let hh = 0; hh < H; hh++) {
            for (let n = 0; n < m.nopeDim; n++) {
              const row = (hh * per + n) * Lk;
              for (let c = 0; c < Lk; c++) out[(hh * Lk + c) * m.nopeDim + n] = src[row + c]!;
            }
          }
          return out;
        });
        // attn_v_b: ggml [Lk, v, H] = row-major [H][v][Lk]: the value rows as they are.
        derived(`${g}attn_v_b.weight`, [Lk, m.vDim, H], TT, () => {
          const src = kvbOnce();
          const out = new Float32Array(H * m.vDim * Lk);
          for (let hh = 0; hh < H; hh++) out.set(src.subarray((hh * per + m.nopeDim) * Lk, (hh * per + per) * Lk), hh * m.vDim * Lk);
          kvb = null;
          return out;
        });
        mat(`${g}attn_gate.weight`, `${a}g_proj.weight`);
        mat(`${g}attn_output.weight`, `${a}o_proj.weight`);
      }
      if (L.ffn === 'dense') {
        mat(`${g}ffn_gate.weight`, `${h}mlp.gate_proj.weight`);
        mat(`${g}ffn_up.weight`, `${h}mlp.up_proj.weight`);
        mat(`${g}ffn_down.weight`, `${h}mlp.down_proj.weight`);
      } else {
        const b = `${h}block_sparse_moe.`;
        const E = cfg.moe.experts;
        const I = cfg.moe.intermediate;
        const Lt = cfg.moe.latentDim!;
        mat(`${g}ffn_gate_inp.weight`, `${b}gate.weight`, GGML_TYPE.F32); // router stays F32
        vec(`${g}exp_probs_b.bias`, `${b}gate.e_score_correction_bias`);
        mat(`${g}ffn_routed_down.weight`, `${b}routed_expert_down_proj.weight`);
        vec(`${g}ffn_routed_norm.weight`, `${b}routed_expert_norm.weight`);
        mat(`${g}ffn_routed_up.weight`, `${b}routed_expert_up_proj.weight`);
        if (cfg.moe.shared > 0) {
          mat(`${g}ffn_gate_shexp.weight`, `${b}shared_experts.gate_proj.weight`);
          mat(`${g}ffn_up_shexp.weight`, `${b}shared_experts.up_proj.weight`);
          mat(`${g}ffn_down_shexp.weight`, `${b}shared_experts.down_proj.weight`);
        }
        // w1 gate [I, Lt], w3 up [I, Lt], w2 down [Lt, I]; stacked: ggml [in, out, E].
        for (const [gg, w, rows, cols] of [['ffn_gate_exps', 'w1', I, Lt], ['ffn_up_exps', 'w3', I, Lt], ['ffn_down_exps', 'w2', Lt, I]] as const) {
          const ne = [cols, rows, E];
          params += rows * cols * E;
          if (expFmt === 'mxfp4') {
            tensors.push({
              name: `${g}${gg}.weight`, type: GGML_TYPE.MXFP4, ne,
              data: () => {
                const per = rows * (cols / MXFP4_BLOCK) * MXFP4_BLOCK_BYTES;
                const out = new Uint8Array(per * E);
                for (let e = 0; e < E; e++) {
                  const x = `${b}experts.${e}.${w}.`;
                  const scale = rd.bytes(`${x}weight_scale`);
                  if (scale.includes(255)) throw new Error(`gguf: ${x}weight_scale holds E8M0 255 (NaN in OCP MX, 0 in our engine, 2^127 in ggml): not convertible losslessly`);
                  out.set(mxfp4ToGgml(rd.bytes(`${x}weight_packed`), scale, rows, cols), e * per);
                }
                return out;
              },
            });
          } else {
            tensors.push({
              name: `${g}${gg}.weight`, type: GGML_TYPE.F32, ne,
              data: () => {
                const out = new Float32Array(rows * cols * E);
                for (let e = 0; e < E; e++) {
                  const x = `${b}experts.${e}.${w}.`;
                  let v: Float32Array;
                  if (rd.has(`${x}weight`)) v = rd.floats(`${x}weight`);
                  else {
                    const blocks = mxfp4ToGgml(rd.bytes(`${x}weight_packed`), rd.bytes(`${x}weight_scale`), rows, cols);
                    v = ggmlMxfp4Values(blocks);
                  }
                  out.set(v, e * rows * cols);
                }
                return new Uint8Array(out.buffer);
              },
            });
          }
        }
      }
    }
    const res = writeGguf(outFile, meta, tensors);
    return { ...res, trunk: trunkFmt, experts: expFmt, params };
  } finally {
    rd.close();
  }
}
