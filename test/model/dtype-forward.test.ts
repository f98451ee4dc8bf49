// Whole forward passes of a K2 (DeepSeek-V3 architecture) checkpoint stored in FP8 and in F16,
// each against the same checkpoint with those weights written as F32: the exact values the FP8 /
// F16 numbers mean, decoded here by code independent of src/checkpoint (the e4m3fn and IEEE half
// formulas), so both files hold the same numbers and only the engine's decoding differs.
// Acceptance: max |dlogit| < 1e-4 on every position of a 32-token prompt, and the same greedy ids.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { GOLDEN, fixture, readTensorBytes } from '../helpers.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { type TensorEntry } from '../../src/checkpoint/safetensors.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { writeSafetensors, type TensorToWrite } from '../../src/synth/writer.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-dtype-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

const IDS = JSON.parse(fs.readFileSync(fixture(GOLDEN, 'k2-yarn', 'tokens.json'), 'utf8')).short as number[];
const LAYERS = 3; // dense layer 0, MoE layers 1 and 2: every kind of K2 linear

/** float8 e4m3fn (bias 7, subnormals at exponent 0, no infinities; 0x7f / 0xff NaN). */
function e4m3(b: number): number {
  const sign = b & 0x80 ? -1 : 1, e = (b >> 3) & 15, m = b & 7;
  if (e === 15 && m === 7) return NaN;
  return e === 0 ? sign * (m / 8) * 2 ** -6 : sign * (1 + m / 8) * 2 ** (e - 7);
}

/** IEEE binary16 bits -> value. */
function half(h: number): number {
  const sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 31) return m ? NaN : sign * Infinity;
  return e === 0 ? sign * m * 2 ** -24 : sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** Nearest binary16 to x (ties to even), by search over the 2^15 magnitudes (x finite, |x| < 65504). */
const HALF_MAGS = Float64Array.from({ length: 0x7c00 }, (_, i) => half(i));
function toHalf(x: number): number {
  const a = Math.abs(x);
  let lo = 0, hi = HALF_MAGS.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (HALF_MAGS[mid]! <= a) lo = mid;
    else hi = mid - 1;
  }
  let best = lo;
  if (lo + 1 < HALF_MAGS.length) {
    const dl = a - HALF_MAGS[lo]!, dh = HALF_MAGS[lo + 1]! - a;
    if (dh < dl || (dh === dl && (lo & 1) === 1)) best = lo + 1;
  }
  return (x < 0 || Object.is(x, -0) ? 0x8000 : 0) | best;
}

const bf16 = (bits: number): number => new Float32Array(new Uint32Array([bits << 16]).buffer)[0]!;

function u16s(e: TensorEntry): Uint16Array {
  const b = readTensorBytes(e);
  return new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
}

/** Rewrite a checkpoint dir tensor by tensor (`conv` returns replacements, or null to keep it); one model.safetensors. */
async function rewrite(src: string, out: string, conv: (name: string, e: TensorEntry, index: Map<string, TensorEntry>) => TensorToWrite | 'drop' | null): Promise<Set<string>> {
  const index = indexCheckpointDir(src);
  const tensors: TensorToWrite[] = [];
  const changed = new Set<string>();
  for (const [name, e] of index) {
    const c = conv(name, e, index);
    if (c === 'drop') continue;
    if (c) changed.add(name);
    tensors.push(c ?? { name, dtype: e.dtype, shape: e.shape, data: readTensorBytes(e) });
  }
  fs.mkdirSync(out, { recursive: true });
  await writeSafetensors(path.join(out, 'model.safetensors'), tensors);
  const cfg = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
  delete cfg.quantization_config;
  fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify(cfg, null, 2));
  return changed;
}

const f32Tensor = (name: string, shape: number[], f: Float32Array): TensorToWrite => ({ name, dtype: 'F32', shape, data: new Uint8Array(f.buffer) });

/** Logits of every position of IDS and 6 greedy ids: Model.open (TypeScript kernels) or Model.load (WebAssembly). */
async function run(dir: string, wasm: boolean): Promise<{ logits: Float32Array; gen: number[] }> {
  const m = wasm ? await Model.load(dir, { ctx: 64, threads: 1 }) : Model.open(dir, { ctx: 64 });
  try {
    const logits = await m.forward(m.newState(), IDS, 'all');
    assert.equal(logits.length, IDS.length * m.config.vocabSize);
    assert.ok(logits.every(Number.isFinite), `${dir}: finite logits`);
    return { logits, gen: (await greedy(m, m.newState(), IDS, 6)).generated };
  } finally {
    await m.close();
  }
}

