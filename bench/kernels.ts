// Kernel throughput, side by side: the TypeScript reference, WebAssembly SIMD on 1 thread
// (relaxed SIMD on and off) and on 2 threads. GMAC/s = multiply-adds per second; GB/s = weight
// bytes per second (each call reads the weights once, whatever T). Best of 5 samples. The fused
// rows (KDA step, MLA scores / weighted sum) count state or cache bytes instead of weights.
//
//   node dist/bench/kernels.js [--ms 400] [--threads 2] [--no-ref] [--json]

import * as ref from '../src/kernels/ref.js';
import { weightBytes, type WeightView, type WeightFormat } from '../src/formats/weight.js';
import { createKernels, type Kernels } from '../src/kernels/fast.js';
import { f32ToBf16 } from '../src/formats/dtypes.js';
import { kdaRecurStep, mlaScoresRef, mlaWeightedSumRef } from '../src/graph/reference.js';
import { gatedActRef } from '../src/kernels/wasm/act.js';

const args = process.argv.slice(2);
const opt = (name: string, def: number): number => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const MS = opt('--ms', 400);
const THREADS = opt('--threads', 2);
const NO_REF = args.includes('--no-ref');
const JSON_OUT = args.includes('--json');

let seed = 12345;
const rnd = (): number => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 2 ** 32;
};

function weight(format: WeightFormat, rows: number, cols: number): WeightView {
  const n = rows * cols;
  let data: Uint8Array, scale: Uint8Array | undefined;
  switch (format) {
    case 'f32': data = new Uint8Array(new Float32Array(n).map(() => rnd() - 0.5).buffer); break;
    case 'bf16': case 'f16':
      data = new Uint8Array(new Uint16Array(n).map(() => (format === 'bf16' ? f32ToBf16((rnd() - 0.5) * 0.1) : 0x2000 | Math.floor(rnd() * 0x1000) | (rnd() < 0.5 ? 0x8000 : 0))).buffer);
      break;
    case 'fp8':
      data = new Uint8Array(n).map(() => Math.floor(rnd() * 0x7e) | (rnd() < 0.5 ? 0x80 : 0));
      scale = new Uint8Array(new Float32Array(Math.ceil(rows / 128) * Math.ceil(cols / 128)).fill(1e-3).buffer);
      break;
    case 'int4':
      data = new Uint8Array(rows * Math.ceil(cols / 8) * 4).map(() => Math.floor(rnd() * 256));
      scale = new Uint8Array(new Uint16Array(rows * Math.ceil(cols / 32)).fill(f32ToBf16(0.01)).buffer);
      break;
    case 'mxfp4':
      data = new Uint8Array(n / 2).map(() => Math.floor(rnd() * 256));
      scale = new Uint8Array(n / 32).map(() => 118 + Math.floor(rnd() * 7));
      break;
  }
  return { name: format, format, rows, cols, data, scale, scaleDtype: format === 'int4' ? 'BF16' : scale ? 'F32' : undefined };
}

/**
 * Seconds per call: after a warm-up, 5 samples of about MS/5 milliseconds each, the fastest kept
 * (other processes on a shared machine only ever make a sample slower).
 */
function time(fn: () => void, ms = MS): number {
  fn();
  let best = Infinity;
  for (let s = 0; s < 5; s++) {
    let n = 0;
    const t0 = performance.now();
    let t1 = t0;
    while (t1 - t0 < ms / 5 || n < 2) {
      fn();
      n++;
      t1 = performance.now();
    }
    best = Math.min(best, (t1 - t0) / 1000 / n);
  }
  return best;
}

interface Row {
  kernel: string;
  shape: string;
  T: number;
  ref?: number;
  wasm1: number;
  wasm1Strict: number;
  wasmN: number;
  gbps1: number;
  gbpsN: number;
}

