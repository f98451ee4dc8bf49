// `k3 pack --compress`: code the BF16 trunk matrices (formats/bf16-code.ts) into temporary files
// inside the pack's temporary directory; the pack then copies them into its records like any
// other tensor, so records, offsets and sha256 cover the bytes as stored.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ModelConfig } from '../checkpoint/config.js';
import { trunkOrder } from '../checkpoint/names.js';
import type { TensorEncoding } from '../checkpoint/packed.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import { CODE_NAME, blockRowsFor, encodeBlock } from '../formats/bf16-code.js';
import { ReadError } from '../util/errors.js';

/** Source rows read per step while coding (bounded memory whatever the tensor's size). */
const READ_BYTES = 16 * 2 ** 20;

export interface CodedTensors {
  /** The entries with every coded tensor pointing at its temporary file (nbytes = stored bytes). */
  entries: Map<string, TensorEntry>;
  encodings: Map<string, TensorEncoding>;
  rawBytes: number;
  storedBytes: number;
}

/** The tensors --compress codes: every BF16 trunk matrix (the embedding stays raw: it is read a row at a time). */
export function codedNames(cfg: ModelConfig, entries: Map<string, TensorEntry>): string[] {
  const out: string[] = [];
  for (const m of trunkOrder(cfg)) {
    const e = entries.get(`${m.base}.weight`);
    if (e && e.dtype === 'BF16' && e.shape.length === 2 && e.shape[0] === m.rows && e.shape[1] === m.cols) out.push(e.name);
  }
  return out;
}

function readFullSync(fd: number, file: string, buf: Uint8Array, pos: number): void {
  let done = 0;
  while (done < buf.byteLength) {
    const n = fs.readSync(fd, buf, done, buf.byteLength - done, pos + done);
    if (n === 0) throw new ReadError(`${file}: short read at offset ${pos + done} (file truncated?)`);
    done += n;
  }
}

/** Code one tensor into `dst`; its encoding (block table) and stored size. */
function codeTensor(e: TensorEntry, dst: string, onRead?: (file: string, offset: number, bytes: Uint8Array) => void): TensorEncoding {
  const [rows, cols] = e.shape as [number, number];
  const blockRows = blockRowsFor(cols);
  const rowsPerRead = Math.max(blockRows, Math.floor(READ_BYTES / (2 * cols * blockRows)) * blockRows);
  const stored: number[] = [];
  const src = fs.openSync(e.file, 'r');
  const out = fs.openSync(dst, 'w');
  let pos = 0;
  try {
    for (let r0 = 0; r0 < rows; r0 += rowsPerRead) {
      const r1 = Math.min(rows, r0 + rowsPerRead);
      const buf = new Uint8Array(2 * cols * (r1 - r0));
      readFullSync(src, e.file, buf, e.offset + 2 * cols * r0);
      onRead?.(e.file, e.offset + 2 * cols * r0, buf);
      const v = new Uint16Array(buf.buffer);
      for (let b = 0; b < r1 - r0; b += blockRows) {
        const coded = encodeBlock(v.subarray(b * cols, Math.min(r1 - r0, b + blockRows) * cols));
        fs.writeSync(out, coded, 0, coded.byteLength, pos);
        pos += coded.byteLength;
        stored.push(coded.byteLength);
      }
    }
  } finally {
    fs.closeSync(src);
    fs.closeSync(out);
  }
  return { code: CODE_NAME, block_rows: blockRows, stored_bytes: pos, blocks: Buffer.from(new Uint32Array(stored).buffer).toString('base64') };
}

/** Code every tensor of `codedNames` into files under `dir`. */
export function codeTrunk(cfg: ModelConfig, entries: Map<string, TensorEntry>, dir: string, stop: () => void, onRead?: (file: string, offset: number, bytes: Uint8Array) => void): CodedTensors {
  const names = codedNames(cfg, entries);
  fs.mkdirSync(dir, { recursive: true });
  const out = new Map(entries);
  const encodings = new Map<string, TensorEncoding>();
  let rawBytes = 0, storedBytes = 0;
  names.forEach((name, i) => {
    stop();
    const e = entries.get(name)!;
    const file = path.join(dir, `${i}.bin`);
    const enc = codeTensor(e, file, onRead);
    encodings.set(name, enc);
    out.set(name, { ...e, file, offset: 0, nbytes: enc.stored_bytes });
    rawBytes += e.nbytes;
    storedBytes += enc.stored_bytes;
  });
  return { entries: out, encodings, rawBytes, storedBytes };
}
