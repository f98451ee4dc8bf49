// Streaming safetensors writer (docs/spec/K3.md §1 framing): the JSON header is computed first from the
// ordered tensor list, then the data is produced and written sequentially in bounded chunks, so a
// multi-GB shard never sits in memory. The file is written as `<file>.tmp` and renamed when
// complete; on any error the partial file is removed.
//
// Header: `{"__metadata__":{"format":"pt"}, name: {dtype, shape, data_offsets}, ...}` in tensor
// order, padded with spaces so the data starts at a multiple of 8 bytes.

import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { DTYPE_BYTES, type DType } from '../formats/dtypes.js';

/** Default size of one write (two such buffers alternate: one fills while the other is written). */
export const DEFAULT_CHUNK_BYTES = 16 << 20;
/** Upper bound for `chunkBytes`. */
export const MAX_CHUNK_BYTES = 64 << 20;

export interface TensorToWrite {
  name: string;
  dtype: DType;
  shape: number[];
  /**
   * Produces the bytes in order: called with consecutive pieces covering [0, nbytes), `offset`
   * being the piece's byte offset in the tensor. Every piece but the last is a multiple of 64 bytes.
   */
  fill?: (piece: Uint8Array, offset: number) => void;
  /** Or: yields the bytes in order, in chunks of any size (the total must be exactly nbytes). */
  chunks?: () => Iterable<Uint8Array>;
  /** Or: all the bytes at once. */
  data?: Uint8Array;
}

export function tensorNbytes(t: { dtype: DType; shape: number[] }): number {
  return t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
}

export interface SafetensorsLayout {
  /** The 8-byte length prefix followed by the padded JSON header. */
  header: Uint8Array;
  /** Byte offset of each tensor inside the data section, in the given order. */
  offsets: number[];
  dataBytes: number;
  /** Whole-file size. */
  fileBytes: number;
}

/** The header of a file holding `tensors` in this order. */
export function safetensorsLayout(tensors: readonly { name: string; dtype: DType; shape: number[] }[]): SafetensorsLayout {
  const obj: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  const offsets: number[] = [];
  let off = 0;
  for (const t of tensors) {
    if (t.name === '__metadata__' || Object.prototype.hasOwnProperty.call(obj, t.name)) {
      throw new Error(`safetensors writer: duplicate or reserved tensor name ${JSON.stringify(t.name)}`);
    }
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new Error(`safetensors writer: bad shape for ${t.name}: ${JSON.stringify(t.shape)}`);
    const n = tensorNbytes(t);
    offsets.push(off);
    obj[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + n] };
    off += n;
  }
  let json = Buffer.from(JSON.stringify(obj), 'utf8');
  const pad = (8 - (json.length % 8)) % 8;
  if (pad) json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
  const header = new Uint8Array(8 + json.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(json.length), true);
  header.set(json, 8);
  return { header, offsets, dataBytes: off, fileBytes: header.length + off };
}

export interface WriteOptions {
  /** Bytes per write, a multiple of 64 up to 64 MiB (default 16 MiB). */
  chunkBytes?: number;
  /** Called after each completed write with the bytes written so far in this file. */
  onBytes?: (written: number) => void;
  /** Checked before each chunk: an abort stops the write and removes the partial file. */
  signal?: AbortSignal;
}

/** A sequential file writer with two alternating buffers (fill one while the other is written). */
class ChunkedFile {
  private readonly bufs: Uint8Array[];
  private cur = 0;
  pos = 0;
  private pending: Promise<void> | null = null;
  written = 0;

  constructor(
    private readonly fh: fsp.FileHandle,
    readonly chunk: number,
    private readonly onBytes?: (n: number) => void,
  ) {
    this.bufs = [new Uint8Array(chunk), new Uint8Array(chunk)];
  }

  get buf(): Uint8Array {
    return this.bufs[this.cur]!;
  }

  get space(): number {
    return this.chunk - this.pos;
  }

  async flush(): Promise<void> {
    if (this.pos === 0) return;
    const data = this.bufs[this.cur]!.subarray(0, this.pos);
    if (this.pending) await this.pending;
    this.pending = this.writeAll(data);
    this.cur ^= 1;
    this.pos = 0;
  }

  private async writeAll(data: Uint8Array): Promise<void> {
    let done = 0;
    while (done < data.length) {
      const { bytesWritten } = await this.fh.write(data, done, data.length - done);
      if (bytesWritten <= 0) throw new Error('short write');
      done += bytesWritten;
    }
    this.written += data.length;
    this.onBytes?.(this.written);
  }

