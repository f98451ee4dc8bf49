// Positioned reads of weight bytes: the interface every reader implements (plain files here,
// direct-reader.ts for O_DIRECT, verified-reader.ts for checksums, fault.ts for tests), and the
// clock the store reads through, which counts the time at least one read is in flight.

import * as fs from 'node:fs';
import { ReadError } from '../util/errors.js';
import type { Range } from './layout.js';

/** Positioned reads of byte ranges into caller memory. A test double can inject faults. */
export interface ByteReader {
  read(file: string, offset: number, into: Uint8Array): Promise<void>;
  close(): void;
}

const MAX_READ = 1 << 30; // one fs.read moves at most 2 GiB in Node 20; stay well below

export class FsReader implements ByteReader {
  private readonly fds = new Map<string, number>();

  private fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = fs.openSync(file, 'r');
      } catch (e) {
        throw new ReadError(`${file}: cannot open (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 4);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    const fd = this.fd(file);
    const length = into.byteLength;
    let done = 0;
    while (done < length) {
      const want = Math.min(MAX_READ, length - done);
      const got = await new Promise<number>((resolve, reject) =>
        fs.read(fd, into, done, want, offset + done, (err, n) => (err ? reject(new ReadError(`${file}: read of ${want} bytes at offset ${offset + done} failed (${err.code ?? err.message})`, 4)) : resolve(n))),
      );
      if (got === 0) throw new ReadError(`${file}: short read at offset ${offset + done}: got ${done} of ${length} bytes (file truncated?)`, 4);
      done += got;
    }
  }

  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd);
    this.fds.clear();
  }
}

/** A reader that adds to `busy.readBusyMs` the time during which at least one of its reads is in flight. */
export class TimedReads {
  private inFlight = 0;
  private busySince = 0;

  constructor(readonly reader: ByteReader, private readonly busy: { readBusyMs: number }) {}

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    if (this.inFlight++ === 0) this.busySince = performance.now();
    try {
      await this.reader.read(file, offset, into);
    } finally {
      if (--this.inFlight === 0) this.busy.readBusyMs += performance.now() - this.busySince;
    }
  }

  range(r: Range, into: Uint8Array): Promise<void> {
    return this.read(r.file, r.offset, into);
  }
}
