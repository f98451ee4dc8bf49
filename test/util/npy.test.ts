// .npy reading (src/util/npy.ts): the header's dtype, order and shape must match what the caller
// expects (little-endian float32, C order) and the data must be exactly product(shape) * 4 bytes;
// anything else throws an error naming the file. The files here are built by hand (header text
// as NumPy 1.x writes it), not by encodeNpyF32, so the reader is checked against the format.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { decodeNpyF32, encodeNpyF32, readNpyF32 } from '../../src/util/npy.js';
import { UserError } from '../../src/util/errors.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-npy-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

/** A version-1.0 .npy: magic, version, u16 header length, header padded with spaces to 64 and '\n', data. */
function npy(descr: string, shape: string, data: Uint8Array, fortran = 'False'): Buffer {
  let h = `{'descr': '${descr}', 'fortran_order': ${fortran}, 'shape': ${shape}, }`;
  h += ' '.repeat(64 - ((10 + h.length + 1) % 64)) + '\n';
  const pre = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, h.length & 0xff, h.length >> 8]);
  return Buffer.concat([pre, Buffer.from(h, 'latin1'), data]);
}

const vals = Float32Array.from([1, -2.5, 3e-7, 1e30, -0, 6]);
const bytes = new Uint8Array(vals.buffer);

function write(name: string, b: Uint8Array): string {
  const f = path.join(TMP, name);
  fs.writeFileSync(f, b);
  return f;
}

function rejects(file: string, ...parts: RegExp[]): void {
  assert.throws(
    () => readNpyF32(file),
    (e: unknown) => {
      assert.ok(e instanceof UserError, `UserError, got ${String(e)}`);
      assert.ok(e.message.includes(file), `message names the file: ${e.message}`);
      for (const p of parts) assert.match(e.message, p);
      return true;
    },
  );
}

test('npy: a hand-built <f4 file reads back with its shape and values; encodeNpyF32 writes the same bytes', () => {
  const f = write('ok.npy', npy('<f4', '(2, 3)', bytes));
  const r = readNpyF32(f);
  assert.deepEqual(r.shape, [2, 3]);
  assert.deepEqual(Array.from(r.data), Array.from(vals));
  assert.deepEqual(encodeNpyF32(vals, [2, 3]), fs.readFileSync(f));
  const one = decodeNpyF32(npy('<f4', '(6,)', bytes));
  assert.deepEqual(one.shape, [6]);
  const empty = decodeNpyF32(npy('<f4', '(0, 4)', new Uint8Array(0)));
  assert.deepEqual([empty.shape, empty.data.length], [[0, 4], 0]);
});

test('npy: truncated data, extra bytes, a truncated header all throw naming the file', () => {
  rejects(write('short.npy', npy('<f4', '(2, 3)', bytes.subarray(0, 20))), /needs 24 data bytes, the file has 20/, /truncated/);
  rejects(write('short1.npy', npy('<f4', '(2, 3)', bytes.subarray(0, 23))), /has 23/);
  rejects(write('extra.npy', npy('<f4', '(2, 3)', Buffer.concat([bytes, Buffer.alloc(4)]))), /has 28/, /4 extra bytes/);
  rejects(write('extra1.npy', npy('<f4', '(5,)', bytes)), /needs 20 data bytes, the file has 24/);
  const whole = npy('<f4', '(2, 3)', bytes);
  rejects(write('header.npy', whole.subarray(0, 40)), /runs past the end/);
  rejects(write('magic.npy', whole.subarray(0, 6)), /not a \.npy file/);
});

test('npy: a dtype other than <f4, Fortran order or a bad shape throws naming the file', () => {
  const f8 = new Uint8Array(new Float64Array(6).buffer);
  rejects(write('f8.npy', npy('<f8', '(2, 3)', f8)), /dtype '<f8'/, /expected '<f4'/);
  rejects(write('be.npy', npy('>f4', '(2, 3)', bytes)), /dtype '>f4'/);
  rejects(write('f2.npy', npy('<f2', '(2, 3)', bytes.subarray(0, 12))), /dtype '<f2'/);
  rejects(write('i4.npy', npy('<i4', '(2, 3)', bytes)), /dtype '<i4'/);
  rejects(write('fortran.npy', npy('<f4', '(2, 3)', bytes, 'True')), /Fortran/);
  rejects(write('shape.npy', npy('<f4', '(2, -3)', bytes)), /not a tuple of non-negative integers/);
});
