// `k3 synth`: checkpoints in the exact official layouts (compared with the golden checkpoints'
// headers and configs), readable by the project's own loader, deterministic, atomic, idempotent.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { readSafetensorsHeader, type TensorEntry } from '../../src/checkpoint/safetensors.js';
import { loadConfig } from '../../src/checkpoint/config.js';
import { resolveLinear } from '../../src/checkpoint/linear.js';
import { UserError } from '../../src/util/errors.js';
import { planCheckpoint, planFileBytes, resolveSynth, synthCheckpoint, type SynthOptions } from '../../src/synth/synth.js';
import { safetensorsLayout, writeSafetensors } from '../../src/synth/writer.js';
import { makeFill, type TensorPlan } from '../../src/synth/gen.js';
import { command } from '../../src/cli/synth.js';
import { GOLDEN, readTensorBytes } from '../helpers.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-synth-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

let n = 0;
async function synth(opts: Omit<SynthOptions, 'out'> & { out?: string }) {
  const out = opts.out ?? path.join(TMP, `c${n++}`);
  const r = await synthCheckpoint({ ...opts, out });
  return { out, r };
}

function shapes(m: Map<string, TensorEntry>): Map<string, string> {
  return new Map([...m].map(([k, e]) => [k, `${e.dtype} ${JSON.stringify(e.shape)}`]));
}

function readJson(file: string): unknown {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

const CASES = [
  { golden: 'k3', opts: { arch: 'k3' } },
  { golden: 'kimi-linear', opts: { arch: 'kimi_linear' } },
  { golden: 'k2-yarn', opts: { arch: 'k2' } },
  { golden: 'k2-thinking-int4', opts: { arch: 'k2', expertsFormat: 'int4' } },
] as const;

for (const c of CASES) {
  test(`synth ${c.opts.arch} ${'expertsFormat' in c.opts ? c.opts.expertsFormat : ''}: same tensors, dtypes, shapes and config as golden/${c.golden}`, async () => {
    const { out, r } = await synth({ ...c.opts });
    assert.equal(r.skipped, false);
    const gdir = path.join(GOLDEN, c.golden);
    const mine = indexCheckpointDir(out);
    const gold = indexCheckpointDir(gdir);
    assert.deepEqual(shapes(mine), shapes(gold));
    assert.equal(r.tensors, gold.size);
    assert.deepEqual(readJson(path.join(out, 'config.json')), readJson(path.join(gdir, 'config.json')));
    const cfg = loadConfig(out);
    assert.deepEqual(cfg, loadConfig(gdir));
    // Every linear resolves, in the expected format.
    for (const name of mine.keys()) {
      const m = /^(.*)\.(weight|weight_packed)$/.exec(name);
      if (!m || mine.get(name)!.shape.length !== 2 || /embed_tokens|_res_proj|vision_tower|mm_projector/.test(name)) continue;
      const lin = resolveLinear(mine, m[1]!);
      const expert = /\.experts\.\d+\./.test(name);
      const want = expert ? (c.golden === 'k3' ? 'mxfp4' : c.golden === 'k2-thinking-int4' ? 'int4' : 'bf16') : 'bf16';
      assert.equal(lin.format, want, name);
    }
    // Sharded output: the index lists every tensor in its shard, total_size = tensor bytes.
    if (r.shards.length > 1) {
      const idx = readJson(path.join(out, 'model.safetensors.index.json')) as { metadata: { total_size: number }; weight_map: Record<string, string> };
      assert.equal(Object.keys(idx.weight_map).length, mine.size);
      let total = 0;
      for (const [name, e] of mine) {
        assert.equal(idx.weight_map[name], path.basename(e.file));
        total += e.nbytes;
      }
      assert.equal(idx.metadata.total_size, total);
    } else {
      assert.ok(fs.existsSync(path.join(out, 'model.safetensors')));
    }
  });
}

test('synth k3: 6-digit shard names, trunk runs and expert runs contiguous in the documented order, tail in the last shard', async () => {
  const { out, r } = await synth({ arch: 'k3', shards: 4 });
  assert.deepEqual(r.shards, ['model-00001-of-000004.safetensors', 'model-00002-of-000004.safetensors', 'model-00003-of-000004.safetensors', 'model-00004-of-000004.safetensors']);
  const m = indexCheckpointDir(out);
  const cfg = loadConfig(out);
  const last = path.join(out, r.shards[3]!);
  for (const name of ['language_model.model.embed_tokens.weight', 'language_model.lm_head.weight', 'language_model.model.norm.weight', 'language_model.model.output_attn_res_norm.weight', 'language_model.model.output_attn_res_proj.weight']) {
    assert.equal(m.get(name)!.file, last, name);
  }
  const contiguous = (es: TensorEntry[], what: string) => {
    for (let i = 1; i < es.length; i++) {
      assert.equal(es[i]!.file, es[0]!.file, what);
      assert.equal(es[i]!.offset, es[i - 1]!.offset + es[i - 1]!.nbytes, `${what}: ${es[i]!.name} does not follow ${es[i - 1]!.name}`);
    }
  };
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `language_model.model.layers.${l}.`;
    const trunk = [...m.values()].filter((e) => e.name.startsWith(p) && !e.name.includes('.experts.')).sort((a, b) => a.offset - b.offset);
    assert.ok(trunk.length > 10);
    contiguous(trunk, `layer ${l} trunk`);
    if (cfg.layers[l]!.ffn !== 'moe') continue;
    for (let e = 0; e < cfg.moe.experts; e++) {
      const x = `${p}block_sparse_moe.experts.${e}.`;
      const run = ['w1.weight_packed', 'w1.weight_scale', 'w2.weight_packed', 'w2.weight_scale', 'w3.weight_packed', 'w3.weight_scale'].map((s) => m.get(x + s)!);
      contiguous(run, `layer ${l} expert ${e}`);
    }
  }
  // A_log: F32 [128], zero beyond the 4 heads.
  const alog = new Float32Array(new Uint8Array(readTensorBytes(m.get('language_model.model.layers.0.self_attn.A_log')!)).buffer);
  assert.equal(alog.length, 128);
  assert.ok(alog.slice(0, 4).every((x) => x > 0 && x <= Math.log(16)));
  assert.ok(alog.slice(4).every((x) => x === 0));
});

