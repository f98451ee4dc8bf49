// A ByteReader that checks the bytes it hands out against known sha256 digests: the records of
// a packed directory (packed.json) and the per-tensor checksums `k3 verify` records (a sidecar,
// checksums.ts). A read that touches a range for the first time streams the whole range through
// sha256 in bounded chunks, copying the requested bytes out of what was hashed, so the bytes used
// are the bytes checked. When that first read is only part of the range (a record read tensor by
// tensor, an embedding row, a piece of a split matrix), the check also keeps a 128-bit digest of
// every 64 KiB block, and each other part is checked block by block the first time it is read
// (its own read is what is computed on: a second, unchecked read would let a flip through). With
// `every` (k3 run --verify-reads) every later read is hashed too, against 1 MiB blocks (the
// partial blocks at its edges read aside), so its cost is one sha256 pass over about the bytes
// it reads.
// A mismatch is a ReadError with exit code 4 naming the file, the record or tensor, and the
// offset: the run stops before a token is computed from those bytes.

import { createHash } from 'node:crypto';
import { ReadError } from '../util/errors.js';
import { allSettledOrThrow } from '../util/settle.js';

/** Positioned reads (store.ts's ByteReader, spelled here so the store can import this file). */
export interface ByteReader {
  read(file: string, offset: number, into: Uint8Array): Promise<void>;
  close(): void;
}

/** A byte range with a known digest: a packed record or one tensor of a checkpoint. */
export interface CheckedRange {
  /** What the range is, for the error: "record layer.3", or "tensor <name>". */
  what: string;
  file: string;
  offset: number;
  length: number;
  sha256: string;
}

export type VerifyMode = 'first' | 'every';

/** Bytes hashed per step when a whole range is checked. */
const CHUNK = 4 * 2 ** 20;
/** Checks of ranges read in part that run at once, each through a CHUNK buffer of its own: a
 *  fixed set, reused, so the memory plan can count it (store/plan.ts PlanEnv.verified); more wait. */
export const VERIFY_BUFFERS = 2;
/** Bytes of the buffers a VerifiedReader may hold at once. */
export const VERIFY_BUFFER_BYTES = VERIFY_BUFFERS * CHUNK;

export interface VerifyStats {
  /** Ranges checked whole, and their bytes. */
  rangesChecked: number;
  bytesChecked: number;
  /** Later reads hashed (every mode), and their bytes. */
  readsHashed: number;
  bytesHashed: number;
  /** Milliseconds spent in sha256 (on the reading thread). */
  hashMs: number;
}

/** Every-read mode checks reads block by block against digests taken when the range was first checked. */
const BLOCK_EVERY = 1 << 20;
/** First-read mode checks the first read of each other part of a range read in parts, in smaller
 *  blocks (an embedding row costs a 64 KiB read aside, not 1 MiB). */
const BLOCK_FIRST = 1 << 16;
/** Bytes kept of each block's sha256 (128 bits: 16 bytes per MiB, 25 MB for K3's 1.56 TB). */
const BLOCK_DIGEST = 16;

/** What the first check of a range left: block digests (null: none needed) and, in first mode, the reads already checked. */
interface Checked {
  blocks: Buffer | null;
  block: number;
  /** First mode: `${offset}:${length}` of every read handed out checked (a repeat is not checked again). */
  handed: Set<string>;
}

export class VerifiedReader implements ByteReader {
  readonly stats: VerifyStats = { rangesChecked: 0, bytesChecked: 0, readsHashed: 0, bytesHashed: 0, hashMs: 0 };
  private readonly byFile = new Map<string, CheckedRange[]>();
  /** The first whole check of each range, and what it left. */
  private readonly checked = new Map<CheckedRange, Promise<Checked>>();
  /** The CHUNK buffers not in use, made on first need in a page-aligned WebAssembly memory (so
   *  O_DIRECT reads land in them in place), and the checks waiting for one. */
  private spare: Uint8Array[] | null = null;
  private readonly waiting: (() => void)[] = [];

