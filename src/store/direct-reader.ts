// Direct I/O (issue 9): weights read with O_DIRECT, so the page cache neither hides the disk nor
// counts against the user's memory budget. O_DIRECT wants the memory address, the file offset and
// the length aligned (4 KiB covers every device here), and safetensors offsets are not, so each
// read goes one of two ways:
//   - in place, when the destination and the file offset are 4 KiB-aligned (kernel memory is
//     page-aligned Wasm memory and `k3 pack` aligns every piece): the aligned bulk lands where the
//     kernels use it, the unaligned tail goes through a bounce buffer;
//   - through bounce buffers otherwise: an aligned superset of the range is read, the wanted bytes
//     copied out.
// Bounce buffers live in a WebAssembly.Memory of their own, whose base V8 maps page-aligned.
// Large reads are split into CHUNK pieces with up to IN_FLIGHT of them outstanding (libuv's
// thread pool runs them in parallel), which is what reaches an NVMe's bandwidth.
// Where the filesystem refuses O_DIRECT (EINVAL on tmpfs, overlay, some network filesystems), the
// file is read buffered instead, and the reader says so once.

import * as fs from 'node:fs';
import { ReadError } from '../util/errors.js';
import { allSettledOrThrow } from '../util/settle.js';

export const ALIGN = 4096;
const CHUNK = 4 << 20;
const IN_FLIGHT = 4;
/** Bytes of a DirectReader's bounce buffers (one wasm memory, whole pages), counted by the memory plan. */
export const BOUNCE_BYTES = Math.ceil(((CHUNK + 2 * ALIGN) * IN_FLIGHT) / 65536) * 65536;
const MAX_READ = 1 << 30;

/** The reader shape of store.ts (ByteReader), restated so this file need not import the store. */
interface Reader {
  read(file: string, offset: number, into: Uint8Array): Promise<void>;
  close(): void;
}

export type IoMode = 'direct' | 'buffered' | 'auto';

export const IO_MODES: readonly IoMode[] = ['direct', 'buffered', 'auto'];

/** Whether this platform has O_DIRECT at all (Linux does; macOS and Windows do not). */
export function directSupported(): boolean {
  return typeof fs.constants.O_DIRECT === 'number' && fs.constants.O_DIRECT > 0;
}

function preadOnce(fd: number, into: Uint8Array, at: number, len: number, pos: number): Promise<number> {
  return new Promise((resolve, reject) => fs.read(fd, into, at, len, pos, (err, n) => (err ? reject(err) : resolve(n))));
}

export class DirectReader implements Reader {
  private readonly fds = new Map<string, number | 'buffered'>();
  /** Bounce buffers, CHUNK + 2 * ALIGN bytes each, taken from and returned to `free`. */
  private readonly free: Uint8Array[] = [];
  private waiting: (() => void)[] = [];
  private told = false;
  /** Reads done in place (into aligned caller memory) and through a bounce buffer; bytes of each. */
  readonly stats = { inPlaceBytes: 0, bouncedBytes: 0, bufferedFiles: 0 };
  /** Destination buffers that refused an in-place O_DIRECT read (EINVAL: address not aligned); they bounce. */
  private readonly refused = new WeakSet<ArrayBufferLike>();

  constructor(
    /** Used for files the filesystem will not open with O_DIRECT. */
    private readonly fallback: Reader,
    private readonly notice: (msg: string) => void = (m) => process.stderr.write(`k3: ${m}\n`),
  ) {
    const slot = CHUNK + 2 * ALIGN;
    const mem = new WebAssembly.Memory({ initial: BOUNCE_BYTES / 65536 });
    for (let i = 0; i < IN_FLIGHT; i++) this.free.push(new Uint8Array(mem.buffer, i * slot, slot));
  }

