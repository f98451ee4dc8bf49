// Kimi K2.5: the real config.json (shared/realdata/k25) parses as K2's decoder under
// `language_model.`, `k3 info` / `k3 plan` size it from the config alone (INT4 experts, as its
// quantization_config declares), `k3 synth --arch k25` writes the official layout, and a K2.5-layout
// checkpoint runs on the K2 code path: the same weights give the same logits, bytes for bytes, as
// in the K2-Thinking layout.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CLI, GOLDEN, GOLDEN_TOL, ROOT, readTensorBytes, sameBytes } from '../helpers.js';
import { loadConfig, parseConfig } from '../../src/checkpoint/config.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { stateSize } from '../../src/model/state.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';
import { resolveSynth, synthCheckpoint } from '../../src/synth/synth.js';
import { writeSafetensors } from '../../src/synth/writer.js';
import { readNpyF32 } from '../../src/util/npy.js';
import { UserError } from '../../src/util/errors.js';

const REAL = path.join(ROOT, '..', 'shared', 'realdata', 'k25');
const PREFIX = 'language_model.';
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-k25-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

function readJson(file: string): Record<string, any> {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function k3(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
}

test('real K2.5 config: text_config is K2 (61 MLA layers, 384 experts top-8, YaRN), prefix language_model., INT4 experts declared', () => {
  const c = loadConfig(path.join(REAL, 'config.json'));
  assert.equal(c.arch, 'k2');
  assert.equal(c.variant, 'k25');
  assert.equal(c.prefix, PREFIX);
  assert.equal(c.declaredExperts, 'int4');
  assert.equal(c.numLayers, 61);
  assert.ok(c.layers.every((L) => L.attn === 'mla'));
  assert.equal(c.layers[0]!.ffn, 'dense');
  assert.ok(c.layers.slice(1).every((L) => L.ffn === 'moe'));
  assert.deepEqual([c.moe.experts, c.moe.topK, c.moe.shared, c.moe.intermediate, c.moe.groups, c.moe.naming], [384, 8, 1, 2048, 1, 'k2']);
  assert.equal(c.moe.scaling, 2.827);
  assert.deepEqual(c.mla.rope, { theta: 50000, yarn: { factor: 64, originalMaxPosition: 4096, betaFast: 32, betaSlow: 1, mscale: 1, mscaleAllDim: 1 } });
  assert.deepEqual([c.mla.heads, c.mla.qLoraRank, c.mla.kvLoraRank, c.mla.nopeDim, c.mla.ropeDim, c.mla.vDim], [64, 1536, 512, 128, 64, 128]);
  assert.deepEqual([c.vocabSize, c.hiddenSize, c.rmsNormEps, c.maxPositions, c.bosTokenId], [163840, 7168, 1e-5, 262144, 163584]);
  assert.deepEqual(c.eosTokenIds, [163586]);
  assert.equal(stateSize(c).perPositionBytes, 61 * (512 + 64) * 4);
  // The same decoder as its text_config read as a K2 config of its own: only the wrapper differs.
  const alone = parseConfig(readJson(path.join(REAL, 'config.json')).text_config, 'text_config');
  assert.deepEqual({ ...c, prefix: '', variant: undefined }, { ...alone, variant: undefined });
});

test('K2.5 config refusals name the field', () => {
  const real = readJson(path.join(REAL, 'config.json'));
  const noText = { ...real, text_config: undefined };
  assert.throws(() => parseConfig(noText, 'c.json'), (e: unknown) => e instanceof UserError && /text_config \(model_type kimi_k25\)/.test(e.message));
  const wrongInner = { ...real, text_config: { ...real.text_config, model_type: 'kimi_linear' } };
  assert.throws(() => parseConfig(wrongInner, 'c.json'), (e: unknown) => e instanceof UserError && /text_config\.model_type "kimi_linear"/.test(e.message));
  const q = structuredClone(real);
  q.text_config.quantization_config.config_groups.group_0.weights.group_size = 128;
  assert.throws(() => parseConfig(q, 'c.json'), (e: unknown) => e instanceof UserError && /group_size 128/.test(e.message));
  const missing = structuredClone(real);
  delete missing.text_config.kv_lora_rank;
  assert.throws(() => parseConfig(missing, 'c.json'), (e: unknown) => e instanceof UserError && /text_config\.kv_lora_rank/.test(e.message));
});

test('k3 info and k3 plan take the real K2.5 config.json alone (INT4 experts assumed)', () => {
  const info = k3(['info', path.join(REAL, 'config.json'), '--json']);
  assert.equal(info.status, 0, info.stderr);
  const j = JSON.parse(info.stdout);
  assert.equal(j.architecture, 'k2');
  assert.equal(j.variant, 'k25');
  assert.equal(j.num_layers, 61);
  assert.deepEqual(j.experts, { routed: 384, per_token: 8, shared: 1, intermediate: 2048, latent: null });
  // About 1.03 T parameters in about 553 GiB: 60 x 384 x 3 INT4 experts (I32 words, BF16 group scales).
  assert.ok(j.params > 1.0e12 && j.params < 1.06e12, `params ${j.params}`);
  assert.ok(j.by_dtype.I32.tensors === 60 * 384 * 3 * 2, JSON.stringify(j.by_dtype.I32));
  assert.ok(j.bytes > 540 * 2 ** 30 && j.bytes < 570 * 2 ** 30, `bytes ${j.bytes}`);
  const text = k3(['info', REAL]);
  assert.equal(text.status, 0, text.stderr);
  assert.match(text.stdout, /^architecture {2}k2 \(Kimi K2\.5 text model; vision tower not run\)/);

  const plan = k3(['plan', REAL, '--memory', '64G', '--no-estimate', '--json']);
  assert.equal(plan.status, 0, plan.stderr);
  const p = JSON.parse(plan.stdout);
  assert.equal(p.from_config_only, true);
  assert.equal(p.fits, true);
  assert.equal(p.experts_total, 60 * 384);
  // One INT4 expert as the store reads it: 3 x 2048 x 7168 nibbles + a BF16 scale per 32 (weight_shape is not read).
  assert.equal(p.expert_bytes, 3 * (2048 * 7168 / 2 + (2048 * 7168 / 32) * 2));
  assert.ok(p.floor_bytes < p.budget_bytes);
  const plain = k3(['plan', REAL, '--memory', '64G', '--no-estimate']);
  assert.equal(plain.status, 0, plain.stderr);
  assert.match(plain.stdout, /^plan for k2 \(61 layers\) from config\.json only \(BF16 trunk, INT4 experts assumed\)/);
});

test('synth --arch k25 takes INT4 (default) or BF16 experts, and refuses FP8 and MXFP4 naming the flag', () => {
  assert.equal(resolveSynth({ arch: 'k25' }).expertsFormat, 'int4');
  assert.equal(resolveSynth({ arch: 'k25', expertsFormat: 'bf16' }).expertsFormat, 'bf16');
  for (const f of ['fp8', 'mxfp4'] as const) {
    assert.throws(() => resolveSynth({ arch: 'k25', expertsFormat: f }), (e: unknown) => e instanceof UserError && /--experts-format .*k25 takes int4 or bf16/.test(e.message));
  }
});

async function logitsOf(dir: string, ids: number[]): Promise<{ logits: Float32Array; greedy: number[] }> {
  const model = Model.open(dir);
  try {
    const logits = await model.forward(model.newState(), ids, 'all');
    const g = await greedy(model, model.newState(), ids.slice(0, 8), 12);
    return { logits, greedy: g.generated };
  } finally {
    await model.close();
  }
}

test('synth --arch k25: the official layout; its decoder holds the K2 INT4 synth\'s bytes and gives the same logits', async () => {
  const k25 = path.join(TMP, 'k25');
  const made = k3(['synth', '--arch', 'k25', '--out', k25, '--json']);
  assert.equal(made.status, 0, made.stderr);
  assert.equal(JSON.parse(made.stdout).expertsFormat, 'int4', 'INT4 experts by default, as K2.5 ships');
  const k2 = (await synthCheckpoint({ arch: 'k2', expertsFormat: 'int4', out: path.join(TMP, 'k2') })).dir;
  const cfg = readJson(path.join(k25, 'config.json'));
  assert.equal(cfg.model_type, 'kimi_k25');
  assert.equal(cfg.text_config.model_type, 'kimi_k2');
  assert.deepEqual(cfg.text_config.quantization_config, readJson(path.join(GOLDEN, 'k2-thinking-int4', 'config.json')).quantization_config);
  assert.deepEqual(Object.keys(cfg).sort(), Object.keys(readJson(path.join(REAL, 'config.json'))).sort());
  const c = loadConfig(k25);
  assert.equal(c.variant, 'k25');
  assert.deepEqual({ ...c, prefix: '', variant: undefined }, { ...loadConfig(k2), variant: undefined });

  const a = indexCheckpointDir(k25);
  const b = indexCheckpointDir(k2);
  const vision = [...a.keys()].filter((n) => !n.startsWith(PREFIX));
  assert.ok(vision.length > 0 && vision.every((n) => n.startsWith('vision_tower.') || n.startsWith('mm_projector.')), vision.join(' '));
  const decoder = [...a.keys()].filter((n) => n.startsWith(PREFIX)).map((n) => n.slice(PREFIX.length));
  assert.deepEqual(decoder.sort(), [...b.keys()].sort());
  for (const n of decoder) assert.ok(readTensorBytes(a.get(PREFIX + n)!).equals(readTensorBytes(b.get(n)!)), n);

  const info = k3(['info', k25, '--json']);
  assert.equal(info.status, 0, info.stderr);
  assert.equal(JSON.parse(info.stdout).skipped_tensors, vision.length);

  const ids = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % c.vocabSize);
  const x = await logitsOf(k25, ids);
  const y = await logitsOf(k2, ids);
  assert.ok(sameBytes(x.logits, y.logits), 'K2.5 layout logits differ from the K2 layout');
  assert.deepEqual(x.greedy, y.greedy);

  const run = k3(['run', k25, '--ids', '1,5,7,9', '--gen', '4', '--json']);
  assert.equal(run.status, 0, run.stderr);
  assert.equal(JSON.parse(run.stdout).generated_ids.length, 4);
});

