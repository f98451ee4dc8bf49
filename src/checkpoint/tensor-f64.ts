// Whole tensors read as float64, for the reference paths (the DSpark drafter's float64 forward,
// model/dspark-ref.ts): plain BF16 or F32 entries of a safetensors file, read straight from disk.
// Meant for tiny checkpoints; `maxValues` refuses a tensor that would not be one.

import * as fs from 'node:fs';
import { bf16ToF32 } from '../formats/dtypes.js';
import { UserError } from '../util/errors.js';
import type { TensorEntry } from './safetensors.js';

/** The tensor's values, row-major, as float64 (BF16 and F32 are exact in a double). */
export function readTensorF64(e: TensorEntry, maxValues = 2 ** 24): Float64Array {
  const n = e.shape.reduce((a, b) => a * b, 1);
  if (e.coded || (e.dtype !== 'BF16' && e.dtype !== 'F32')) throw new UserError(`${e.file}: ${e.name} is ${e.coded ? 'coded (k3 pack --compress)' : e.dtype}; the reference path reads plain BF16 or F32 tensors only`);
  if (n > maxValues) throw new UserError(`${e.file}: ${e.name} has ${n} values; the float64 reference path holds at most ${maxValues} per tensor (it is for small checkpoints)`);
  const buf = Buffer.alloc(e.nbytes);
  const fd = fs.openSync(e.file, 'r');
  try {
    fs.readSync(fd, buf, 0, e.nbytes, e.offset);
  } finally {
    fs.closeSync(fd);
  }
  const out = new Float64Array(n);
  if (e.dtype === 'F32') {
    for (let i = 0; i < n; i++) out[i] = buf.readFloatLE(4 * i);
    return out;
  }
  for (let i = 0; i < n; i++) out[i] = bf16ToF32(buf.readUInt16LE(2 * i));
  return out;
}

/** A name -> float64 values lookup over `entries`, each tensor read on first use and kept. */
export function tensorsF64(entries: Map<string, TensorEntry>, what: string): (name: string) => Float64Array {
  const kept = new Map<string, Float64Array>();
  return (name) => {
    let v = kept.get(name);
    if (!v) {
      const e = entries.get(name);
      if (!e) throw new UserError(`${what}: no tensor ${name}`);
      v = readTensorF64(e);
      kept.set(name, v);
    }
    return v;
  };
}
