// `k3 pack --compress` benchmark (issue 9, item 5), all in one run: the compression ratio of the
// coded BF16 trunk on the golden checkpoints and on a synthetic K3 checkpoint (next to the
// exponent-entropy bound), the trunk bytes one token reads at the floor budget (plain pack vs
// coded pack), the decode speed on one thread (WebAssembly vs the TypeScript reference), and the
// disk's read bandwidth measured with O_DIRECT reads of a file of a few GB, so the decoder's speed
// can be read as a multiple of the disk's.
//
//   npm run build && node dist/bench/compress.js [--preset k3-medium] [--dir models/k3-medium]
//       [--disk-gb 3] [--json]
//
// Synthetic weights are N(0, 1/in), so their exponents spread like trained weights' do. Benchmarks
// are not tests: nothing here gates CI.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { indexCheckpointDir } from '../src/checkpoint/dir.js';
import type { TensorEntry } from '../src/checkpoint/safetensors.js';
import { bf16Decoder } from '../src/kernels/fast.js';
import { REF_DECODER, decodeRunInPlace, type BlockDecoder, type CodedRun } from '../src/formats/bf16-code.js';
import { Model } from '../src/model/model.js';
import { packCheckpoint } from '../src/store/pack.js';
import { synthCheckpoint } from '../src/synth/synth.js';
import type { SynthPreset } from '../src/synth/dims.js';
import { directBandwidth } from './disk.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values } = parseArgs({
  options: {
    preset: { type: 'string', default: 'k3-medium' },
    dir: { type: 'string' },
    layers: { type: 'string' },
    experts: { type: 'string' },
    'disk-gb': { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
  },
});
const GB = 1e9;
const log = (s: string) => process.stderr.write(s + '\n');

function readAt(file: string, offset: number, into: Uint8Array): void {
  const fd = fs.openSync(file, 'r');
  try {
    let done = 0;
    while (done < into.byteLength) done += fs.readSync(fd, into, done, into.byteLength - done, offset + done);
  } finally {
    fs.closeSync(fd);
  }
}

/** Bits per weight of the best static code for each tensor's exponents: 8 (sign, mantissa) + H(exponent). */
function entropyBytes(src: Map<string, TensorEntry>, names: string[]): number {
  let bits = 0;
  for (const name of names) {
    const e = src.get(name)!;
    const count = new Float64Array(256);
    const step = 16 * 2 ** 20;
    for (let off = 0; off < e.nbytes; off += step) {
      const b = new Uint8Array(Math.min(step, e.nbytes - off));
      readAt(e.file, e.offset + off, b);
      const v = new Uint16Array(b.buffer);
      for (let i = 0; i < v.length; i++) count[(v[i]! >> 7) & 0xff]!++;
    }
    const n = e.nbytes / 2;
    let h = 0;
    for (const c of count) if (c > 0) h -= (c / n) * Math.log2(c / n);
    bits += n * (8 + h);
  }
  return bits / 8;
}

interface Ratio {
  checkpoint: string;
  tensors: number;
  raw_bytes: number;
  stored_bytes: number;
  ratio: number;
  entropy_ratio: number;
  pack_seconds: number;
}

async function ratioOf(name: string, src: string, tmp: string): Promise<{ r: Ratio; plain: string; coded: string }> {
  const plain = path.join(tmp, `${name}-plain`), coded = path.join(tmp, `${name}-coded`);
  await packCheckpoint({ model: src, out: plain });
  const p = await packCheckpoint({ model: src, out: coded, compress: true });
  const c = p.coded!;
  const codedNames = [...indexCheckpointDir(coded)].filter(([, e]) => e.coded).map(([n]) => n);
  const ent = entropyBytes(indexCheckpointDir(src), codedNames);
  return { r: { checkpoint: name, tensors: c.tensors, raw_bytes: c.rawBytes, stored_bytes: c.storedBytes, ratio: c.storedBytes / c.rawBytes, entropy_ratio: ent / c.rawBytes, pack_seconds: p.seconds }, plain, coded };
}