async function main(): Promise<void> {
  const k1 = await createKernels({ threads: 1, memoryBytes: 256 << 20 });
  const k1s = await createKernels({ threads: 1, memoryBytes: 256 << 20, relaxed: false });
  const kN = await createKernels({ threads: THREADS, memoryBytes: 256 << 20 });
  const cases: [WeightFormat, number, number, number][] = [
    // T = 1: decode; T = 8: about one MoE expert's share of a 64-token prefill; T = 64: prefill
    ['bf16', 2048, 2048, 1], ['bf16', 2048, 2048, 8], ['bf16', 2048, 2048, 64],
    ['mxfp4', 768, 1024, 1], ['mxfp4', 768, 1024, 8], ['mxfp4', 768, 1024, 64], ['mxfp4', 1024, 768, 1], ['mxfp4', 1024, 768, 8],
    ['f32', 1024, 1024, 1], ['f32', 1024, 1024, 8], ['f16', 1024, 1024, 1], ['int4', 1024, 1024, 1], ['int4', 1024, 1024, 8],
    ['fp8', 1024, 1024, 1], ['fp8', 1024, 1024, 8],
  ];
  const rows: Row[] = [];
  const place = (k: Kernels, w: WeightView, T: number) => {
    const wk = k.upload(w);
    const x = k.allocF32(T * w.cols);
    for (let i = 0; i < x.length; i++) x[i] = rnd() * 2 - 1; // (map() would return a copy outside kernel memory)
    const y = k.allocF32(T * w.rows);
    return () => k.matmul(wk, x, T, y);
  };
  for (const [format, r, c, T] of cases) {
    const w = weight(format, r, c);
    const macs = r * c * T;
    const s1 = time(place(k1, w, T));
    const s1s = time(place(k1s, w, T));
    const sN = time(place(kN, w, T));
    let sRef: number | undefined;
    if (!NO_REF) {
      const x = new Float32Array(T * c).map(() => rnd() * 2 - 1), y = new Float32Array(T * r);
      sRef = time(() => ref.matmul(w, x, T, y), Math.min(MS, 300));
    }
    const g = (s: number) => macs / s / 1e9;
    rows.push({
      kernel: `matmul ${format}`, shape: `${r}x${c}`, T,
      ref: sRef && g(sRef), wasm1: g(s1), wasm1Strict: g(s1s), wasmN: g(sN),
      gbps1: weightBytes(w) / s1 / 1e9, gbpsN: weightBytes(w) / sN / 1e9,
    });
    if (!JSON_OUT) print(rows[rows.length - 1]!, rows.length === 1);
  }
  // absorbed attention: matvecT over a block of rows (single thread)
  for (const [format, r, c] of [['bf16', 128, 512], ['mxfp4', 128, 512]] as [WeightFormat, number, number][]) {
    const w = weight(format, r, c);
    const x = new Float32Array(r).map(() => rnd());
    const y = new Float32Array(c);
    const macs = r * c;
    const wk1 = k1.upload(w), wk1s = k1s.upload(w);
    const s1 = time(() => k1.matvecT(wk1, 0, r, x, 0, y));
    const s1s = time(() => k1s.matvecT(wk1s, 0, r, x, 0, y));
    const sRef = NO_REF ? undefined : time(() => ref.matvecT(w, 0, r, x, 0, y), Math.min(MS, 300));
    const row: Row = {
      kernel: `matvecT ${format}`, shape: `${r}x${c}`, T: 1, ref: sRef && macs / sRef / 1e9,
      wasm1: macs / s1 / 1e9, wasm1Strict: macs / s1s / 1e9, wasmN: macs / s1 / 1e9,
      gbps1: weightBytes(w) / s1 / 1e9, gbpsN: weightBytes(w) / s1 / 1e9,
    };
    rows.push(row);
    if (!JSON_OUT) print(row, false);
  }
  // fused pieces (wasm/fused.ts) with their arrays in kernel memory, against the JavaScript
  // references in src/model: KDA step of one token (16 heads of 128: decay + 3 multiply-adds per
  // state element), MLA scores and weighted latent sum over n cached positions (16 heads).
  const f32 = (k: Kernels | null, n: number, lo = -1, hi = 1): Float32Array => {
    const a = k ? k.allocF32(n) : new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * rnd();
    return a;
  };
  {
    const H = 16, d = 128, P = H * d;
    const mk = (k: Kernels | null) => ({ S: f32(k, P * d, -0.01, 0.01), q: f32(k, P), kk: f32(k, P), v: f32(k, P), a: f32(k, P, 0.999, 1), b: f32(k, H, 0, 0.001), o: f32(k, P) });
    const run = (k: Kernels) => {
      const x = mk(k);
      return () => k.kdaStep(x.S, x.q, x.kk, x.v, x.a, x.b, x.o, H, d);
    };
    const macs = 4 * H * d * d;
    const s1 = time(run(k1)), s1s = time(run(k1s)), sN = time(run(kN));
    let sRef: number | undefined;
    if (!NO_REF) {
      const x = mk(null), u = new Float32Array(d);
      sRef = time(() => {
        for (let h = 0; h < H; h++) kdaRecurStep(x.S, h * d * d, d, x.q, x.kk, x.v, x.a, x.b[h]!, x.o, h * d, u);
      }, Math.min(MS, 300));
    }
    const row: Row = { kernel: 'kda step', shape: `${H}x${d}x${d}`, T: 1, ref: sRef && macs / sRef / 1e9, wasm1: macs / s1 / 1e9, wasm1Strict: macs / s1s / 1e9, wasmN: macs / sN / 1e9, gbps1: (8 * P * d) / s1 / 1e9, gbpsN: (8 * P * d) / sN / 1e9 };
    rows.push(row);
    if (!JSON_OUT) print(row, false);
  }
  for (const n of [64, 1024]) {
    const H = 16, Lk = 256, dr = 64, dq = 192, tau = 1 / Math.sqrt(dq);
    const mk = (k: Kernels | null) => ({ qLat: f32(k, H * Lk), q: f32(k, H * dq), lat: f32(k, n * Lk), rope: f32(k, n * dr), sc: f32(k, H * n), P: f32(k, H * n, 0, 1 / n), o: f32(k, H * Lk) });
    for (const part of ['scores', 'wsum'] as const) {
      const macs = part === 'scores' ? H * n * (Lk + dr) : H * n * Lk;
      const run = (k: Kernels) => {
        const x = mk(k);
        return part === 'scores' ? () => k.mlaScores(x.qLat, x.q, 128, dq, x.lat, x.rope, n, Lk, dr, tau, H, x.sc) : () => k.mlaWeightedSum(x.P, x.lat, n, Lk, H, x.o);
      };
      const s1 = time(run(k1)), s1s = time(run(k1s)), sN = time(run(kN));
      let sRef: number | undefined;
      if (!NO_REF) {
        const x = mk(null);
        sRef = time(part === 'scores' ? () => mlaScoresRef(x.qLat, x.q, 128, dq, x.lat, x.rope, n, Lk, dr, tau, H, x.sc) : () => mlaWeightedSumRef(x.P, x.lat, n, Lk, H, x.o), Math.min(MS, 300));
      }
      const cacheBytes = n * (part === 'scores' ? Lk + dr : Lk) * 4;
      const row: Row = { kernel: `mla ${part}`, shape: `${H}x${n}x${Lk}`, T: 1, ref: sRef && macs / sRef / 1e9, wasm1: macs / s1 / 1e9, wasm1Strict: macs / s1s / 1e9, wasmN: macs / sN / 1e9, gbps1: cacheBytes / s1 / 1e9, gbpsN: cacheBytes / sN / 1e9 };
      rows.push(row);
      if (!JSON_OUT) print(row, false);
    }
  }
  // gated activations (wasm/act.ts), million elements per second: the earlier JavaScript with
  // Math.exp / Math.tanh, the reference of the shared numerics, and the WebAssembly kernel on the
  // calling thread, plain arrays copied in and out (as the model calls it). n = one expert's
  // intermediate (768) and a dense MLP's (8192) for one token.
  const acts: { kind: string; n: number; mathJs: number; ref: number; wasm1: number }[] = [];
  for (const n of [768, 8192]) {
    for (const [kind, b, bl] of [['silu', 0, null], ['situ', 4, null], ['situ', 4, 25]] as const) {
      const g = f32(null, n, -8, 8), u = f32(null, n, -8, 8), o = new Float32Array(n);
      const mathJs = time(() => {
        for (let i = 0; i < n; i++) {
          const x = g[i]!;
          o[i] = kind === 'silu' ? (x / (1 + Math.exp(-x))) * u[i]! : b * Math.tanh(x / b) * (1 / (1 + Math.exp(-x))) * (bl === null ? u[i]! : bl * Math.tanh(u[i]! / bl));
        }
      }, Math.min(MS, 300));
      const sRef = time(() => gatedActRef(g, u, o, kind, b, bl), Math.min(MS, 300));
      const s1 = time(() => k1.gatedAct(g, u, o, kind, b, bl));
      const r = { kind: `${kind}${bl === null ? '' : ' βl'}`, n, mathJs: n / mathJs / 1e6, ref: n / sRef / 1e6, wasm1: n / s1 / 1e6 };
      acts.push(r);
      if (!JSON_OUT) {
        if (acts.length === 1) console.log(`\ngated activation, Melem/s: ${'kind'.padEnd(8)} ${'n'.padStart(5)} ${'Math js'.padStart(8)} ${'ref'.padStart(8)} ${'wasm 1t'.padStart(8)}`);
        console.log(`${''.padEnd(26)} ${r.kind.padEnd(8)} ${String(n).padStart(5)} ${r.mathJs.toFixed(1).padStart(8)} ${r.ref.toFixed(1).padStart(8)} ${r.wasm1.toFixed(1).padStart(8)}`);
      }
    }
  }
  if (JSON_OUT) console.log(JSON.stringify({ threads: THREADS, relaxed: k1.relaxed, rows, acts }, null, 1));
  await Promise.all([k1.close(), k1s.close(), kN.close()]);
}

