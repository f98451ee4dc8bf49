// VerifiedReader against a reader of bytes in memory: any read pattern returns exactly the stored
// bytes; a range damaged before its first read fails that read (both modes); a byte damaged after
// the first check fails the next read of it with --verify-reads (every mode). fast-check, fixed seed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fc from 'fast-check';
import { createHash } from 'node:crypto';
import { VerifiedReader, type CheckedRange } from '../../src/store/verified-reader.js';
import { ReadError } from '../../src/util/errors.js';
import { runs, seed } from '../fuzz.js';

const MiB = 2 ** 20;

function memReader(bytes: Uint8Array) {
  return {
    async read(_f: string, offset: number, into: Uint8Array) {
      if (offset + into.byteLength > bytes.length) throw new ReadError('past the end', 4);
      into.set(bytes.subarray(offset, offset + into.byteLength));
    },
    close() {},
  };
}

/** A file of `size` bytes cut into ranges at `cuts` (with gaps where a cut is repeated), each with its sha256. */
function setup(size: number, cuts: number[]): { bytes: Uint8Array; ranges: CheckedRange[] } {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 2654435761) >>> 24;
  const points = [...new Set([0, ...cuts.map((c) => c % size), size])].sort((a, b) => a - b);
  const ranges: CheckedRange[] = [];
  for (let i = 0; i + 1 < points.length; i += 1) {
    if (i % 3 === 2) continue; // a gap: bytes no range covers (padding)
    const [a, b] = [points[i]!, points[i + 1]!];
    ranges.push({ what: `record r${i}`, file: 'f', offset: a, length: b - a, sha256: createHash('sha256').update(bytes.subarray(a, b)).digest('hex') });
  }
  return { bytes, ranges };
}

const scenario = fc.record({
  size: fc.integer({ min: 1, max: 3 * MiB }),
  cuts: fc.array(fc.nat(), { maxLength: 6 }),
  reads: fc.array(fc.tuple(fc.nat(), fc.nat({ max: 2 * MiB })), { minLength: 1, maxLength: 8 }),
  mode: fc.constantFrom('first' as const, 'every' as const),
});

test('VerifiedReader: any reads give the stored bytes, in both modes', async () => {
  await fc.assert(
    fc.asyncProperty(scenario, async ({ size, cuts, reads, mode }) => {
      const { bytes, ranges } = setup(size, cuts);
      const v = new VerifiedReader(memReader(bytes), ranges, mode);
      for (const [o, n] of [...reads, ...reads]) {
        const off = o % size;
        const len = Math.min(n, size - off);
        const into = new Uint8Array(len);
        await v.read('f', off, into);
        assert.ok(Buffer.from(into).equals(Buffer.from(bytes.subarray(off, off + len))));
      }
    }),
    { seed: seed(3001), numRuns: runs(150), includeErrorInReport: true },
  );
});

test('VerifiedReader: damage before the first read fails it; damage after is caught in every mode', async () => {
  await fc.assert(
    fc.asyncProperty(scenario, fc.nat(), async ({ size, cuts, reads, mode }, where) => {
      const { bytes, ranges } = setup(size, cuts);
      const at = where % size;
      const covered = ranges.find((r) => at >= r.offset && at < r.offset + r.length);
      const [o, n] = reads[0]!;
      const off = o % size;
      const len = Math.max(1, Math.min(n, size - off));
      const hits = at >= off && at < off + len;
      // Damaged from the start: a read touching the damaged range fails (the whole range is checked).
      const damaged = Uint8Array.from(bytes);
      damaged[at]! ^= 0x40;
      const v1 = new VerifiedReader(memReader(damaged), ranges, mode);
      const touches = covered && off < covered.offset + covered.length && off + len > covered.offset;
      const r1 = v1.read('f', off, new Uint8Array(len));
      if (touches) await assert.rejects(r1, (e: unknown) => e instanceof ReadError && e.exitCode === 4 && e.message.includes(covered.what));
      else await r1;
      // Damaged after a clean first read: every mode catches the next read of that byte.
      const live = Uint8Array.from(bytes);
      const v2 = new VerifiedReader(memReader(live), ranges, mode);
      await v2.read('f', off, new Uint8Array(len));
      live[at]! ^= 0x40;
      const r2 = v2.read('f', off, new Uint8Array(len));
      // Every mode checks the 1 MiB blocks (of the range) the read touches, so damage next to the read is caught too.
      let inBlocks = false;
      if (covered) {
        const s = Math.max(off, covered.offset);
        const e = Math.min(off + len, covered.offset + covered.length);
        const blk = (x: number) => Math.floor((x - covered.offset) / MiB);
        inBlocks = s < e && blk(at) >= blk(s) && blk(at) <= blk(e - 1);
      }
      assert.ok(!hits || !covered || inBlocks);
      if (inBlocks && mode === 'every') await assert.rejects(r2, (e: unknown) => e instanceof ReadError && e.exitCode === 4);
      else await r2;
    }),
    { seed: seed(3002), numRuns: runs(150), includeErrorInReport: true },
  );
});

test('VerifiedReader first mode: each part of a range is checked the first time it is read (a transient flip there is caught)', async () => {
  await fc.assert(
    fc.asyncProperty(scenario, fc.nat(), fc.nat({ max: 300_000 }), fc.nat({ max: 300_000 }), async ({ size, cuts, reads }, where, back, ahead) => {
      const { bytes, ranges } = setup(size, cuts);
      const at = where % size;
      const covered = ranges.find((r) => at >= r.offset && at < r.offset + r.length);
      const [o, n] = reads[0]!;
      const off = o % size;
      const len = Math.max(1, Math.min(n, size - off));
      const live = Uint8Array.from(bytes);
      const v = new VerifiedReader(memReader(live), ranges, 'first');
      await v.read('f', off, new Uint8Array(len));
      // Then a read of bytes around `at`, which now come back damaged (a transient flip, or a change on disk).
      live[at]! ^= 0x40;
      const off2 = Math.max(0, at - back);
      const len2 = Math.min(size, at + 1 + ahead) - off2;
      const r2 = v.read('f', off2, new Uint8Array(len2));
      if (!covered) return void (await r2);
      const part = (s: number, l: number) => [Math.max(s, covered.offset), Math.min(s + l, covered.offset + covered.length)] as const;
      const [a1, b1] = part(off, len);
      const [a2, b2] = part(off2, len2);
      // Not caught only when these are bytes already handed out checked: the same part, or all of the range at once.
      const handedBefore = a1 < b1 && ((a1 === a2 && b1 === b2) || (a1 === covered.offset && b1 === covered.offset + covered.length));
      if (handedBefore) await r2;
      else await assert.rejects(r2, (e: unknown) => e instanceof ReadError && e.exitCode === 4 && e.message.includes(covered.what));
    }),
    { seed: seed(3003), numRuns: runs(150), includeErrorInReport: true },
  );
});
