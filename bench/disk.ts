// The disk's read bandwidth as the engine sees it: its own O_DIRECT reader (store/direct-reader.ts,
// page cache bypassed), 32 MiB reads, 8 in flight, into page-aligned memory. Used by the benches
// that quote a disk floor (stream.ts) or a multiple of the disk (compress.ts).

import * as fs from 'node:fs';
import { DirectReader } from '../src/store/direct-reader.js';
import { FsReader } from '../src/store/store.js';

const GB = 1e9;

/** GB/s reading up to `want` bytes from `files` in order; `direct`: every file took O_DIRECT. */
export async function directBandwidth(files: string[], want: number): Promise<{ gbps: number; direct: boolean; note: string }> {
  const notices: string[] = [];
  const reader = new DirectReader(new FsReader(), (m) => notices.push(m));
  const chunk = 32 * 2 ** 20;
  const window = 8;
  const mem = new WebAssembly.Memory({ initial: (window * chunk) / 65536 });
  const jobs: { file: string; off: number }[] = [];
  for (const f of files) {
    const size = fs.statSync(f).size;
    for (let off = 0; off + chunk <= size && jobs.length * chunk < want; off += chunk) jobs.push({ file: f, off });
  }
  const t0 = performance.now();
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: window }, async (_, w) => {
        const buf = new Uint8Array(mem.buffer, w * chunk, chunk);
        for (let j = next++; j < jobs.length; j = next++) await reader.read(jobs[j]!.file, jobs[j]!.off, buf);
      }),
    );
  } finally {
    reader.close();
  }
  const direct = reader.stats.bufferedFiles === 0;
  return { gbps: (jobs.length * chunk) / GB / ((performance.now() - t0) / 1000), direct, note: direct ? 'O_DIRECT' : `${notices[0] ?? 'O_DIRECT refused'}: buffered reads, page cache may help` };
}
