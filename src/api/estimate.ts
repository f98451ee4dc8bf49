// `k3 plan`'s speed estimate: seconds per token at a budget, from a short measurement of this
// machine (about a second): the read rate of the checkpoint's own files, and the kernels' weight
// throughput for a BF16 (trunk) and, when the model has them, an MXFP4 (expert) matrix. A model
// of the cost, not a run: one decode step reads what the plan streams plus the expected expert
// misses (uniform routing: a slot holds a random expert), and multiplies every trunk weight and
// top-k experts per MoE layer once. Reading and computing are added, not overlapped, so it leans
// slow; real routing repeats experts, so a run usually hits the cache more often.

import * as fs from 'node:fs';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import type { ModelConfig } from '../checkpoint/config.js';
import type { WeightFormat, WeightView } from '../formats/weight.js';
import { KernelGroup } from '../graph/compute.js';
import { q7Bytes, q7View, requantizeQ7InPlace, type Kernels } from '../kernels/fast.js';
import type { Layout } from '../store/layout.js';
import type { Plan } from '../store/plan.js';
import { MiB } from '../util/format.js';

export interface SpeedEstimate {
  seconds_per_token: number;
  compute_seconds_per_token: number;
  read_seconds_per_token: number | null;
  bytes_read_per_token: number;
  disk_bytes_per_second: number | null;
  trunk_kernel_bytes_per_second: number;
  expert_kernel_bytes_per_second: number | null;
  threads: number;
}

/** Sequential reads of the checkpoint's files for up to ~0.4 s (at most 256 MiB): bytes/s. */
function measureDisk(entries: Map<string, TensorEntry>): number | null {
  const files = [...new Set([...entries.values()].map((e) => e.file))].filter((f) => fs.existsSync(f));
  if (files.length === 0) return null;
  const buf = Buffer.allocUnsafe(4 * MiB);
  let bytes = 0;
  const t0 = performance.now();
  for (const f of files) {
    const fd = fs.openSync(f, 'r');
    try {
      let pos = 0;
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, pos);
        if (n <= 0) break;
        pos += n;
        bytes += n;
        if (bytes >= 256 * MiB || performance.now() - t0 > 400) break;
      }
    } finally {
      fs.closeSync(fd);
    }
    if (bytes >= 256 * MiB || performance.now() - t0 > 400) break;
  }
  const s = (performance.now() - t0) / 1000;
  return bytes > 0 && s > 0 ? bytes / s : null;
}

/**
 * A [rows, cols] weight over `data` (and `scale`) filled with fixed pseudo-random bytes: bf16
 * values of modest size, E8M0 scales of 2^-6. For timing kernels (here and `k3 bench`), not numbers.
 */
export function syntheticWeight(name: string, format: WeightFormat, rows: number, cols: number, data: Uint8Array, scale?: Uint8Array): WeightView {
  let s = 7;
  for (let i = 0; i < data.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = format === 'bf16' && i % 2 === 1 ? 0x3c | (s & 0x80) : s >>> 24;
  }
  if (scale) scale.fill(121);
  return { name: `${name} ${format}`, format, rows, cols, data, scale };
}

/**
 * Seconds one one-token product `y = W x` takes: one call to warm up (one round of them, given
 * several matrices of one shape), then as many as fit in `ms`, cycling through the matrices.
 */
export function secondsPerMatmul(k: { matmul: (w: WeightView, x: Float32Array, T: number, y: Float32Array) => void }, w: WeightView | readonly WeightView[], ms: number): number {
  const ws = Array.isArray(w) ? w : [w as WeightView];
  const x = new Float32Array(ws[0]!.cols).fill(0.5);
  const y = new Float32Array(ws[0]!.rows);
  for (const v of ws) k.matmul(v, x, 1, y);
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    k.matmul(ws[n % ws.length]!, x, 1, y);
    n++;
  }
  return (performance.now() - t0) / 1000 / n;
}

/**
 * Bytes of distinct weights a rate is measured over, cycled through: more than the caches of the
 * machines this runs on hold, as the model's weights are. (One 32 MiB matrix, measured before,
 * stayed in a large L3: 32 GiB/s BF16 at 2 threads on an Intel Xeon whose decode streams 19, and
 * k3-medium's estimate was 33 ms a token where it decodes in 57.)
 */
const PROBE_BYTES = 128 * MiB;

/** Weight bytes per second of one-token products, for ~150 ms per format; and the seconds one
 *  tiny product takes (the fixed cost of a call, which dominates small models). */