  async finish(): Promise<void> {
    await this.flush();
    if (this.pending) await this.pending;
    this.pending = null;
  }

  /** Await the in-flight write (if any) so an error surfaces, without writing more. */
  async settle(): Promise<void> {
    if (this.pending) await this.pending.catch(() => {});
  }
}

/**
 * Write one safetensors file. Tensor data is produced in order; at most two chunks of
 * `chunkBytes` are held. The result appears at `file` only when complete.
 */
export async function writeSafetensors(file: string, tensors: readonly TensorToWrite[], opts: WriteOptions = {}): Promise<{ bytes: number; offsets: number[] }> {
  const chunk = opts.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  if (!Number.isInteger(chunk) || chunk < 64 || chunk % 64 !== 0 || chunk > MAX_CHUNK_BYTES) {
    throw new Error(`safetensors writer: chunkBytes ${chunk} must be a multiple of 64 in 64 .. ${MAX_CHUNK_BYTES}`);
  }
  const layout = safetensorsLayout(tensors);
  const tmp = `${file}.tmp`;
  const fh = await fsp.open(tmp, 'w');
  const out = new ChunkedFile(fh, Math.min(chunk, roundUp64(Math.max(layout.fileBytes, 64))), opts.onBytes);
  let ok = false;
  try {
    await copyIn(out, layout.header);
    for (const t of tensors) {
      opts.signal?.throwIfAborted();
      const n = tensorNbytes(t);
      const sources = Number(t.fill !== undefined) + Number(t.chunks !== undefined) + Number(t.data !== undefined);
      if (sources !== 1) throw new Error(`safetensors writer: tensor ${t.name} needs exactly one of fill, chunks, data`);
      if (t.data) {
        if (t.data.length !== n) throw new Error(`safetensors writer: tensor ${t.name}: data has ${t.data.length} bytes, shape needs ${n}`);
        await copyIn(out, t.data);
      } else if (t.chunks) {
        let got = 0;
        for (const c of t.chunks()) {
          got += c.length;
          if (got > n) break;
          await copyIn(out, c);
        }
        if (got !== n) throw new Error(`safetensors writer: tensor ${t.name}: chunks gave ${got} bytes, shape needs ${n}`);
      } else {
        let off = 0;
        while (off < n) {
          let take = Math.min(n - off, out.space);
          if (take < n - off) take -= take % 64; // every piece but the last: a multiple of 64
          if (take === 0) {
            opts.signal?.throwIfAborted();
            await out.flush();
            continue;
          }
          t.fill!(out.buf.subarray(out.pos, out.pos + take), off);
          out.pos += take;
          off += take;
          if (out.space === 0) await out.flush();
        }
      }
    }
    await out.finish();
    if (out.written !== layout.fileBytes) throw new Error(`safetensors writer: wrote ${out.written} bytes, expected ${layout.fileBytes}`);
    await fh.close();
    await fsp.rename(tmp, file);
    ok = true;
  } finally {
    if (!ok) {
      await out.settle();
      await fh.close().catch(() => {});
      await fsp.rm(tmp, { force: true }).catch(() => {});
    }
  }
  return { bytes: layout.fileBytes, offsets: layout.offsets };
}

async function copyIn(out: ChunkedFile, src: Uint8Array): Promise<void> {
  let i = 0;
  while (i < src.length) {
    const take = Math.min(src.length - i, out.space);
    out.buf.set(src.subarray(i, i + take), out.pos);
    out.pos += take;
    i += take;
    if (out.space === 0) await out.flush();
  }
}

function roundUp64(n: number): number {
  return Math.ceil(n / 64) * 64;
}

/** `model.safetensors.index.json`: total_size = tensor data bytes, weight_map in tensor order. */
export function indexJson(totalSize: number, weightMap: Record<string, string> | Map<string, string>): string {
  const wm = weightMap instanceof Map ? Object.fromEntries(weightMap) : weightMap;
  return JSON.stringify({ metadata: { total_size: totalSize }, weight_map: wm }, null, 2) + '\n';
}

export async function writeIndex(dir: string, totalSize: number, weightMap: Record<string, string> | Map<string, string>): Promise<void> {
  await writeFileAtomic(path.join(dir, 'model.safetensors.index.json'), indexJson(totalSize, weightMap));
}

/** Write a small file via `<file>.tmp` + rename. */
export async function writeFileAtomic(file: string, data: string | Uint8Array): Promise<void> {
  const tmp = `${file}.tmp`;
  try {
    await fsp.writeFile(tmp, data);
    await fsp.rename(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}
