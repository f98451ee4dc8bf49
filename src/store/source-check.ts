// `k3 pack` of a source with a `k3 verify` sidecar (issue 44): the bytes the pack reads (copied,
// coded, or hashed into an in-place expert's digest) are checked against the sidecar as they
// stream, so a byte changed since `k3 verify` fails the pack (exit 4) instead of being sealed
// under a fresh digest. No second read: each tensor is hashed from the pack's own reads, in order.

import { createHash, type Hash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ReadError } from '../util/errors.js';
import { CHECKSUMS_NAME, hashRange } from './checksums.js';
import type { CheckedRange } from './verified-reader.js';

interface Range extends CheckedRange {
  fed: number;
  hash: Hash | null;
  /** Read out of order or twice: hashed again whole at the end. */
  again: boolean;
}

export class SourceCheck {
  private readonly byFile = new Map<string, Range[]>();

  constructor(ranges: CheckedRange[]) {
    for (const r of ranges) {
      if (r.length === 0) continue;
      const list = this.byFile.get(r.file) ?? [];
      list.push({ ...r, fed: 0, hash: null, again: false });
      this.byFile.set(r.file, list);
    }
    for (const list of this.byFile.values()) list.sort((a, b) => a.offset - b.offset);
  }

  /** Bytes of `file` at `offset`, as the pack read them. */
  readonly feed = (file: string, offset: number, bytes: Uint8Array): void => {
    const list = this.byFile.get(file);
    if (!list) return;
    const end = offset + bytes.byteLength;
    let lo = 0, hi = list.length; // the first range that ends after `offset`
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]!.offset + list[mid]!.length <= offset) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < list.length && list[i]!.offset < end; i++) {
      const r = list[i]!;
      const from = Math.max(offset, r.offset), to = Math.min(end, r.offset + r.length);
      if (r.again || from !== r.offset + r.fed) {
        r.again = true;
        continue;
      }
      (r.hash ??= createHash('sha256')).update(bytes.subarray(from - offset, to - offset));
      r.fed += to - from;
      if (r.fed === r.length) this.compare(r, r.hash.digest('hex'));
    }
  };

  /** Ranges read only in part, or out of order, hashed whole now; a range never read is not packed. */
  async finish(): Promise<void> {
    const buf = Buffer.allocUnsafe(4 * 2 ** 20);
    for (const [file, list] of this.byFile) {
      const left = list.filter((r) => r.again || (r.fed > 0 && r.fed < r.length));
      if (left.length === 0) continue;
      const fd = await fs.promises.open(file, 'r');
      try {
        for (const r of left) this.compare(r, await hashRange(fd, file, r.offset, r.length, buf, () => {}));
      } finally {
        await fd.close();
      }
    }
  }

  private compare(r: Range, hex: string): void {
    if (hex !== r.sha256) {
      const sidecar = path.join(path.dirname(r.file), CHECKSUMS_NAME);
      throw new ReadError(`${r.file}: ${r.what} (offset ${r.offset}, ${r.length} bytes) fails its checksum in ${sidecar}: changed since k3 verify recorded it; nothing packed`, 4);
    }
  }
}