  /** The O_DIRECT descriptor of `file`, or 'buffered' when its filesystem refuses O_DIRECT. */
  private fd(file: string): number | 'buffered' {
    let fd = this.fds.get(file);
    if (fd !== undefined) return fd;
    try {
      fd = this.openDirect(file);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'EINVAL' && code !== 'EOPNOTSUPP') throw new ReadError(`${file}: cannot open (${code ?? String(e)})`, 4);
      this.buffered(file, `filesystem refuses O_DIRECT (${code})`);
      fd = 'buffered';
    }
    this.fds.set(file, fd);
    return fd;
  }

  /** open(2) with O_DIRECT (a test double overrides it to play a filesystem that refuses). */
  protected openDirect(file: string): number {
    return fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_DIRECT);
  }

  private buffered(file: string, why: string): void {
    this.fds.set(file, 'buffered');
    this.stats.bufferedFiles++;
    if (!this.told) {
      this.told = true;
      this.notice(`${file}: ${why}; reading it (and any such file) through the page cache`);
    }
  }

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    const fd = this.fd(file);
    if (fd === 'buffered') return this.fallback.read(file, offset, into);
    try {
      const jobs: Promise<void>[] = [];
      let lo = 0;
      if (offset % ALIGN === 0 && into.byteOffset % ALIGN === 0 && !this.refused.has(into.buffer)) {
        const bulk = into.byteLength - (into.byteLength % ALIGN);
        for (; lo < bulk; lo = Math.min(bulk, lo + CHUNK)) {
          const part = into.subarray(lo, Math.min(bulk, lo + CHUNK));
          const at = offset + lo;
          jobs.push(this.limited((slot) => this.inPlace(fd, file, at, part, slot)));
        }
      }
      for (; lo < into.byteLength; lo += CHUNK) {
        const part = into.subarray(lo, lo + Math.min(CHUNK, into.byteLength - lo));
        const at = offset + lo;
        jobs.push(this.limited((slot) => this.bounce(fd, file, at, part, slot)));
      }
      await allSettledOrThrow(jobs); // none still writing into `into` when this throws
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EINVAL') throw e;
      // Some filesystems open with O_DIRECT and refuse the read itself.
      this.buffered(file, 'read with O_DIRECT refused (EINVAL)');
      return this.fallback.read(file, offset, into);
    }
  }

  /** Run `job` with a bounce buffer reserved (which also caps the reads in flight). */
  private async limited(job: (slot: Uint8Array) => Promise<void>): Promise<void> {
    while (this.free.length === 0) await new Promise<void>((r) => this.waiting.push(r));
    const slot = this.free.pop()!;
    try {
      await job(slot);
    } finally {
      this.free.push(slot);
      this.waiting.shift()?.();
    }
  }

  /** Aligned read straight into caller memory (offset and length multiples of ALIGN). */
  private async inPlace(fd: number, file: string, offset: number, into: Uint8Array, slot: Uint8Array): Promise<void> {
    let done = 0;
    while (done < into.byteLength) {
      const want = Math.min(MAX_READ, into.byteLength - done);
      let got: number;
      try {
        got = await preadOnce(fd, into, done, want, offset + done);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EINVAL' && done === 0) {
          // This memory is not page-aligned after all (a plain ArrayBuffer): bounce for it from now on.
          this.refused.add(into.buffer);
          return this.bounce(fd, file, offset, into, slot);
        }
        throw readError(file, want, offset + done, e);
      }
      if (got === 0) throw new ReadError(`${file}: short read at offset ${offset + done}: got ${done} of ${into.byteLength} bytes (file truncated?)`, 4);
      done += got;
    }
    this.stats.inPlaceBytes += into.byteLength;
  }

  /** Read the aligned superset of [offset, offset + into.length) into `slot`, copy out the wanted bytes. */
  private async bounce(fd: number, file: string, offset: number, into: Uint8Array, slot: Uint8Array): Promise<void> {
    const a0 = offset - (offset % ALIGN);
    const end = offset + into.byteLength;
    const a1 = Math.ceil(end / ALIGN) * ALIGN;
    let got = 0;
    while (a0 + got < end) {
      let n: number;
      try {
        n = await preadOnce(fd, slot, got, a1 - a0 - got, a0 + got);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EINVAL') throw e;
        throw readError(file, into.byteLength, offset, e);
      }
      if (n === 0) throw new ReadError(`${file}: short read at offset ${a0 + got}: got ${Math.max(0, a0 + got - offset)} of ${into.byteLength} bytes (file truncated?)`, 4);
      got += n;
      if (got % ALIGN !== 0) break; // end of file: O_DIRECT stops at the last (partial) block
    }
    if (a0 + got < end) throw new ReadError(`${file}: short read at offset ${a0 + got}: got ${Math.max(0, a0 + got - offset)} of ${into.byteLength} bytes (file truncated?)`, 4);
    into.set(slot.subarray(offset - a0, end - a0));
    this.stats.bouncedBytes += into.byteLength;
  }

  close(): void {
    for (const fd of this.fds.values()) if (fd !== 'buffered') fs.closeSync(fd);
    this.fds.clear();
    this.fallback.close();
  }
}

function readError(file: string, want: number, at: number, e: unknown): ReadError {
  const err = e as NodeJS.ErrnoException;
  return new ReadError(`${file}: read of ${want} bytes at offset ${at} failed (${err.code ?? err.message})`, 4);
}

/** The reader for an --io mode: O_DIRECT where the platform has it (direct, auto), else buffered. */
export function makeReader(mode: IoMode, buffered: () => Reader, notice?: (msg: string) => void): Reader {
  if (mode === 'buffered') return buffered();
  if (!directSupported()) {
    (notice ?? ((m: string) => process.stderr.write(`k3: ${m}\n`)))(`--io ${mode}: this platform has no O_DIRECT; reading through the page cache`);
    return buffered();
  }
  return new DirectReader(buffered(), notice);
}