  constructor(
    private readonly inner: ByteReader,
    ranges: CheckedRange[],
    readonly mode: VerifyMode = 'first',
  ) {
    for (const r of ranges) {
      let list = this.byFile.get(r.file);
      if (!list) this.byFile.set(r.file, (list = []));
      list.push(r);
    }
    for (const list of this.byFile.values()) list.sort((a, b) => a.offset - b.offset);
  }

  /** The ranges of `file` overlapping [offset, offset + len), in order. */
  private overlapping(file: string, offset: number, len: number): CheckedRange[] {
    const list = this.byFile.get(file);
    if (!list) return [];
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]!.offset + list[mid]!.length <= offset) lo = mid + 1;
      else hi = mid;
    }
    const out: CheckedRange[] = [];
    for (let i = lo; i < list.length && list[i]!.offset < offset + len; i++) out.push(list[i]!);
    return out;
  }

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    const len = into.byteLength;
    const ranges = this.overlapping(file, offset, len);
    if (ranges.length === 0) return this.inner.read(file, offset, into);
    for (const r of ranges) {
      const s = Math.max(offset, r.offset);
      const e = Math.min(offset + len, r.offset + r.length);
      const part = into.subarray(s - offset, e - offset);
      let first = this.checked.get(r);
      if (!first) {
        // The first read of a range hashes all of it and fills its part from the hashed bytes.
        first = this.checkRange(r, s, part);
        this.checked.set(r, first);
        await first;
        continue;
      }
      const c = await first;
      const key = `${s}:${part.byteLength}`;
      if (c.blocks && (this.mode === 'every' || !c.handed.has(key))) {
        await this.readBlocks(r, c, s, part);
        if (this.mode === 'first') c.handed.add(key);
      } else await this.inner.read(file, s, part);
    }
    await this.fillGaps(ranges, file, offset, into);
  }

  /** Parts of [offset, offset + len) outside every range (alignment padding): plain reads. */
  private async fillGaps(ranges: CheckedRange[], file: string, offset: number, into: Uint8Array): Promise<void> {
    let at = offset;
    const end = offset + into.byteLength;
    for (const r of ranges) {
      if (r.offset > at) await this.inner.read(file, at, into.subarray(at - offset, r.offset - offset));
      at = Math.max(at, r.offset + r.length);
    }
    if (at < end) await this.inner.read(file, at, into.subarray(at - offset));
  }

  private hash(data: Uint8Array, h: ReturnType<typeof createHash>): void {
    const t0 = performance.now();
    h.update(data);
    this.stats.hashMs += performance.now() - t0;
  }

  /** Hash all of `r` (in bounded chunks), copying [s, s + part.length) into `part`; its block digests when later reads need them. */
  private async checkRange(r: CheckedRange, s: number, part: Uint8Array): Promise<Checked> {
    const whole = createHash('sha256');
    // A read of the whole range (an expert record, a small tensor) is hashed where it lands;
    // otherwise the range streams through a bounded buffer.
    const inPlace = s === r.offset && part.byteLength === r.length;
    const blockSize = this.mode === 'every' ? BLOCK_EVERY : BLOCK_FIRST;
    const blocks = this.mode === 'every' || !inPlace ? Buffer.alloc(Math.ceil(r.length / blockSize) * BLOCK_DIGEST) : null;
    const held = inPlace ? null : await this.takeBuffer();
    try {
      const buf = held ? held.subarray(0, Math.min(CHUNK, r.length)) : part;
      for (let at = 0; at < r.length; at += buf.byteLength) {
        const n = Math.min(buf.byteLength, r.length - at);
        const chunk = inPlace ? part.subarray(at, at + n) : buf.subarray(0, n);
        await this.inner.read(r.file, r.offset + at, chunk);
        this.hash(chunk, whole);
        if (blocks) {
          for (let b = 0; b < n; b += blockSize) {
            const h = createHash('sha256');
            this.hash(chunk.subarray(b, Math.min(n, b + blockSize)), h);
            h.digest().copy(blocks, ((at + b) / blockSize) * BLOCK_DIGEST, 0, BLOCK_DIGEST);
          }
        }
        const lo = Math.max(s, r.offset + at);
        const hi = Math.min(s + part.byteLength, r.offset + at + n);
        if (!inPlace && lo < hi) part.set(chunk.subarray(lo - (r.offset + at), hi - (r.offset + at)), lo - s);
      }
    } finally {
      if (held) this.giveBuffer(held);
    }
    const got = whole.digest('hex');
    this.stats.rangesChecked++;
    this.stats.bytesChecked += r.length;
    if (got !== r.sha256) throw this.mismatch(r, s, part.byteLength, `sha256 ${got.slice(0, 16)}…, expected ${r.sha256.slice(0, 16)}…`);
    return { blocks, block: blockSize, handed: new Set([`${s}:${part.byteLength}`]) };
  }

  private async takeBuffer(): Promise<Uint8Array> {
    if (!this.spare) {
      const mem = new WebAssembly.Memory({ initial: Math.ceil(VERIFY_BUFFER_BYTES / 65536) });
      this.spare = Array.from({ length: VERIFY_BUFFERS }, (_, i) => new Uint8Array(mem.buffer, i * CHUNK, CHUNK));
    }
    while (this.spare.length === 0) await new Promise<void>((resolve) => this.waiting.push(resolve));
    return this.spare.pop()!;
  }

  private giveBuffer(b: Uint8Array): void {
    this.spare!.push(b);
    this.waiting.shift()?.();
  }

  /** Read [s, s + part.length) of `r` and check the blocks it touches (edges read aside). */
  private async readBlocks(r: CheckedRange, c: Checked, s: number, part: Uint8Array): Promise<void> {
    const blocks = c.blocks!;
    const blockSize = c.block;
    const e = s + part.byteLength;
    const b0 = Math.floor((s - r.offset) / blockSize);
    const b1 = Math.ceil((e - r.offset) / blockSize);
    const lo = r.offset + b0 * blockSize;
    const hi = Math.min(r.offset + r.length, r.offset + b1 * blockSize);
    const head = new Uint8Array(s - lo);
    const tail = new Uint8Array(hi - e);
    await allSettledOrThrow([this.inner.read(r.file, s, part), head.length ? this.inner.read(r.file, lo, head) : null, tail.length ? this.inner.read(r.file, e, tail) : null]);
    // The bytes of absolute [a, b) from head, part and tail.
    const slices = (a: number, b: number): Uint8Array[] => {
      const out: Uint8Array[] = [];
      if (a < s) out.push(head.subarray(a - lo, Math.min(b, s) - lo));
      if (b > s && a < e) out.push(part.subarray(Math.max(a, s) - s, Math.min(b, e) - s));
      if (b > e) out.push(tail.subarray(Math.max(a, e) - e, b - e));
      return out;
    };
    for (let b = b0; b < b1; b++) {
      const a = r.offset + b * blockSize;
      const h = createHash('sha256');
      for (const x of slices(a, Math.min(a + blockSize, hi))) this.hash(x, h);
      if (!h.digest().subarray(0, BLOCK_DIGEST).equals(blocks.subarray(b * BLOCK_DIGEST, (b + 1) * BLOCK_DIGEST))) {
        throw this.mismatch(r, s, part.byteLength, `block at offset ${a} changed since it was first checked`);
      }
    }
    this.stats.readsHashed++;
    this.stats.bytesHashed += hi - lo;
  }

  private mismatch(r: CheckedRange, offset: number, len: number, why: string): ReadError {
    return new ReadError(`${r.file}: ${r.what} (bytes ${r.offset}..${r.offset + r.length}) fails its checksum (read of ${len} bytes at offset ${offset}: ${why}); the file is damaged or was changed — stopping rather than computing from bad bytes`, 4);
  }

  close(): void {
    this.inner.close();
  }
}