/** The quantized / half checkpoint on both kernel paths against the F32 one on the TypeScript path. */
async function compare(what: string, quant: string, f32: string): Promise<void> {
  const want = await run(f32, false);
  for (const wasm of [false, true]) {
    const got = await run(quant, wasm);
    let maxDiff = 0;
    for (let i = 0; i < got.logits.length; i++) maxDiff = Math.max(maxDiff, Math.abs(got.logits[i]! - want.logits[i]!));
    console.log(`${what} (${wasm ? 'Model.load' : 'Model.open'}) vs F32: max |dlogit| ${maxDiff.toExponential(3)}, greedy ${got.gen.join(',')}`);
    assert.ok(maxDiff < 1e-4, `${what} ${wasm ? 'wasm' : 'ts'}: max |dlogit| ${maxDiff}`);
    assert.deepEqual(got.gen, want.gen, `${what} ${wasm ? 'wasm' : 'ts'}: greedy ids`);
  }
}

/** The dtypes a checkpoint dir holds. */
const dtypes = (dir: string) => new Set([...indexCheckpointDir(dir).values()].map((e) => e.dtype));

test('K2 FP8 (F8_E4M3 + 128x128 weight_scale_inv, every decoder linear) == the same weights as F32: logits < 1e-4, same greedy ids', async () => {
  const fp8 = path.join(TMP, 'fp8');
  await synthCheckpoint({ arch: 'k2', expertsFormat: 'fp8', layers: LAYERS, out: fp8 });
  const changed = await rewrite(fp8, path.join(TMP, 'fp8-as-f32'), (name, e, index) => {
    if (name.endsWith('.weight_scale_inv')) return 'drop';
    if (e.dtype !== 'F8_E4M3') return null;
    const s = index.get(name.replace(/\.weight$/, '.weight_scale_inv'));
    assert.ok(s && s.dtype === 'F32', `${name}: F32 weight_scale_inv`);
    const [rows, cols] = e.shape as [number, number];
    assert.deepEqual(s.shape, [Math.ceil(rows / 128), Math.ceil(cols / 128)]);
    const q = readTensorBytes(e);
    const sb = readTensorBytes(s);
    const scale = new Float32Array(sb.buffer, sb.byteOffset, sb.byteLength / 4);
    const f = new Float32Array(rows * cols);
    // weight = fp8 value * its 128x128 block's scale (DeepSeek-V3 weight_dequant), rounded once to f32
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) f[r * cols + c] = e4m3(q[r * cols + c]!) * scale[Math.floor(r / 128) * s.shape[1]! + Math.floor(c / 128)]!;
    return f32Tensor(name, e.shape, f);
  });
  // every decoder linear but the router was FP8: attention (q_a, q_b, kv_a, kv_b, o), dense MLP,
  // shared and routed experts
  const per = (re: RegExp) => [...changed].filter((n) => re.test(n)).length;
  assert.equal(per(/self_attn\./), 5 * LAYERS);
  assert.equal(per(/^model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight$/), 3);
  assert.equal(per(/shared_experts\./), 3 * (LAYERS - 1));
  assert.equal(per(/\.experts\.\d+\./), 3 * 16 * (LAYERS - 1));
  assert.equal(changed.size, 5 * LAYERS + 3 + 3 * (LAYERS - 1) * 17);
  assert.ok(dtypes(fp8).has('F8_E4M3') && !dtypes(path.join(TMP, 'fp8-as-f32')).has('F8_E4M3'));
  await compare('K2 FP8', fp8, path.join(TMP, 'fp8-as-f32'));
});

test('K2 F16 (every decoder linear) == the same weights as F32: logits < 1e-4, same greedy ids', async () => {
  const bf = path.join(TMP, 'bf16');
  await synthCheckpoint({ arch: 'k2', layers: LAYERS, out: bf });
  const isLinear = (name: string, e: TensorEntry) => /^model\.layers\.\d+\..*\.weight$/.test(name) && e.shape.length === 2 && e.dtype === 'BF16';
  const halves = new Map<string, Uint16Array>();
  const toF16 = (name: string, e: TensorEntry): Uint16Array => {
    let h = halves.get(name);
    if (!h) {
      const b = u16s(e);
      h = new Uint16Array(b.length);
      for (let i = 0; i < b.length; i++) h[i] = toHalf(bf16(b[i]!));
      halves.set(name, h);
    }
    return h;
  };
  const f16Dir = path.join(TMP, 'f16');
  const c16 = await rewrite(bf, f16Dir, (name, e) => (isLinear(name, e) ? { name, dtype: 'F16', shape: e.shape, data: new Uint8Array(toF16(name, e).buffer) } : null));
  const c32 = await rewrite(bf, path.join(TMP, 'f16-as-f32'), (name, e) => (isLinear(name, e) ? f32Tensor(name, e.shape, Float32Array.from(toF16(name, e), half)) : null));
  assert.deepEqual([...c16], [...c32]);
  assert.ok(c16.size >= 5 * LAYERS + 3 + 3 * (LAYERS - 1) * 17, `${c16.size} linears converted`);
  assert.ok(dtypes(f16Dir).has('F16') && !dtypes(path.join(TMP, 'f16-as-f32')).has('F16'));
  await compare('K2 F16', f16Dir, path.join(TMP, 'f16-as-f32'));
});