test('the golden K2-Thinking INT4 weights laid out as K2.5 give the golden logits, bytes equal to the K2 layout', async () => {
  const gdir = path.join(GOLDEN, 'k2-thinking-int4');
  const out = path.join(TMP, 'golden-as-k25');
  fs.mkdirSync(out);
  const real = readJson(path.join(REAL, 'config.json'));
  const text = readJson(path.join(gdir, 'config.json'));
  fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify({ ...real, bos_token_id: text.bos_token_id, eos_token_id: text.eos_token_id, text_config: text }));
  const tensors = [...indexCheckpointDir(gdir).values()].map((e) => ({ name: PREFIX + e.name, dtype: e.dtype, shape: e.shape, data: readTensorBytes(e) }));
  tensors.push({ name: 'vision_tower.patch_embed.proj.weight', dtype: 'BF16', shape: [4, 3, 2, 2], data: Buffer.alloc(4 * 3 * 2 * 2 * 2) });
  await writeSafetensors(path.join(out, 'model.safetensors'), tensors);

  const tokens = readJson(path.join(gdir, 'tokens.json')) as { short: number[] };
  const x = await logitsOf(out, tokens.short);
  const y = await logitsOf(gdir, tokens.short);
  assert.ok(sameBytes(x.logits, y.logits), 'K2.5 layout logits differ from the K2-Thinking layout');
  assert.deepEqual(x.greedy, y.greedy);
  const gold = readNpyF32(path.join(gdir, 'logits-short.npy'));
  let d = 0;
  for (let i = 0; i < gold.data.length; i++) d = Math.max(d, Math.abs(x.logits[i]! - gold.data[i]!));
  assert.ok(d < GOLDEN_TOL, `max |diff| ${d}`);
});
