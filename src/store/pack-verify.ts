// `k3 pack --verify`: recompute every record's sha256 and check the data files and, for experts
// left in place, the source shards they live in and every expert's sha256. (The manifest's own
// digest is checked by readManifest: an edited manifest stops here with exit 4.)

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { PACK_ALIGN, errCode, expertSourceDir, readManifest } from '../checkpoint/packed.js';
import { DEFAULT_CHUNK, pushChunks, sameJson, shardIdentity, streamChunks, type Chunk } from './pack-io.js';

export interface VerifyResult {
  dir: string;
  records: number;
  /** In-place experts hashed (0 when the experts are packed records or absent). */
  experts: number;
  bytes: number;
  /** Records whose bytes no longer hash to the manifest's sha256. */
  mismatches: { record: string; file: string; offset: number; length: number; expected: string; actual: string }[];
  /** Other problems: missing / resized files, changed source shards of in-place experts. */
  problems: string[];
  seconds: number;
}

export async function verifyPack(dir: string, opts: { chunkBytes?: number; onProgress?: (done: number, total: number) => void } = {}): Promise<VerifyResult> {
  const t0 = performance.now();
  const m = readManifest(dir);
  const problems: string[] = [];
  const mismatches: VerifyResult['mismatches'] = [];
  const chunkBytes = Math.max(PACK_ALIGN, opts.chunkBytes ?? DEFAULT_CHUNK);
  const sizes = new Map<string, number>();
  for (const f of m.files) {
    try {
      const s = fs.statSync(path.join(dir, f.name)).size;
      if (s !== f.size) problems.push(`${f.name}: ${s} bytes, the manifest says ${f.size}`);
      sizes.set(f.name, s);
    } catch (e) {
      problems.push(`${f.name}: missing (${errCode(e)})`);
    }
  }
  const chunks: Chunk[] = [];
  let total = 0;
  for (const r of m.records) {
    const size = sizes.get(r.file);
    if (size === undefined || size < r.offset + r.length) {
      if (size !== undefined) problems.push(`record ${r.name}: lies past the end of ${r.file}`);
      mismatches.push({ record: r.name, file: r.file, offset: r.offset, length: r.length, expected: r.sha256, actual: 'unreadable' });
      continue;
    }
    const hash = createHash('sha256');
    pushChunks(chunks, path.join(dir, r.file), r.offset, -1, 0, r.length, 0, hash, chunkBytes);
    chunks[chunks.length - 1]!.done = (hex) => {
      if (hex !== r.sha256) mismatches.push({ record: r.name, file: r.file, offset: r.offset, length: r.length, expected: r.sha256, actual: hex });
    };
    total += r.length;
  }
  const ex = m.experts;
  if (ex?.in_place) {
    try {
      const src = expertSourceDir(dir, m, ex);
      const ids = shardIdentity(ex.files.map((f) => path.join(src, f)));
      for (const id of ids) {
        const rec = m.source_shards.find((s) => s.file === id.file);
        if (!rec || !sameJson(rec, id)) problems.push(`source shard ${path.join(src, id.file)} changed since packing (size or header); repack`);
      }
      ex.files.forEach((f, i) => sizes.set(`expert:${i}`, ids[i]!.size));
      for (const [prefix, [fi, off]] of Object.entries(ex.at)) {
        const file = path.join(src, ex.files[fi] ?? '?');
        const want = ex.sha256![prefix]!;
        const size = sizes.get(`expert:${fi}`);
        if (size === undefined || off + ex.expert_bytes > size) {
          mismatches.push({ record: `expert ${prefix}`, file, offset: off, length: ex.expert_bytes, expected: want, actual: 'unreadable' });
          continue;
        }
        pushChunks(chunks, file, off, -1, 0, ex.expert_bytes, 0, createHash('sha256'), chunkBytes);
        chunks[chunks.length - 1]!.done = (hex) => {
          if (hex !== want) mismatches.push({ record: `expert ${prefix}`, file, offset: off, length: ex.expert_bytes, expected: want, actual: hex });
        };
        total += ex.expert_bytes;
      }
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  let done = 0;
  await streamChunks(chunks, chunkBytes, [], (n) => {
    done += n;
    opts.onProgress?.(done, total);
  });
  return { dir, records: m.records.length, experts: m.experts?.in_place ? Object.keys(m.experts.at).length : 0, bytes: total, mismatches, problems, seconds: (performance.now() - t0) / 1000 };
}
