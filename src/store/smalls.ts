// Small tensors (norms, biases, A_log, conv taps), resident once read, and embedding rows, read
// on demand or from the table when the plan keeps it: both decoded through formats/decode.ts.

import type { WeightFormat } from '../formats/weight.js';
import { decodeRow } from '../formats/decode.js';
import { UserError } from '../util/errors.js';
import { allSettledOrThrow } from '../util/settle.js';
import type { StoreParts } from './parts.js';

/** The formats a small tensor may be stored in, by safetensors dtype. */
const SMALL_FORMATS: Record<string, WeightFormat> = { F32: 'f32', BF16: 'bf16', F16: 'f16' };

export class Smalls {
  private readonly held = new Map<string, Promise<Float32Array>>();
  private embedTable: Promise<Uint8Array> | null = null;

  constructor(private readonly s: StoreParts) {}

  /** See WeightStore.vector. */
  vector(name: string, count: number, atLeast: boolean): Promise<Float32Array> {
    let v = this.held.get(name);
    if (!v) {
      v = this.read(name, count, atLeast);
      this.held.set(name, v);
      // a failed read is not kept: the next use reads again
      const held = v;
      held.catch(() => this.held.get(name) === held && this.held.delete(name));
    }
    return v;
  }

  private async read(name: string, count: number, atLeast: boolean): Promise<Float32Array> {
    const e = this.s.layout.smalls.get(name);
    if (!e) throw new UserError(`missing tensor ${name} in the checkpoint`);
    const n = e.shape.reduce((a, b) => a * b, 1);
    if (atLeast ? n < count : n !== count) throw new UserError(`${e.file}: tensor ${name} has ${n} elements (shape ${JSON.stringify(e.shape)}), expected ${count}`);
    const format = SMALL_FORMATS[e.dtype];
    if (!format) throw new UserError(`${e.file}: tensor ${name} has dtype ${e.dtype}, expected F32, BF16 or F16`);
    const b = new Uint8Array(e.nbytes);
    await this.s.reads.read(e.file, e.offset, b);
    this.s.stats.smallBytesRead += e.nbytes;
    const out = new Float32Array(n);
    decodeRow({ name, format, rows: 1, cols: n, data: b }, 0, out);
    return out;
  }

  /** See WeightStore.embedRows. */
  async embedRows(ids: number[]): Promise<Float32Array> {
    const E = this.s.layout.embed;
    const D = E.cols;
    const rowBytes = E.data.nbytes / E.rows;
    const out = new Float32Array(ids.length * D);
    if (this.s.plan.embedResidentBytes > 0) {
      const view = { name: 'embed', format: E.format, rows: E.rows, cols: D, data: await this.table() };
      ids.forEach((id, i) => decodeRow(view, id, out.subarray(i * D, (i + 1) * D)));
      return out;
    }
    const bufs = ids.map(() => new Uint8Array(rowBytes));
    await allSettledOrThrow(ids.map((id, i) => this.s.reads.read(E.data.file, E.data.offset + id * rowBytes, bufs[i]!)));
    ids.forEach((_, i) => {
      decodeRow({ name: 'embed', format: E.format, rows: 1, cols: D, data: bufs[i]! }, 0, out.subarray(i * D, (i + 1) * D));
    });
    this.s.stats.embedBytesRead += ids.length * rowBytes;
    return out;
  }

  /** The whole embedding table, read once (a failed read is tried again by the next use). */
  private table(): Promise<Uint8Array> {
    if (!this.embedTable) {
      const E = this.s.layout.embed;
      const buf = new Uint8Array(E.data.nbytes);
      const table = this.s.reads.read(E.data.file, E.data.offset, buf).then(() => {
        this.s.stats.embedBytesRead += E.data.nbytes;
        return buf;
      });
      this.embedTable = table;
      table.catch(() => this.embedTable === table && (this.embedTable = null));
    }
    return this.embedTable;
  }
}