test('synth k3 --experts-format bf16: BF16 .weight experts, no quantization_config', async () => {
  const { out } = await synth({ arch: 'k3', expertsFormat: 'bf16' });
  const m = indexCheckpointDir(out);
  const gold = indexCheckpointDir(path.join(GOLDEN, 'k3'));
  const nonExpert = (k: string) => !k.includes('.experts.');
  assert.deepEqual([...m.keys()].filter(nonExpert).sort(), [...gold.keys()].filter(nonExpert).sort());
  const w1 = resolveLinear(m, 'language_model.model.layers.1.block_sparse_moe.experts.3.w1');
  const w2 = resolveLinear(m, 'language_model.model.layers.1.block_sparse_moe.experts.3.w2');
  assert.deepEqual([w1.format, w1.rows, w1.cols, w2.rows, w2.cols], ['bf16', 64, 64, 64, 64]);
  const cfg = readJson(path.join(out, 'config.json')) as { text_config: Record<string, unknown> };
  assert.equal(cfg.text_config.quantization_config, undefined);
  loadConfig(out);
});

test('synth k2 fp8: every decoder linear but the router is F8_E4M3 with an F32 weight_scale_inv', async () => {
  const { out } = await synth({ arch: 'k2', expertsFormat: 'fp8' });
  const m = indexCheckpointDir(out);
  const cfg = readJson(path.join(out, 'config.json')) as Record<string, unknown>;
  assert.deepEqual(cfg.quantization_config, { activation_scheme: 'dynamic', fmt: 'e4m3', quant_method: 'fp8', weight_block_size: [128, 128] });
  loadConfig(out);
  const gold = indexCheckpointDir(path.join(GOLDEN, 'k2-yarn'));
  for (const [name, g] of gold) {
    const e = m.get(name)!;
    assert.ok(e, name);
    const linear = name.includes('.layers.') && name.endsWith('_proj.weight') || name.endsWith('kv_a_proj_with_mqa.weight');
    if (linear) {
      assert.equal(e.dtype, 'F8_E4M3', name);
      const lin = resolveLinear(m, name.slice(0, -'.weight'.length));
      assert.equal(lin.format, 'fp8');
      assert.deepEqual([lin.rows, lin.cols], g.shape);
    } else {
      assert.equal(e.dtype, g.dtype, name);
      assert.equal(m.has(`${name.replace(/\.weight$/, '')}.weight_scale_inv`), false, name);
    }
  }
  assert.equal(m.get('model.layers.1.mlp.gate.weight')!.dtype, 'BF16');
  assert.equal(m.size, gold.size + [...gold.keys()].filter((k) => k.endsWith('.weight') && m.has(`${k.slice(0, -7)}.weight_scale_inv`)).length);
});

