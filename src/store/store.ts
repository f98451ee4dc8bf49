// Where weights live. The model asks for a tensor by name and gets a view; it cannot tell whether
// the bytes were resident, read just now, or cached. This first store keeps everything it has read
// (the "all resident" budget); the budgeted streaming store plugs in behind the same interface.

import * as fs from 'node:fs';
import { indexCheckpointDir, type TensorEntry } from '../checkpoint/safetensors.js';
import { resolveLinear } from '../checkpoint/linear.js';
import { bf16ToF32, f16ToF32 } from '../checkpoint/dtypes.js';
import type { WeightView } from '../kernels/types.js';
import { ReadError, UserError } from '../util/errors.js';

/** Positioned reads of byte ranges. A test double can inject faults. */
export interface ByteReader {
  read(file: string, offset: number, length: number): Promise<Uint8Array>;
  close(): void;
}

const MAX_READ = 1 << 30; // one fs.read moves at most 2 GiB in Node 20; stay well below

export class FsReader implements ByteReader {
  private readonly fds = new Map<string, number>();
  bytesRead = 0;

  private fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = fs.openSync(file, 'r');
      } catch (e) {
        throw new ReadError(`${file}: cannot open (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }

  async read(file: string, offset: number, length: number): Promise<Uint8Array> {
    const fd = this.fd(file);
    const buf = new Uint8Array(length);
    let done = 0;
    while (done < length) {
      const want = Math.min(MAX_READ, length - done);
      let got: number;
      try {
        got = fs.readSync(fd, buf, done, want, offset + done);
      } catch (e) {
        throw new ReadError(`${file}: read of ${want} bytes at offset ${offset + done} failed (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
      }
      if (got === 0) throw new ReadError(`${file}: short read at offset ${offset + done}: ${done} of ${length} bytes (file truncated?)`);
      done += got;
    }
    this.bytesRead += length;
    return buf;
  }

  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    this.fds.clear();
  }
}

export class WeightStore {
  private readonly linears = new Map<string, WeightView>();
  private readonly vectors = new Map<string, Float32Array>();

  constructor(
    readonly entries: Map<string, TensorEntry>,
    readonly reader: ByteReader,
  ) {}

  static open(dir: string, reader: ByteReader = new FsReader()): WeightStore {
    return new WeightStore(indexCheckpointDir(dir), reader);
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  entry(name: string): TensorEntry {
    const e = this.entries.get(name);
    if (!e) throw new UserError(`missing tensor ${name} in the checkpoint`);
    return e;
  }

  private async bytes(e: TensorEntry): Promise<Uint8Array> {
    return this.reader.read(e.file, e.offset, e.nbytes);
  }

  /** The linear layer `<base>` in whatever format the checkpoint stores it, checked against [rows, cols]. */
  async linear(base: string, rows: number, cols: number): Promise<WeightView> {
    const hit = this.linears.get(base);
    if (hit) return hit;
    const parts = resolveLinear(this.entries, base, [rows, cols]);
    if (parts.rows !== rows || parts.cols !== cols) {
      throw new UserError(`${parts.data.file}: tensor ${parts.data.name} is [${parts.rows}, ${parts.cols}], expected [${rows}, ${cols}]`);
    }
    const view: WeightView = {
      name: base,
      format: parts.format,
      rows,
      cols,
      data: await this.bytes(parts.data),
      ...(parts.scale ? { scale: await this.bytes(parts.scale), scaleDtype: parts.scaleDtype } : {}),
    };
    this.linears.set(base, view);
    return view;
  }

  /**
   * A small tensor (norm weight, bias, A_log, conv taps) as f32 values, checked to hold `count`
   * elements (or at least `count` when `atLeast`, for K3's A_log padded to head_dim).
   */
  async vector(name: string, count: number, atLeast = false): Promise<Float32Array> {
    const hit = this.vectors.get(name);
    if (hit) return hit;
    const e = this.entry(name);
    const n = e.shape.reduce((a, b) => a * b, 1);
    if (atLeast ? n < count : n !== count) throw new UserError(`${e.file}: tensor ${name} has ${n} elements (shape ${JSON.stringify(e.shape)}), expected ${count}`);
    const b = await this.bytes(e);
    const out = new Float32Array(n);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    switch (e.dtype) {
      case 'F32':
        for (let i = 0; i < n; i++) out[i] = dv.getFloat32(i * 4, true);
        break;
      case 'BF16':
        for (let i = 0; i < n; i++) out[i] = bf16ToF32(dv.getUint16(i * 2, true));
        break;
      case 'F16':
        for (let i = 0; i < n; i++) out[i] = f16ToF32(dv.getUint16(i * 2, true));
        break;
      default:
        throw new UserError(`${e.file}: tensor ${name} has dtype ${e.dtype}, expected F32, BF16 or F16`);
    }
    this.vectors.set(name, out);
    return out;
  }

  /** Total bytes of the tensors under a name prefix (for reports). */
  bytesUnder(prefix: string): number {
    let s = 0;
    for (const [n, e] of this.entries) if (n.startsWith(prefix)) s += e.nbytes;
    return s;
  }

  close(): void {
    this.reader.close();
  }
}