async function measureKernels(cfg: ModelConfig, mxfp4Experts: boolean, threads: number): Promise<{ trunk: number; experts: number | null; perCall: number }> {
  const D = cfg.hiddenSize;
  const latent = cfg.moe.latentDim ?? D;
  const group = await KernelGroup.create(96 * MiB, { threads });
  try {
    const k = group.members[0]!;
    /** `copies` matrices of one shape (the first one's bytes copied into the others). */
    const time = (fmt: 'bf16' | 'mxfp4', rows: number, cols: number, copies = 1): { bytes: number; seconds: number } => {
      const bytes = fmt === 'bf16' ? rows * cols * 2 : (rows * cols) / 2 + (rows * cols) / 32;
      const made = (): WeightView => syntheticWeight('estimate', fmt, rows, cols, k.alloc(fmt === 'bf16' ? rows * cols * 2 : (rows * cols) / 2, 4096).u8, fmt === 'mxfp4' ? k.alloc((rows * cols) / 32).u8 : undefined);
      const first = made();
      const ws = [first];
      for (let i = 1; i < copies; i++) {
        const data = k.alloc(first.data.length, 4096).u8;
        data.set(first.data);
        const scale = first.scale ? k.alloc(first.scale.length).u8 : undefined;
        if (scale) scale.set(first.scale!);
        ws.push({ ...first, data, scale });
      }
      return { bytes, seconds: secondsPerMatmul(k, ws, 150) };
    };
    /** Weight bytes per second over PROBE_BYTES of matrices of `bytes` each. */
    const rate = (fmt: 'bf16' | 'mxfp4', rows: number, cols: number, bytes: number): number => {
      const t = time(fmt, rows, cols, Math.max(1, Math.round(PROBE_BYTES / bytes)));
      return t.bytes / t.seconds;
    };
    // Matrices of 32 MiB (BF16) and 16 MiB (MXFP4), PROBE_BYTES of each; the trunk's as wide as
    // the hidden size (up to 16384), since wide rows take their own path (wasm/mm1.ts MM1_WIDE_ROWS)
    const cols = Math.min(D, 16384);
    const trunk = rate('bf16', Math.ceil((32 * MiB) / (cols * 2)), cols, 32 * MiB);
    const ecols = Math.min(latent, 4096);
    const experts = mxfp4Experts && latent % 32 === 0 ? rate('mxfp4', Math.ceil((16 * MiB) / ((ecols * 17) / 32)), ecols, 16 * MiB) : null;
    return { trunk, experts, perCall: time('bf16', 32, 32).seconds };
  } finally {
    await group.close();
  }
}

export async function estimateSpeed(cfg: ModelConfig, layout: Layout, plan: Plan, entries: Map<string, TensorEntry> | null, threads: number): Promise<SpeedEstimate> {
  const disk = entries ? measureDisk(entries) : null;
  const hasExperts = layout.expertBytes > 0 && plan.expertsTotal > 0;
  const moeLayer = cfg.layers.findIndex((L) => L.ffn === 'moe');
  const mxfp4 = hasExperts && moeLayer >= 0 && layout.experts(moeLayer, 0)[0]?.format === 'mxfp4';
  const k = await measureKernels(cfg, mxfp4, threads);
  const activeExperts = hasExperts ? layout.moeLayers * Math.min(cfg.moe.topK, cfg.moe.experts) : 0;
  const missRate = hasExperts ? Math.max(0, 1 - plan.expertSlots / plan.expertsTotal) : 0;
  const bytesRead = plan.streamedBytes + activeExperts * missRate * layout.expertBytes + plan.embedRowBytes;
  // Weight bytes at the measured rates, plus the fixed cost per product (3 per expert).
  const calls = layout.matrices.size + 3 * activeExperts;
  const compute = layout.trunkBytes / k.trunk + (activeExperts * layout.expertBytes) / (k.experts ?? k.trunk) + calls * k.perCall;
  const read = disk ? bytesRead / disk : null;
  return {
    seconds_per_token: compute + (read ?? 0),
    compute_seconds_per_token: compute,
    read_seconds_per_token: read,
    bytes_read_per_token: bytesRead,
    disk_bytes_per_second: disk,
    trunk_kernel_bytes_per_second: k.trunk,
    expert_kernel_bytes_per_second: k.experts,
    threads,
  };
}

/** GMAC/s and GB/s of --fast's trunk product (bf16 requantized to q7, 8-bit activations), T = 1. */
export function q7MatmulRate(k: Kernels, rows: number, cols: number): { kind: string; shape: [number, number]; gmac_per_s: number; gb_per_s: number } {
  const buf = k.alloc(rows * cols * 2, 4096).u8;
  syntheticWeight('bench', 'bf16', rows, cols, buf);
  requantizeQ7InPlace(buf, rows, cols);
  const w = q7View('bench', buf, rows, cols);
  const s = secondsPerMatmul(k, w, 300);
  return { kind: 'q7 x q8 (bf16 trunk requantized, --fast)', shape: [rows, cols], gmac_per_s: (rows * cols) / s / 1e9, gb_per_s: q7Bytes(rows, cols) / s / 1e9 };
}
