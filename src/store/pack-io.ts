// Streaming copy and hash with bounded memory, for writing a pack (pack.ts) and verifying one
// (pack-verify.ts): three buffers in flight, positioned reads and writes, sha256 per record.

import { createHash, type Hash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { PACK_ALIGN, errCode, type SourceShard } from '../checkpoint/packed.js';
import { ReadError } from '../util/errors.js';

/** Bytes per read / write; three such buffers are in flight at most. */
export const DEFAULT_CHUNK = 16 * 2 ** 20;

export function sha256(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

export interface Chunk {
  src: string;
  srcOff: number;
  /** Destination file index and offset; -1 for hash only. */
  dstFile: number;
  dstOff: number;
  len: number;
  /** Zeros to hash before these bytes (alignment padding inside a record). */
  zerosBefore: number;
  hash: Hash;
  /** Set on the last chunk of a record: called with the record's digest. */
  done?: (hex: string) => void;
}

class Files {
  private readonly fds = new Map<string, number>();
  constructor(private readonly flags: string) {}
  fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = fs.openSync(file, this.flags);
      } catch (e) {
        throw new ReadError(`${file}: cannot open (${errCode(e)})`);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }
  close(sync = false): void {
    for (const [file, fd] of this.fds) {
      try {
        if (sync) fs.fsyncSync(fd);
      } catch (e) {
        throw new ReadError(`${file}: fsync failed (${errCode(e)})`);
      } finally {
        fs.closeSync(fd);
      }
    }
    this.fds.clear();
  }
}

/** Read or write all `len` bytes of buf at file position `pos`, however many calls that takes. */
function moveFull(kind: 'read' | 'write', fd: number, file: string, buf: Uint8Array, len: number, pos: number): Promise<void> {
  const op = (kind === 'read' ? fs.read : fs.write) as (fd: number, b: Uint8Array, off: number, n: number, at: number, cb: (err: NodeJS.ErrnoException | null, n: number) => void) => void;
  return new Promise((resolve, reject) => {
    let done = 0;
    const step = () => {
      op(fd, buf, done, len - done, pos + done, (err, n) => {
        if (err) return reject(new ReadError(`${file}: ${kind} of ${len - done} bytes at offset ${pos + done} failed (${err.code ?? err.message})`));
        if (n === 0 && kind === 'read') return reject(new ReadError(`${file}: short read at offset ${pos + done}: got ${done} of ${len} bytes (file truncated?)`));
        done += n;
        if (done < len) step();
        else resolve();
      });
    };
    if (len === 0) resolve();
    else step();
  });
}

const readFull = (fd: number, file: string, buf: Uint8Array, len: number, pos: number) => moveFull('read', fd, file, buf, len, pos);
const writeFull = (fd: number, file: string, buf: Uint8Array, len: number, pos: number) => moveFull('write', fd, file, buf, len, pos);

const ZEROS = new Uint8Array(PACK_ALIGN);

function hashZeros(h: Hash, n: number): void {
  while (n > 0) {
    const k = Math.min(n, ZEROS.length);
    h.update(ZEROS.subarray(0, k));
    n -= k;
  }
}

/**
 * Read every chunk, hash it, and write it (when it has a destination). Three buffers: the read of
 * chunk i+1 and the write of chunk i-1 run while chunk i is hashed. `onRead` sees each chunk's
 * bytes as read (the source's sidecar check, source-check.ts).
 */
export async function streamChunks(chunks: Chunk[], chunkBytes: number, dstPaths: string[], onBytes: (n: number) => void, onRead?: (file: string, offset: number, bytes: Uint8Array) => void): Promise<void> {
  if (chunks.length === 0) return;
  const src = new Files('r');
  const dst = new Files('r+');
  const maxLen = Math.max(...chunks.map((c) => c.len));
  const bufs = [0, 1, 2].map(() => Buffer.allocUnsafe(Math.min(chunkBytes, Math.max(1, maxLen))));
  const writes: (Promise<void> | null)[] = [null, null, null];
  const startRead = (i: number) => {
    const c = chunks[i]!;
    return readFull(src.fd(c.src), c.src, bufs[i % 3]!, c.len, c.srcOff);
  };
  let ok = false;
  let reading: Promise<void> | null = null;
  try {
    reading = startRead(0);
    for (let i = 0; i < chunks.length; i++) {
      await reading;
      const c = chunks[i]!;
      if (i + 1 < chunks.length) {
        const w = writes[(i + 1) % 3];
        if (w) await w;
        writes[(i + 1) % 3] = null;
        reading = startRead(i + 1);
        reading.catch(() => {}); // surfaced when awaited
      }
      const buf = bufs[i % 3]!;
      onRead?.(c.src, c.srcOff, buf.subarray(0, c.len));
      hashZeros(c.hash, c.zerosBefore);
      c.hash.update(buf.subarray(0, c.len));
      if (c.done) c.done(c.hash.digest('hex'));
      if (c.dstFile >= 0) {
        const p = dstPaths[c.dstFile]!;
        const w = writeFull(dst.fd(p), p, buf, c.len, c.dstOff);
        w.catch(() => {});
        writes[i % 3] = w;
      }
      onBytes(c.zerosBefore + c.len);
    }
    for (const w of writes) if (w) await w;
    ok = true;
  } finally {
    // Settle any read or write still in flight before closing its file.
    await Promise.allSettled([reading, ...writes].filter((w): w is Promise<void> => w !== null));
    src.close();
    dst.close(ok);
  }
}

/** Split a copy of [srcOff, srcOff+len) to dstOff into chunks of at most chunkBytes. */
export function pushChunks(out: Chunk[], src: string, srcOff: number, dstFile: number, dstOff: number, len: number, zerosBefore: number, hash: Hash, chunkBytes: number): void {
  let first = true;
  for (let o = 0; o < len || (first && len === 0); o += chunkBytes) {
    out.push({ src, srcOff: srcOff + o, dstFile, dstOff: dstOff + o, len: Math.min(chunkBytes, len - o), zerosBefore: first ? zerosBefore : 0, hash });
    first = false;
  }
}

export function shardIdentity(files: string[]): SourceShard[] {
  return files.map((f) => {
    const fd = fs.openSync(f, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const lb = Buffer.alloc(8);
      fs.readSync(fd, lb, 0, 8, 0);
      const n = Math.min(Number(lb.readBigUInt64LE(0)), size - 8);
      const hb = Buffer.alloc(n);
      fs.readSync(fd, hb, 0, n, 8);
      return { file: path.basename(f), size, header_sha256: sha256(hb) };
    } finally {
      fs.closeSync(fd);
    }
  });
}

export function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
