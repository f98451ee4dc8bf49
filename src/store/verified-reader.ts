// A ByteReader that checks the bytes it hands out against known sha256 digests: the records of
// a packed directory (packed.json) and the per-tensor checksums `k3 verify` records (a sidecar,
// checksums.ts). A read that touches a range for the first time streams the whole range through
// sha256 in bounded chunks, copying the requested bytes out of what was hashed, so the bytes used
// are the bytes checked. With `every` (k3 run --verify-reads) each later read is hashed too,
// against the digest of that exact (offset, length) worked out from checked bytes the first time.
// A mismatch is a ReadError with exit code 4 naming the file, the record or tensor, and the
// offset: the run stops before a token is computed from those bytes.

import { createHash } from 'node:crypto';
import { ReadError } from '../util/errors.js';

/** Positioned reads (store.ts's ByteReader, spelled here so the store can import this file). */
export interface ByteReader {
  read(file: string, offset: number, into: Uint8Array): Promise<void>;
  close(): void;
}

/** A byte range with a known digest: a packed record or one tensor of a checkpoint. */
export interface CheckedRange {
  /** "record layer.3", "tensor model.norm.weight", ... */
  what: string;
  file: string;
  offset: number;
  length: number;
  sha256: string;
}

export type VerifyMode = 'first' | 'every';

/** Bytes hashed per step when a whole range is checked (memory outside the weight budget). */
const CHUNK = 8 * 2 ** 20;

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

export class VerifiedReader implements ByteReader {
  readonly stats: VerifyStats = { rangesChecked: 0, bytesChecked: 0, readsHashed: 0, bytesHashed: 0, hashMs: 0 };
  private readonly byFile = new Map<string, CheckedRange[]>();
  private readonly checked = new Map<CheckedRange, Promise<void>>();
  /** Digest of each (file, offset, length) read so far, from checked bytes (every mode). */
  private readonly readDigest = new Map<string, string>();
  private scratch: Uint8Array | null = null;

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
    const key = `${file}\0${offset}\0${len}`;
    const known = this.mode === 'every' ? this.readDigest.get(key) : undefined;
    if (known !== undefined) {
      await this.inner.read(file, offset, into);
      const t0 = performance.now();
      const got = createHash('sha256').update(into).digest('hex');
      this.stats.hashMs += performance.now() - t0;
      this.stats.readsHashed++;
      this.stats.bytesHashed += len;
      if (got !== known) throw this.mismatch(ranges[0]!, file, offset, len, 'changed since it was first checked');
      return;
    }
    let fresh = false;
    for (const r of ranges) {
      let p = this.checked.get(r);
      if (!p || this.mode === 'every') {
        // The first check (or, in every mode, a read not seen before) hashes the whole range and
        // fills `into` from the hashed bytes.
        p = this.checkRange(r, file, offset, into);
        if (!this.checked.has(r)) this.checked.set(r, p);
        fresh = true;
        await p;
      } else {
        await p;
        const s = Math.max(offset, r.offset);
        const e = Math.min(offset + len, r.offset + r.length);
        await this.inner.read(file, s, into.subarray(s - offset, e - offset));
      }
    }
    await this.fillGaps(ranges, file, offset, into);
    if (fresh && this.mode === 'every') this.readDigest.set(key, createHash('sha256').update(into).digest('hex'));
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

  private async checkRange(r: CheckedRange, file: string, offset: number, into: Uint8Array): Promise<void> {
    const hash = createHash('sha256');
    const buf = this.scratch && this.scratch.byteLength >= Math.min(CHUNK, r.length) ? this.scratch : new Uint8Array(Math.min(CHUNK, r.length));
    this.scratch = null; // concurrent checks each use their own buffer
    try {
      for (let at = 0; at < r.length; at += buf.byteLength) {
        const n = Math.min(buf.byteLength, r.length - at);
        const part = buf.subarray(0, n);
        await this.inner.read(file, r.offset + at, part);
        const t0 = performance.now();
        hash.update(part);
        this.stats.hashMs += performance.now() - t0;
        // Copy the part of this chunk that the caller asked for.
        const s = Math.max(offset, r.offset + at);
        const e = Math.min(offset + into.byteLength, r.offset + at + n);
        if (s < e) into.set(part.subarray(s - (r.offset + at), e - (r.offset + at)), s - offset);
      }
    } finally {
      this.scratch = buf;
    }
    const got = hash.digest('hex');
    this.stats.rangesChecked++;
    this.stats.bytesChecked += r.length;
    if (got !== r.sha256) throw this.mismatch(r, file, offset, into.byteLength, `sha256 ${got.slice(0, 16)}…, expected ${r.sha256.slice(0, 16)}…`);
  }

  private mismatch(r: CheckedRange, file: string, offset: number, len: number, why: string): ReadError {
    return new ReadError(`${file}: ${r.what} (bytes ${r.offset}..${r.offset + r.length}) fails its checksum (read of ${len} bytes at offset ${offset}: ${why}); the file is damaged or was changed — stopping rather than computing from bad bytes`, 4);
  }

  close(): void {
    this.inner.close();
  }
}
