// NumPy .npy version 1.0, little-endian float32, C order: the format of `k3 logits --out` and of
// the golden logits.

import * as fs from 'node:fs';
import { UserError } from './errors.js';

export function encodeNpyF32(data: Float32Array, shape: number[]): Buffer {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  return Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
}

export function decodeNpyF32(buf: Uint8Array, name = 'npy'): { shape: number[]; data: Float32Array } {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (b.length < 10 || b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new UserError(`${name}: not a .npy file`);
  const major = b[6]!;
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = b.toString('latin1', hstart, hstart + hlen);
  if (!header.includes("'<f4'")) throw new UserError(`${name}: only little-endian float32 .npy is supported`);
  if (header.includes("'fortran_order': True")) throw new UserError(`${name}: Fortran order is not supported`);
  const m = /'shape': \(([^)]*)\)/.exec(header);
  if (!m) throw new UserError(`${name}: no shape in the header`);
  const shape = m[1]!.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const n = shape.reduce((a, c) => a * c, 1);
  const off = hstart + hlen;
  const data = new Float32Array(n);
  new Uint8Array(data.buffer).set(b.subarray(off, off + n * 4));
  return { shape, data };
}

export function readNpyF32(file: string): { shape: number[]; data: Float32Array } {
  return decodeNpyF32(fs.readFileSync(file), file);
}