/** Trunk bytes one token reads at the floor budget. */
async function trunkPerToken(dir: string): Promise<number> {
  const budget = Model.plan(dir, { budget: 0, ctx: 64, chunk: 1 }).floorBytes;
  const model = Model.open(dir, { budget, ctx: 64, chunk: 1 });
  const st = model.newState();
  await model.forward(st, [11], 'last', 1);
  const before = model.store.stats.trunkBytesRead;
  await model.forward(st, [22], 'last', 1);
  const bytes = model.store.stats.trunkBytesRead - before;
  await model.close();
  return bytes;
}

interface Run {
  buf: Uint8Array;
  stored: Uint8Array;
  run: CodedRun;
}

/** Whole coded tensors of a pack, in memory, up to `limit` raw bytes. */
function loadRuns(dir: string, limit: number): Run[] {
  const out: Run[] = [];
  let raw = 0;
  const coded = [...indexCheckpointDir(dir).values()].filter((e) => e.coded).sort((a, b) => b.nbytes - a.nbytes);
  for (const e of coded) {
    if (raw + e.nbytes > limit && out.length > 0) continue;
    const c = e.coded!;
    const [rows, cols] = e.shape as [number, number];
    const stored = new Uint8Array(c.storedBytes);
    readAt(e.file, e.offset, stored);
    out.push({ buf: new Uint8Array(e.nbytes), stored, run: { cols, blockRows: c.stored.map((_, b) => Math.min(rows, (b + 1) * c.blockRows) - b * c.blockRows), stored: c.stored, where: e.name, offset: e.offset } });
    raw += e.nbytes;
  }
  return out;
}

/** Decode every run `reps` times (in place, as the store does); raw and stored GB/s. */
function decodeSpeed(runs: Run[], dec: BlockDecoder, minSeconds: number): { raw_gbps: number; stored_gbps: number } {
  let raw = 0, stored = 0, t = 0;
  const once = () => {
    for (const r of runs) {
      r.buf.set(r.stored, r.buf.byteLength - r.stored.byteLength);
      const t0 = performance.now();
      decodeRunInPlace(r.buf, r.run, dec);
      t += performance.now() - t0;
      raw += r.buf.byteLength;
      stored += r.stored.byteLength;
    }
  };
  once(); // warm up (tier-up, page faults)
  raw = stored = t = 0;
  while (t < minSeconds * 1000) once();
  return { raw_gbps: raw / GB / (t / 1000), stored_gbps: stored / GB / (t / 1000) };
}

/** Read bandwidth with O_DIRECT (bench/disk.ts) of a freshly written probe file of `bytes`. */
async function probeBandwidth(dir: string, bytes: number): Promise<{ gbps: number; direct: boolean; note: string }> {
  const file = path.join(dir, 'disk-probe.bin');
  const pattern = new Uint8Array(16 * 2 ** 20).map((_, i) => (i * 2654435761) >>> 24);
  const fdw = fs.openSync(file, 'w');
  for (let off = 0; off < bytes; off += pattern.byteLength) fs.writeSync(fdw, pattern, 0, Math.min(pattern.byteLength, bytes - off), off);
  fs.fsyncSync(fdw);
  fs.closeSync(fdw);
  try {
    return await directBandwidth([file], bytes);
  } finally {
    fs.rmSync(file, { force: true });
  }
}

