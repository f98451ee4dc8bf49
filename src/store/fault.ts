// A reader that fails on purpose: the test double for read errors (a failed or short read must
// stop the run with exit code 4, naming the file and offset, and never skip an expert).
// `k3 run` wraps its reader in one when K3_FAULT_AFTER_READS=N is set (tests use this).

import { ReadError } from '../util/errors.js';
import type { ByteReader } from './store.js';

export class FaultyReader implements ByteReader {
  reads = 0;
  faulted = false;
  constructor(
    private readonly inner: ByteReader,
    /** Reads that succeed before every later one fails. */
    private readonly okReads: number,
  ) {}

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    if (this.reads++ >= this.okReads) {
      this.faulted = true;
      throw new ReadError(`${file}: read of ${into.byteLength} bytes at offset ${offset} failed (injected fault)`, 4);
    }
    await this.inner.read(file, offset, into);
  }

  close(): void {
    this.inner.close();
  }
}
