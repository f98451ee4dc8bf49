// One safetensors file's header (a directory of them: dir.ts).
// Format: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then data;
// offsets are relative to byte 8 + N (docs/spec/K3.md §1). Headers are validated completely before any
// tensor is used; tensor bytes are fetched later with positioned reads, never a whole shard.

import * as fs from 'node:fs';
import { DTYPE_BYTES, isDType, type DType } from '../formats/dtypes.js';
import { ReadError, UserError } from '../util/errors.js';

/** Where one tensor's bytes are: absolute offset inside `file`. */
export interface TensorEntry {
  name: string;
  file: string;
  dtype: DType;
  shape: number[];
  offset: number;
  nbytes: number;
  /**
   * Set for a BF16 matrix a packed directory stores coded (`k3 pack --compress`, formats/bf16-code.ts):
   * `offset` is where its first block starts, `nbytes` stays the raw size.
   */
  coded?: { blockRows: number; stored: number[]; storedBytes: number };
}

const MAX_HEADER_BYTES = 100 * 1024 * 1024;
/** Deepest JSON nesting a header can need: {tensors: {entry: {shape: [..]}}} is 3; checked before
 *  JSON.parse, which overflows the stack on deeply nested input. */
const MAX_HEADER_DEPTH = 16;
/** No tensor in any Kimi / DeepSeek checkpoint has more than 4 dimensions. */
const MAX_RANK = 8;

/** The deepest [ / { nesting of JSON text, strings skipped; stops counting past `limit`. */
export function jsonDepth(text: string, limit: number): number {
  let depth = 0;
  let max = 0;
  let inStr = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inStr) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inStr = false;
    } else if (c === 0x22) inStr = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) max = depth;
      if (max > limit) return max;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}

function bad(file: string, what: string): never {
  throw new UserError(`${file}: ${what}`);
}

/** Parse and validate one safetensors header. Reads only the header bytes. */
export function readSafetensorsHeader(file: string): TensorEntry[] {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw new ReadError(`${file}: cannot open (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
  try {
    const size = fs.fstatSync(fd).size;
    if (size < 8) bad(file, `truncated: ${size} bytes, not even a header length`);
    const lenBuf = Buffer.alloc(8);
    fs.readSync(fd, lenBuf, 0, 8, 0);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (n < 2 || n > MAX_HEADER_BYTES) bad(file, `header length ${n} is not sane (2 .. ${MAX_HEADER_BYTES})`);
    if (8 + n > size) bad(file, `truncated: header of ${n} bytes runs past the end of the file (${size} bytes)`);
    const hb = Buffer.alloc(n);
    const got = fs.readSync(fd, hb, 0, n, 8);
    if (got !== n) bad(file, `short read of the header (${got} of ${n} bytes)`);
    return parseSafetensorsHeader(file, hb, size);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Validate header bytes `hb` of a file of `size` bytes (header length = hb.length): bounded
 * nesting, one object of {dtype, shape, data_offsets} entries, and tensors that tile the data
 * section exactly (no gap, no overlap, nothing past the end), as the safetensors format requires.
 * A header length a few bytes off then shows as a data section that does not match the tensors.
 * Pure: the fuzz tests call it on mutated headers in-process.
 */
export function parseSafetensorsHeader(file: string, hb: Uint8Array, size: number): TensorEntry[] {
  const n = hb.length;
  const text = Buffer.from(hb.buffer, hb.byteOffset, hb.byteLength).toString('utf8');
  if (jsonDepth(text, MAX_HEADER_DEPTH) > MAX_HEADER_DEPTH) bad(file, `header nests deeper than ${MAX_HEADER_DEPTH} levels (corrupt)`);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    bad(file, 'header is not valid JSON (header length wrong, or the header is damaged)');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad(file, 'header is not a JSON object');
  const dataStart = 8 + n;
  const dataLen = size - dataStart;
  const entries: TensorEntry[] = [];
  for (const [name, v] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(file, '__metadata__ is not an object');
      continue;
    }
    entries.push(parseEntry(file, name, v, dataStart, dataLen));
  }
  checkTiling(file, entries, dataStart, dataLen);
  return entries;
}

function parseEntry(file: string, name: string, v: unknown, dataStart: number, dataLen: number): TensorEntry {
  const o = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  if (typeof o !== 'object' || o === null) bad(file, `tensor ${name}: entry is not an object`);
  if (typeof o.dtype !== 'string' || !isDType(o.dtype)) bad(file, `tensor ${name}: unknown dtype ${JSON.stringify(o.dtype)}`);
  if (!Array.isArray(o.shape) || o.shape.length > MAX_RANK || !o.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    bad(file, `tensor ${name}: shape ${JSON.stringify(o.shape)} is not a list of sizes`);
  }
  const off = o.data_offsets;
  if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    bad(file, `tensor ${name}: data_offsets ${JSON.stringify(off)} is not [start, end]`);
  }
  const [start, end] = off as [number, number];
  const shape = o.shape as number[];
  const count = shape.reduce((a, b) => a * b, 1);
  const want = count * DTYPE_BYTES[o.dtype];
  if (!Number.isSafeInteger(want)) bad(file, `tensor ${name}: shape ${JSON.stringify(shape)} is too large`);
  if (end < start) bad(file, `tensor ${name}: data_offsets end ${end} is before start ${start}`);
  if (end - start !== want) {
    bad(file, `tensor ${name}: byte length ${end - start} != shape ${JSON.stringify(shape)} x ${o.dtype} (${want} bytes)`);
  }
  if (end > dataLen) {
    bad(file, `tensor ${name}: data_offsets [${start}, ${end}] overrun the file's ${dataLen} data bytes (truncated or corrupt)`);
  }
  return { name, file, dtype: o.dtype, shape, offset: dataStart + start, nbytes: end - start };
}

function checkTiling(file: string, entries: TensorEntry[], dataStart: number, dataLen: number): void {
  const sorted = [...entries].sort((a, b) => a.offset - b.offset || a.nbytes - b.nbytes);
  let end = 0;
  let prev = '';
  for (const c of sorted) {
    const start = c.offset - dataStart;
    if (start < end) bad(file, `tensors ${prev} and ${c.name} overlap (bytes ..${end} and ${start}..)`);
    if (start > end) bad(file, `gap of ${start - end} bytes before tensor ${c.name} (data bytes ${end}..${start} belong to no tensor: header length or offsets wrong)`);
    end = start + c.nbytes;
    prev = c.name;
  }
  if (end !== dataLen) bad(file, `tensors cover ${end} of the ${dataLen} data bytes (header length or offsets wrong, or trailing bytes)`);
}