test('synth: same seed -> identical bytes, other seed -> other bytes, sharding does not change tensor bytes', async () => {
  const a = await synth({ arch: 'k3' });
  const b = await synth({ arch: 'k3' });
  const c = await synth({ arch: 'k3', seed: 2 });
  const d = await synth({ arch: 'k3', shards: 1 });
  for (const f of a.r.shards) assert.ok(fs.readFileSync(path.join(a.out, f)).equals(fs.readFileSync(path.join(b.out, f))), f);
  assert.ok(!fs.readFileSync(path.join(a.out, a.r.shards[0]!)).equals(fs.readFileSync(path.join(c.out, c.r.shards[0]!))));
  assert.deepEqual(d.r.shards, ['model.safetensors']);
  assert.ok(!fs.existsSync(path.join(d.out, 'model.safetensors.index.json')));
  const ma = indexCheckpointDir(a.out);
  const md = indexCheckpointDir(d.out);
  for (const name of ['language_model.model.embed_tokens.weight', 'language_model.model.layers.5.block_sparse_moe.experts.7.w2.weight_packed', 'language_model.model.layers.0.self_attn.dt_bias']) {
    assert.ok(readTensorBytes(ma.get(name)!).equals(readTensorBytes(md.get(name)!)), name);
  }
});

test('synth: a rerun with the same options is a no-op; other options need force; nothing half-written is left', async () => {
  const out = path.join(TMP, 'rerun');
  const first = await synth({ arch: 'kimi_linear', out, extraFiles: { 'tokenizer_config.json': '{}', 'tiktoken.model': new Uint8Array([1, 2, 3]) } });
  assert.equal(first.r.skipped, false);
  assert.equal(fs.readFileSync(path.join(out, 'tokenizer_config.json'), 'utf8'), '{}');
  assert.deepEqual([...fs.readFileSync(path.join(out, 'tiktoken.model'))], [1, 2, 3]);
  const mtime = fs.statSync(path.join(out, 'model.safetensors')).mtimeMs;
  const again = await synth({ arch: 'kimi_linear', out, extraFiles: { 'tiktoken.model': new Uint8Array([1, 2, 3]), 'tokenizer_config.json': '{}' } });
  assert.equal(again.r.skipped, true);
  assert.equal(fs.statSync(path.join(out, 'model.safetensors')).mtimeMs, mtime);
  await assert.rejects(synth({ arch: 'kimi_linear', out, seed: 7 }), (e: unknown) => e instanceof UserError && /already exists/.test(e.message));
  const forced = await synth({ arch: 'kimi_linear', out, seed: 7, force: true });
  assert.equal(forced.r.skipped, false);
  assert.equal((readJson(path.join(out, 'synth.json')) as { seed: number }).seed, 7);
  assert.ok(!fs.existsSync(path.join(out, 'tiktoken.model')));
  // Never replace a directory that is not a checkpoint, even with force.
  const other = path.join(TMP, 'not-a-checkpoint');
  fs.mkdirSync(other);
  fs.writeFileSync(path.join(other, 'notes.txt'), 'keep me');
  await assert.rejects(synth({ arch: 'k2', out: other, force: true }), UserError);
  assert.equal(fs.readFileSync(path.join(other, 'notes.txt'), 'utf8'), 'keep me');
  assert.deepEqual(fs.readdirSync(TMP).filter((f) => f.includes('.tmp') || f.includes('.old-')), []);
});

