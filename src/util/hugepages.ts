// Transparent huge pages (THP) and the kernels' memory. The weights a model holds in memory live in
// one WebAssembly memory per kernel instance, which V8 maps as plain anonymous memory. Linux backs
// such memory with 2 MiB pages only when THP is `always`: under `madvise` (the default of many
// distributions) it takes an madvise(MADV_HUGEPAGE) that JavaScript cannot make, and the memory
// stays in 4 KiB pages.
//
// Why it matters: a decode step streams every resident weight once, and the bf16 single-token
// product does enough arithmetic per byte that its loads depend on the hardware prefetchers, which
// stop at 4 KiB page boundaries. Measured on Intel Xeon (2 vCPU, AVX-512 / AMX, Node 20):
// 640 MB of 2048x2048 bf16 matrices streamed at 11 GB/s with 4 KiB pages against 14 GB/s with
// THP `always` (1 thread), and k3-medium decode at 1 thread took 103 ms/token against 89. The same
// loop in C gains as much from 2 MiB pages as from a software prefetch, which WebAssembly lacks.
// The numbers never change; only the speed does.

import * as fs from 'node:fs';

export type ThpMode = 'always' | 'madvise' | 'never';

const THP_FILE = '/sys/kernel/mm/transparent_hugepage/enabled';

/** The system's THP mode (the bracketed word of the sysfs file), or null where there is none (not Linux, no THP). */
export function thpMode(file = THP_FILE): ThpMode | null {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
  const m = /\[(always|madvise|never)\]/.exec(text);
  return m ? (m[1] as ThpMode) : null;
}

/** One line for people who want speed, when THP is on offer but not given to the kernels' memory; null otherwise. */
export function thpHint(mode: ThpMode | null = thpMode()): string | null {
  if (mode === null || mode === 'always') return null;
  return `transparent huge pages are '${mode}': the kernels' memory gets 4 KiB pages, which slow the weight streams of decode `
    + `(Intel Xeon: 103 vs 89 ms/token on k3-medium at 1 thread); 'echo always | sudo tee ${THP_FILE}' gives it 2 MiB pages (same numbers)`;
}
