// What the DSpark drafter's forward on the kernels (model/dspark.ts) reads: its own tensors, BF16
// as shipped, each matrix a WeightView in the model's kernel memory when the kernels can take it
// (else plain memory: Compute runs the reference kernels there, the same bytes), its vectors as
// f32; and K3's embedding rows and lm_head, shared with the target (the drafter's redundant copy
// of the embedding is never read). Every read here is synchronous (a drafter drafts between two
// sweeps, synchronously): the lm_head is the store's resident view when the plan pins it, and is
// otherwise read again from the checkpoint in row blocks, counted in `bytesRead`.

import * as fs from 'node:fs';
import type { DrafterConfig } from '../checkpoint/drafter-types.js';
import { drafterTensorSpecs } from '../checkpoint/drafter-tensors.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import { bf16ToF32, f16ToF32 } from '../formats/dtypes.js';
import type { WeightView } from '../formats/weight.js';
import type { Compute, KernelGroup } from '../graph/compute.js';
import type { Mat } from '../store/mat.js';
import { UserError } from '../util/errors.js';

/** The row block the lm_head is read in when the target's plan does not hold it (bytes). */
const HEAD_BLOCK_BYTES = 4 << 20;

function readBytes(e: TensorEntry, into: Uint8Array, offset = 0, length = e.nbytes): void {
  const fd = fs.openSync(e.file, 'r');
  try {
    let done = 0;
    while (done < length) {
      const n = fs.readSync(fd, into, done, length - done, e.offset + offset + done);
      if (n <= 0) throw new UserError(`${e.file}: ${e.name} ends early (read ${done} of ${length} bytes)`);
      done += n;
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** Row `r` of a plain BF16 / F16 / F32 table entry [rows, cols] into out (f32). */
function decodeRows(e: TensorEntry, bytes: Uint8Array, n: number, out: Float32Array): void {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (e.dtype === 'F32') for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
  else if (e.dtype === 'F16') for (let i = 0; i < n; i++) out[i] = f16ToF32(dv.getUint16(2 * i, true));
  else for (let i = 0; i < n; i++) out[i] = bf16ToF32(dv.getUint16(2 * i, true));
}

function plainTable(e: TensorEntry | undefined, what: string): TensorEntry {
  if (!e) throw new UserError(`--drafter: the target has no ${what} to share`);
  if (e.coded || (e.dtype !== 'BF16' && e.dtype !== 'F32' && e.dtype !== 'F16')) {
    throw new UserError(`--drafter: the target's ${e.name} is ${e.coded ? 'coded (k3 pack --compress)' : e.dtype}; the drafter reads K3's ${what} rows as plain BF16, F16 or F32 only`);
  }
  return e;
}

/** Narrowest matrix placed in kernel memory: the WebAssembly matmul returns zeros for bf16 rows
 *  under 16 columns (a synthesized drafter's Markov rank of 8), so those stay with the reference. */
const MIN_KERNEL_COLS = 16;

/** Where the drafter's matrices go: the kernels' memory when their width suits the kernels (else plain memory, the reference kernels). */
export function weightAlloc(group: KernelGroup | null): (bytes: number, cols: number) => Uint8Array {
  return (bytes, cols) => (group && cols >= MIN_KERNEL_COLS && cols <= group.members[0]!.maxCols ? group.alloc(bytes) : new Uint8Array(bytes));
}

/** The drafter's own tensors, loaded once per model (DSparkWeights.load). */
export class DSparkWeights {
  private readonly mats = new Map<string, WeightView>();
  private readonly vecs = new Map<string, Float32Array>();
  /** Tables read by row (markov_w1, the drafter's own embedding), BF16 as shipped. */
  private readonly tables = new Map<string, { data: Uint8Array; cols: number }>();
  /** Bytes held: every tensor the forward reads. */
  bytes = 0;

  private constructor(readonly cfg: DrafterConfig) {}

  static load(cfg: DrafterConfig, entries: Map<string, TensorEntry>, alloc: (bytes: number, cols: number) => Uint8Array): DSparkWeights {
    const w = new DSparkWeights(cfg);
    for (const s of drafterTensorSpecs(cfg)) {
      if (s.use === 'never_read') continue;
      const e = entries.get(s.name)!;
      const cols = s.shape[s.shape.length - 1]!;
      const rows = s.shape.length === 2 ? s.shape[0]! : 1;
      w.bytes += e.nbytes;
      if (s.name === 'markov_head.markov_w1.weight' || s.name === 'embed_tokens.weight') {
        const data = new Uint8Array(e.nbytes);
        readBytes(e, data);
        w.tables.set(s.name, { data, cols });
      } else if (s.shape.length === 2 && rows > 1) {
        const data = alloc(e.nbytes, cols);
        readBytes(e, data);
        w.mats.set(s.name, { name: `drafter ${s.name}`, format: 'bf16', rows, cols, data });
      } else {
        const data = new Uint8Array(e.nbytes);
        readBytes(e, data);
        const v = new Float32Array(rows * cols);
        decodeRows(e, data, v.length, v);
        w.vecs.set(s.name, v);
      }
    }
    return w;
  }

  mat(name: string): WeightView {
    const m = this.mats.get(name);
    if (!m) throw new Error(`dspark: no matrix ${name}`);
    return m;
  }

  vec(name: string): Float32Array {
    const v = this.vecs.get(name);
    if (!v) throw new Error(`dspark: no vector ${name}`);
    return v;
  }

  /** Row `r` of a by-row table (markov_w1, embed_tokens) as f32. */
  row(name: string, r: number, out: Float32Array): Float32Array {
    const t = this.tables.get(name)!;
    const b = r * t.cols * 2;
    for (let i = 0; i < t.cols; i++) out[i] = bf16ToF32(t.data[b + 2 * i]! | (t.data[b + 2 * i + 1]! << 8));
    return out;
  }
}

/** K3's side of the drafter: its embedding rows and its lm_head's logits (or the drafter's own when it ships them). */
export class DSparkTarget {
  /** Bytes the drafter read from the target's files (embedding rows, lm_head blocks not held by the plan). */
  bytesRead = 0;
  private readonly embedEntry: TensorEntry | null;
  private readonly headEntry: TensorEntry | null;
  private headBuf: Uint8Array | null = null;
  private readonly maskRow: Float32Array;

  constructor(
    private readonly w: DSparkWeights,
    private readonly compute: Compute,
    entries: Map<string, TensorEntry>,
    names: { embed: string; lmHead: string },
    private readonly headMat: Mat | null,
    private readonly alloc: (bytes: number, cols: number) => Uint8Array,
  ) {
    const c = w.cfg;
    this.embedEntry = c.embedding === 'target' ? plainTable(entries.get(`${names.embed}.weight`), 'embedding') : null;
    // checked when first read: a coded lm_head (k3 pack --compress) is fine while the plan holds it
    this.headEntry = c.lmHead === 'target' ? (entries.get(`${names.lmHead}.weight`) ?? plainTable(undefined, 'lm_head')) : null;
    this.maskRow = this.embedRow(c.maskTokenId, new Float32Array(c.hiddenSize));
  }

  /** The input embedding of `id` into out [H]. */
  embedRow(id: number, out: Float32Array): Float32Array {
    const c = this.w.cfg;
    if (id === c.maskTokenId && this.maskRow) {
      out.set(this.maskRow);
      return out;
    }
    if (!this.embedEntry) return this.w.row('embed_tokens.weight', id, out);
    const e = this.embedEntry;
    const rowBytes = e.nbytes / e.shape[0]!;
    const buf = new Uint8Array(rowBytes);
    readBytes(e, buf, id * rowBytes, rowBytes);
    this.bytesRead += rowBytes;
    decodeRows(e, buf, c.hiddenSize, out);
    return out;
  }

  /** Logits [T, V] of T final hidden states h [T, H]. */
  logits(h: Float32Array, T: number): Float32Array {
    const c = this.w.cfg;
    const V = c.draftVocabSize;
    const y = new Float32Array(T * V);
    if (!this.headEntry) {
      this.compute.matmul(this.w.mat('lm_head.weight'), h, T, y);
      return y;
    }
    const l = this.headMat?.lease();
    const parts = l?.kind === 'resident' ? [{ view: l.view, r0: 0 }] : l?.kind === 'blocks' ? l.blocks : null;
    if (parts) for (const { view, r0 } of parts) this.product(view, h, T, y, r0);
    else this.readHead(h, T, y);
    return y;
  }

  /** The lm_head read from the checkpoint in row blocks (the plan streams it). */
  private readHead(h: Float32Array, T: number, y: Float32Array): void {
    const e = plainTable(this.headEntry!, 'lm_head');
    const [rows, cols] = [e.shape[0]!, e.shape[1]!];
    const rowBytes = e.nbytes / rows;
    const block = Math.max(1, Math.min(rows, Math.floor(HEAD_BLOCK_BYTES / rowBytes)));
    this.headBuf ??= this.alloc(block * rowBytes, cols);
    const format = e.dtype === 'F32' ? 'f32' : e.dtype === 'F16' ? 'f16' : 'bf16';
    for (let r0 = 0; r0 < rows; r0 += block) {
      const n = Math.min(block, rows - r0);
      const data = this.headBuf.subarray(0, n * rowBytes);
      readBytes(e, data, r0 * rowBytes, n * rowBytes);
      this.bytesRead += n * rowBytes;
      this.product({ name: 'drafter: lm_head block', format, rows: n, cols, data }, h, T, y, r0);
    }
  }

  /** y[:, r0 .. r0 + view.rows) = view · h. */
  private product(view: WeightView, h: Float32Array, T: number, y: Float32Array, r0: number): void {
    const V = y.length / T;
    if (T === 1 && r0 === 0 && view.rows === V) return this.compute.matmul(view, h, 1, y);
    const part = new Float32Array(T * view.rows);
    this.compute.matmul(view, h, T, part);
    for (let t = 0; t < T; t++) y.set(part.subarray(t * view.rows, (t + 1) * view.rows), t * V + r0);
  }
}