test('synth: invalid combinations are UserErrors', () => {
  const bad: Omit<SynthOptions, 'out'>[] = [
    { arch: 'k2', expertsFormat: 'mxfp4' },
    { arch: 'kimi_linear', expertsFormat: 'int4' },
    { arch: 'k3', expertsFormat: 'fp8' },
    { arch: 'k2', preset: 'demo' },
    { arch: 'k3', shards: 11 },
    { arch: 'k3', topK: 17 },
    { arch: 'k2', latent: 64 },
    { arch: 'k3', mlaLayers: [1, 2, 3, 4, 5, 6, 7, 8, 9] },
    { arch: 'k3', experts: 0 },
    { arch: 'nope' as 'k3' },
  ];
  for (const o of bad) assert.throws(() => resolveSynth(o), UserError, JSON.stringify(o));
  // Derived defaults follow overrides.
  const r = resolveSynth({ arch: 'k3', layers: 5, experts: 3 });
  assert.deepEqual([r.dims.mlaLayers, r.dims.topK], [[4, 5], 3]);
  assert.deepEqual(resolveSynth({ arch: 'k2', experts: 6 }).dims.groups, 1);
});

test('synth presets: demo is small, k3-real-layers has the real per-layer byte sizes (plan only)', () => {
  const demo = resolveSynth({ arch: 'k3', preset: 'demo' });
  assert.ok(planFileBytes(planCheckpoint(demo)) < 20e6);
  const medium = planFileBytes(planCheckpoint(resolveSynth({ arch: 'k3', preset: 'k3-medium' })));
  assert.ok(medium > 1.2e9 && medium < 1.8e9, String(medium));
  // With the real 896 experts, trunks match K3.md §4: 2,341,213,184 / 1,267,744,256 / 844,335,616 B.
  const real = planCheckpoint(resolveSynth({ arch: 'k3', preset: 'k3-real-layers', experts: 896 }));
  const bytes = (pred: (name: string) => boolean) => real.shards.flatMap((s) => s.tensors).filter((t) => pred(t.name)).reduce((s, t) => s + t.shape.reduce((a, b) => a * b, 1) * ({ BF16: 2, F32: 4, U8: 1 } as Record<string, number>)[t.dtype]!, 0);
  const trunk = (l: number) => bytes((nm) => nm.startsWith(`language_model.model.layers.${l}.`) && !nm.includes('.experts.'));
  assert.deepEqual([trunk(0), trunk(1), trunk(3)], [2341213184, 1267744256, 844335616]);
  assert.equal(bytes((nm) => nm.startsWith('language_model.model.layers.1.block_sparse_moe.experts.5.')), 17547264);
  const scales = real.shards.flatMap((s) => s.tensors).filter((t) => t.name.endsWith('.weight_scale'));
  for (const t of scales) assert.ok(t.gen.kind === 'e8m0' && t.gen.base >= 120 && t.gen.base + 1 <= 122, t.name);
});

