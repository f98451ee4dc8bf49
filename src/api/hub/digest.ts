// The checksum a file is held to: the sha256 the Hub lists for an LFS file, else its git blob id
// (sha1 of "blob <size>\0" + content), so small files are checked too. A file listed without
// either (a plain copy in the Hub cache, read offline) is not checked.

import { createHash, type Hash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import type { HubFile } from './listing.js';

export class Digest {
  readonly algorithm: 'sha256' | 'git-sha1' | 'none';
  readonly expected: string;
  bytes = 0;
  private hash!: Hash;

  constructor(private readonly file: HubFile) {
    this.algorithm = file.sha256 ? 'sha256' : file.oid ? 'git-sha1' : 'none';
    this.expected = file.sha256 ?? file.oid;
    this.reset();
  }

  reset(): void {
    this.hash = createHash(this.algorithm === 'sha256' ? 'sha256' : 'sha1');
    if (this.algorithm === 'git-sha1') this.hash.update(`blob ${this.file.size}\0`);
    this.bytes = 0;
  }

  update(b: Uint8Array): void {
    this.hash.update(b);
    this.bytes += b.byteLength;
  }

  /** The hex digest (ends this hash: reset() before reusing). */
  hex(): string {
    return this.hash.digest('hex');
  }

  /** Ends the hash; whether it is the expected one ('none': always). */
  check(): { ok: boolean; got: string } {
    const got = this.hex();
    return { ok: this.algorithm === 'none' || got === this.expected, got };
  }
}

/** Feed the first `upTo` bytes of an open file to `d`. */
export async function digestRange(fh: FileHandle, d: Digest, upTo: number): Promise<void> {
  const buf = Buffer.allocUnsafe(Math.min(4 << 20, Math.max(1, upTo)));
  while (d.bytes < upTo) {
    const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, upTo - d.bytes), d.bytes);
    if (bytesRead === 0) break;
    d.update(buf.subarray(0, bytesRead));
  }
}