function print(r: Row, header: boolean): void {
  const f = (x: number | undefined, w = 7) => (x === undefined ? '-' : x.toFixed(2)).padStart(w);
  if (header) {
    console.log(`GMAC/s (GB/s of weights); wasm = WebAssembly SIMD, relaxed unless 'strict' (plain SIMD: the dot's fused multiply-add emulated in f64, ~20x slower, kept for identical bytes without relaxed SIMD); ${THREADS}t = ${THREADS} threads`);
    console.log(`${'kernel'.padEnd(16)} ${'shape'.padEnd(10)} ${'T'.padStart(2)} ${'ref'.padStart(7)} ${'wasm 1t'.padStart(7)} ${'strict'.padStart(7)} ${`wasm ${THREADS}t`.padStart(7)} ${'GB/s 1t'.padStart(7)} ${`GB/s ${THREADS}t`.padStart(7)} ${'1t/ref'.padStart(7)} ${`${THREADS}t/1t`.padStart(6)}`);
  }
  console.log(`${r.kernel.padEnd(16)} ${r.shape.padEnd(10)} ${String(r.T).padStart(2)} ${f(r.ref)} ${f(r.wasm1)} ${f(r.wasm1Strict)} ${f(r.wasmN)} ${f(r.gbps1)} ${f(r.gbpsN)} ${f(r.ref && r.wasm1 / r.ref)} ${f(r.wasmN / r.wasm1, 6)}`);
}

await main();
