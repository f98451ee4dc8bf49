// The GGUF (version 3) container for the llama.cpp comparison bench: metadata and tensor types,
// a streaming writer and a minimal reader (used by the tests and as a self-check). What goes into
// the tensors is elsewhere: ./encodings.ts (f16/bf16 rounding, the MXFP4 repack) and ./convert.ts
// (our checkpoints -> llama.cpp's names and shapes).
//
// File layout written here (all little-endian):
//   u32 magic "GGUF", u32 version 3, u64 tensor count, u64 metadata count,
//   metadata: (string key, u32 value type, value)*,
//   tensor infos: (string name, u32 n_dims, u64 ne[n_dims] (ne[0] = innermost), u32 ggml type,
//                  u64 offset relative to the data section, a multiple of the alignment)*,
//   zero padding to the alignment (general.alignment, default 32), then the tensor data, each
//   tensor padded to the alignment. A string is a u64 byte length and UTF-8 bytes (no NUL).

import * as fs from 'node:fs';
import * as path from 'node:path';

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
