// config.json parsing: the real K3 values (K3.md §2), the 1-based layer lists, and refusals that
// name the field.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { FIXTURES, GOLDEN } from '../helpers.js';
import { loadConfig, parseConfig } from '../../src/checkpoint/config.js';
import { stateSize } from '../../src/model/state.js';

const REAL_K3 = path.join(FIXTURES, 'k3-real-config.json');

test('real K3 config: 93 layers, MLA at 1-based 4, 8, …, 92, 93; dense layer 0; KDA head_dim from linear_attn_config', () => {
  const c = loadConfig(REAL_K3);
  assert.equal(c.arch, 'k3');
  assert.equal(c.prefix, 'language_model.');
  assert.equal(c.numLayers, 93);
  const mla = c.layers.flatMap((L, l) => (L.attn === 'mla' ? [l] : []));
  assert.deepEqual(mla, [...Array.from({ length: 23 }, (_, i) => 4 * i + 3), 92]);
  assert.equal(c.layers.filter((L) => L.attn === 'kda').length, 69);
  assert.equal(c.layers[0]!.ffn, 'dense');
  assert.ok(c.layers.slice(1).every((L) => L.ffn === 'moe'));
  assert.equal(c.kda!.headDim, 128, 'text_config.head_dim (74) is a derived, unused value');
  assert.equal(c.kda!.heads, 96);
  assert.equal(c.kda!.gateLowerBound, -5);
  assert.equal(c.moe.latentDim, 3584);
  assert.equal(c.moe.topK, 16);
  assert.equal(c.attnResBlock, 12);
  assert.equal(c.mla.latentNormEps, 1e-6);
  assert.deepEqual(c.eosTokenIds, [163586]);
  // K3.md §7: 69 × (96·128·128 + 3·3·12288) f32 per sequence; 24 × 576 f32 per position. The
  // engine also keeps each KDA layer's per-token work vectors q, k, v, α, o [12288] and β [96]
  // with the state (kda.ts), and the plan counts what is allocated.
  const s = stateSize(c);
  assert.equal(s.perSequenceBytes, 69 * (96 * 128 * 128 + 9 * 12288 + 5 * 12288 + 96) * 4);
  assert.equal(s.perPositionBytes, 24 * 576 * 4);
});

test('switches: MLA latent-norm epsilon from the config; Kimi Linear biased routing weights', () => {
  assert.equal(loadConfig(REAL_K3, { mlaLatentNormEps: 'config' }).mla.latentNormEps, 1e-5);
  assert.equal(loadConfig(path.join(GOLDEN, 'kimi-linear')).moe.biasedWeights, false);
  assert.equal(loadConfig(path.join(GOLDEN, 'kimi-linear'), { kimiLinearBiasedWeights: true }).moe.biasedWeights, true);
});

test('K2 config: every layer MLA with YaRN rope, grouped routing', () => {
  const c = loadConfig(path.join(GOLDEN, 'k2-yarn'));
  assert.equal(c.arch, 'k2');
  assert.ok(c.layers.every((L) => L.attn === 'mla'));
  assert.equal(c.mla.rope!.yarn!.factor, 32);
  assert.equal(c.moe.groups, 4);
  assert.equal(c.moe.topkGroup, 2);
});

function real(): Record<string, any> {
  return JSON.parse(fs.readFileSync(REAL_K3, 'utf8'));
}

test('refusals name the field', () => {
  const cases: [string, (c: Record<string, any>) => void, RegExp][] = [
    ['num_experts', (c) => delete c.text_config.num_experts, /text_config\.num_experts/],
    ['full_attn_layers out of range', (c) => (c.text_config.linear_attn_config.full_attn_layers = [0, 4]), /outside 1\.\.93/],
    ['contradictory layer lists', (c) => (c.text_config.linear_attn_config.kda_layers = [1, 2, 3, 4]), /layer 4 .* in both/],
    ['top-k above experts', (c) => (c.text_config.num_experts_per_token = 1000), /exceeds/],
    ['unknown model type', (c) => (c.model_type = 'llama'), /model_type "llama"/],
    ['hidden size not a number', (c) => (c.text_config.hidden_size = '7168'), /hidden_size must be a number/],
    ['missing text_config', (c) => delete c.text_config, /text_config/],
  ];
  for (const [what, edit, msg] of cases) {
    const c = real();
    edit(c);
    assert.throws(() => parseConfig(c, 'config.json'), (e: Error) => e.name === 'UserError' && msg.test(e.message), what);
  }
});

test('a K3 checkpoint written by k3 synth loads, and k3 info reports the 1-based full_attn_layers rule', async () => {
  const { spawnSync } = await import('node:child_process');
  const os = await import('node:os');
  const { CLI } = await import('../helpers.js');
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-synth-info-'));
  const dir = path.join(out, 'm');
  const w = spawnSync(process.execPath, [CLI, 'synth', '--arch', 'k3', '--out', dir, '--layers', '13', '--shards', '2'], { encoding: 'utf8' });
  assert.equal(w.status, 0, w.stderr);
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const full = cfg.text_config.linear_attn_config.full_attn_layers as number[];
  const r = spawnSync(process.execPath, [CLI, 'info', dir, '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const info = JSON.parse(r.stdout);
  assert.deepEqual(info.mla_layers, full.map((l) => l - 1));
  assert.deepEqual(info.layer_map.length, 13);
  assert.equal(info.layer_map[0], 'KDA+dense');
  for (let l = 0; l < 13; l++) assert.equal(info.layer_map[l].startsWith('MLA'), full.includes(l + 1), `layer ${l}`);
  const g = spawnSync(process.execPath, [CLI, 'run', dir, '--ids', '1,2,3', '--gen', '2', '--json'], { encoding: 'utf8' });
  assert.equal(g.status, 0, g.stderr);
  assert.equal(JSON.parse(g.stdout).generated_ids.length, 2);
  fs.rmSync(out, { recursive: true, force: true });
});

test('k3 info on the real K3 config alone: the census of K3.md §1 (2,779,484,478,208 params; experts 1,446,456,066,048 bytes)', async () => {
  const { spawnSync } = await import('node:child_process');
  const { CLI } = await import('../helpers.js');
  const r = spawnSync(process.execPath, [CLI, 'info', REAL_K3, '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const i = JSON.parse(r.stdout);
  assert.equal(i.params, 2_779_484_478_208);
  assert.equal(i.expert_bytes, 1_446_456_066_048);
  assert.equal(i.by_dtype.F32.params, 11_122_432);
  assert.equal(i.mla_layers.length, 24);
});