test('writer: chunking does not change the bytes; header is 8-aligned; a failing fill leaves no file', async () => {
  const tensors = [
    { name: 'a', dtype: 'U8' as const, shape: [3], data: new Uint8Array([1, 2, 3]) },
    { name: 'b', dtype: 'BF16' as const, shape: [1000], fill: (p: Uint8Array, off: number) => p.forEach((_, i) => (p[i] = (off + i) & 255)) },
    { name: 'c', dtype: 'F32' as const, shape: [2, 3], chunks: function* () { yield new Uint8Array(10).fill(7); yield new Uint8Array(14).fill(9); } },
  ];
  const f1 = path.join(TMP, 'w1.safetensors');
  const f2 = path.join(TMP, 'w2.safetensors');
  await writeSafetensors(f1, tensors);
  await writeSafetensors(f2, tensors, { chunkBytes: 64 });
  assert.ok(fs.readFileSync(f1).equals(fs.readFileSync(f2)));
  const hdrLen = Number(fs.readFileSync(f1).readBigUInt64LE(0));
  assert.equal((8 + hdrLen) % 8, 0);
  assert.equal(fs.statSync(f1).size, safetensorsLayout(tensors).fileBytes);
  const es = readSafetensorsHeader(f1);
  assert.deepEqual(es.map((e) => [e.name, e.nbytes]), [['a', 3], ['b', 2000], ['c', 24]]);
  const b = readTensorBytes(es[1]!);
  assert.ok(b.every((x, i) => x === (i & 255)));
  // Generated tensors: the same bytes whatever their alignment in the file and the chunk size.
  const plans: TensorPlan[] = [
    { name: 'n', dtype: 'BF16', shape: [37, 33], gen: { kind: 'normal', mean: 0, std: 0.1 } },
    { name: 'f', dtype: 'F32', shape: [301], gen: { kind: 'uniform', lo: -1, hi: 1 } },
    { name: 'q', dtype: 'U8', shape: [129], gen: { kind: 'mxfp4' } },
  ];
  const alone = path.join(TMP, 'g1.safetensors');
  const shifted = path.join(TMP, 'g2.safetensors');
  await writeSafetensors(alone, plans.map((p) => ({ ...p, fill: makeFill(p, 3) })));
  await writeSafetensors(shifted, [{ name: 'odd', dtype: 'U8', shape: [3], data: new Uint8Array(3) }, ...plans.map((p) => ({ ...p, fill: makeFill(p, 3) }))], { chunkBytes: 128 });
  const ga = new Map(readSafetensorsHeader(alone).map((e) => [e.name, e]));
  const gs = new Map(readSafetensorsHeader(shifted).map((e) => [e.name, e]));
  for (const p of plans) assert.ok(readTensorBytes(ga.get(p.name)!).equals(readTensorBytes(gs.get(p.name)!)), p.name);
  assert.ok(gs.get('n')!.offset % 2 === 1);
  const f3 = path.join(TMP, 'w3.safetensors');
  await assert.rejects(writeSafetensors(f3, [{ name: 'x', dtype: 'F32', shape: [1 << 20], fill: () => { throw new Error('boom'); } }], { chunkBytes: 1024 }), /boom/);
  assert.ok(!fs.existsSync(f3) && !fs.existsSync(`${f3}.tmp`));
});

test('k3 synth CLI: bad flags exit 2, --json reports the result', async () => {
  await assert.rejects(command.run(['--arch', 'k3']), (e: unknown) => e instanceof UserError && e.exitCode === 2);
  await assert.rejects(command.run(['--arch', 'k3', '--out', path.join(TMP, 'x'), '--bogus']), (e: unknown) => e instanceof UserError && e.exitCode === 2);
  await assert.rejects(command.run(['--arch', 'k3', '--out', path.join(TMP, 'x'), '--experts-format', 'int4']), UserError);
  await assert.rejects(command.run(['--arch', 'k3', '--out', path.join(TMP, 'x'), '--shards', 'two']), UserError);
  const logs: string[] = [];
  const orig = console.log;
  console.log = (s: string) => logs.push(s);
  try {
    assert.equal(await command.run(['--arch', 'k2', '--out', path.join(TMP, 'cli'), '--layers', '3', '--experts', '8', '--json']), 0);
  } finally {
    console.log = orig;
  }
  const j = JSON.parse(logs[0]!) as { skipped: boolean; tensors: number; dims: { layers: number; experts: number } };
  assert.deepEqual([j.skipped, j.dims.layers, j.dims.experts], [false, 3, 8]);
  const cfg = loadConfig(path.join(TMP, 'cli'));
  assert.deepEqual([cfg.numLayers, cfg.moe.experts, cfg.moe.groups], [3, 8, 4]);
});
