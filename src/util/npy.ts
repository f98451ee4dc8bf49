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

/**
 * Decode a .npy holding little-endian float32 in C order. Everything the header claims is checked
 * against the file: the magic and version, the header length, `descr` exactly `'<f4'`,
 * `fortran_order` False, a shape of non-negative integers, and a data section of exactly
 * product(shape) * 4 bytes (a truncated file or trailing bytes both throw). Errors name `name`.
 */
export function decodeNpyF32(buf: Uint8Array, name = 'npy'): { shape: number[]; data: Float32Array } {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (b.length < 10 || b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new UserError(`${name}: not a .npy file (no \\x93NUMPY magic)`);
  const major = b[6]!;
  if (major !== 1 && major !== 2 && major !== 3) throw new UserError(`${name}: .npy format version ${major}.${b[7]} is not supported`);
  const hstart = major === 1 ? 10 : 12;
  if (b.length < hstart) throw new UserError(`${name}: truncated .npy header`);
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  if (hstart + hlen > b.length) throw new UserError(`${name}: header of ${hlen} bytes runs past the end of the ${b.length}-byte file`);
  const header = b.toString(major === 3 ? 'utf8' : 'latin1', hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  if (!descr) throw new UserError(`${name}: no 'descr' in the .npy header`);
  if (descr[1] !== '<f4') throw new UserError(`${name}: dtype '${descr[1]}' in the .npy header, expected '<f4' (little-endian float32)`);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  if (!fortran) throw new UserError(`${name}: no 'fortran_order' in the .npy header`);
  if (fortran[1] === 'True') throw new UserError(`${name}: Fortran order is not supported`);
  const m = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!m) throw new UserError(`${name}: no shape in the .npy header`);
  const parts = m[1]!.split(',').map((s) => s.trim()).filter(Boolean);
  if (!parts.every((s) => /^\d+$/.test(s))) throw new UserError(`${name}: shape (${m[1]}) is not a tuple of non-negative integers`);
  const shape = parts.map(Number);
  const n = shape.reduce((a, c) => a * c, 1);
  const off = hstart + hlen;
  const want = n * 4;
  const have = b.length - off;
  if (have !== want) {
    throw new UserError(`${name}: shape (${shape.join(', ')}) of '<f4' needs ${want} data bytes, the file has ${have} (${have < want ? 'truncated' : `${have - want} extra bytes`})`);
  }
  const data = new Float32Array(n);
  new Uint8Array(data.buffer).set(b.subarray(off, off + want));
  return { shape, data };
}

export function readNpyF32(file: string): { shape: number[]; data: Float32Array } {
  return decodeNpyF32(fs.readFileSync(file), file);
}