async function main(): Promise<void> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-compress-bench-'));
  try {
    const ratios: Ratio[] = [];
    const perToken: { checkpoint: string; plain: number; coded: number }[] = [];
    for (const g of ['k3', 'kimi-linear', 'k2-yarn']) {
      const { r, plain, coded } = await ratioOf(g, path.join(ROOT, '..', 'shared', 'golden', g), tmp);
      ratios.push(r);
      perToken.push({ checkpoint: g, plain: await trunkPerToken(plain), coded: await trunkPerToken(coded) });
    }
    const preset = values.preset! as SynthPreset;
    const synthDir = path.resolve(values.dir ?? path.join(ROOT, 'models', preset));
    log(`synth ${preset} -> ${synthDir}`);
    const s = await synthCheckpoint({ arch: 'k3', preset, out: synthDir, ...(values.layers ? { layers: Number(values.layers) } : {}), ...(values.experts ? { experts: Number(values.experts) } : {}) });
    log(`  ${(s.bytes / GB).toFixed(2)} GB${s.skipped ? ' (already there)' : ''}; packing twice (plain, --compress)`);
    const syn = await ratioOf(preset, synthDir, path.dirname(synthDir));
    ratios.push(syn.r);
    log('  trunk bytes per token at the floor');
    perToken.push({ checkpoint: preset, plain: await trunkPerToken(syn.plain), coded: await trunkPerToken(syn.coded) });

    log('decode speed, one thread');
    const runs = loadRuns(syn.coded, 256 * 2 ** 20);
    const wasm = decodeSpeed(runs, bf16Decoder(), 3);
    const ref = decodeSpeed(runs.slice(0, 1), REF_DECODER, 3);
    log('disk bandwidth (O_DIRECT)');
    const disk = await probeBandwidth(path.dirname(synthDir), Math.round(Number(values['disk-gb']) * GB));
    for (const d of [syn.plain, syn.coded]) fs.rmSync(d, { recursive: true, force: true });

    const result = { cpu: os.cpus()[0]?.model ?? '?', ratios, trunk_bytes_per_token_at_floor: perToken, decode_one_thread: { wasm, ref, wasm_over_ref: wasm.raw_gbps / ref.raw_gbps }, disk, decode_over_disk: { raw: wasm.raw_gbps / disk.gbps, stored: wasm.stored_gbps / disk.gbps } };
    if (values.json) {
      console.log(JSON.stringify(result, null, 1));
      return;
    }
    const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
    console.log(`CPU: ${result.cpu}\n`);
    console.log('| checkpoint | coded matrices | raw | stored | stored/raw | entropy bound | saved |');
    console.log('|---|---|---|---|---|---|---|');
    for (const r of ratios) console.log(`| ${r.checkpoint} | ${r.tensors} | ${(r.raw_bytes / 2 ** 20).toFixed(1)} MiB | ${(r.stored_bytes / 2 ** 20).toFixed(1)} MiB | ${pct(r.ratio)} | ${pct(r.entropy_ratio)} | ${pct(1 - r.ratio)} |`);
    console.log('\n| checkpoint | trunk bytes / token at the floor, plain | coded | coded/plain |');
    console.log('|---|---|---|---|');
    for (const t of perToken) console.log(`| ${t.checkpoint} | ${t.plain} | ${t.coded} | ${pct(t.coded / t.plain)} |`);
    console.log('\n| one thread | raw GB/s out | stored GB/s in |');
    console.log('|---|---|---|');
    console.log(`| wasm SIMD | ${wasm.raw_gbps.toFixed(2)} | ${wasm.stored_gbps.toFixed(2)} |`);
    console.log(`| TS reference | ${ref.raw_gbps.toFixed(3)} | ${ref.stored_gbps.toFixed(3)} |`);
    console.log(`| wasm / reference | ${(wasm.raw_gbps / ref.raw_gbps).toFixed(1)}x | |`);
    console.log(`\ndisk: ${disk.gbps.toFixed(2)} GB/s (${disk.note}, ${values['disk-gb']} GB file, 32 MiB reads, 8 in flight)`);
    console.log(`decode / disk: ${result.decode_over_disk.stored.toFixed(1)}x (stored bytes in), ${result.decode_over_disk.raw.toFixed(1)}x (bf16 bytes out)`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

await main();
