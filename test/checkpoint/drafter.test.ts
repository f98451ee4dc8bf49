// DSpark drafter checkpoints (docs/DSPARK.md): the synthesizer writes each of the four published
// layouts, the loader reads every field from the drafter's config and checks the tensors against
// it, refuses what it does not understand with one line naming the file and field, and
// `k3 plan --drafter` places the drafter in the budget and counts bytes per emitted token.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { DRAFTER_LAYOUTS, drafterConfigJson, synthDrafter, type DrafterLayout } from '../../src/synth/drafter.js';
import { checkDrafterTarget, loadDrafter } from '../../src/checkpoint/drafter.js';
import { parseDrafterConfig } from '../../src/checkpoint/drafter-config.js';
import { drafterTensorSpecs } from '../../src/checkpoint/drafter-tensors.js';
import { loadConfig } from '../../src/checkpoint/config.js';
import { writeSafetensors } from '../../src/synth/writer.js';
import { expertUnion } from '../../src/store/drafter-plan.js';
import { UserError } from '../../src/util/errors.js';
import { CLI, FIXTURES } from '../helpers.js';

const K3_CONFIG = path.join(FIXTURES, 'k3-real-config.json');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-drafter-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const k3 = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });

/** A drafter directory of `layout` (tiny with weights, or real config only), made once. */
const made = new Map<string, string>();
async function drafterDir(layout: DrafterLayout, dims: 'tiny' | 'real'): Promise<string> {
  const key = `${dims}-${layout}`;
  if (!made.has(key)) {
    await synthDrafter({ layout, out: path.join(tmp, key), dims, configOnly: dims === 'real' });
    made.set(key, path.join(tmp, key));
  }
  return made.get(key)!;
}

/** A copy of a drafter config with `edit` applied, written to its own directory (config only). */
function editedConfig(layout: DrafterLayout, edit: (j: Record<string, unknown>) => void): string {
  const j = structuredClone(drafterConfigJson(layout, 'real')) as Record<string, unknown>;
  edit(j);
  const dir = fs.mkdtempSync(path.join(tmp, 'edit-'));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(j));
  return dir;
}

function refusal(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (e: unknown) => e instanceof UserError && e.exitCode === 2 && re.test(e.message) && !e.message.includes('\n'));
}

test('the four layouts load with the fields their configs declare', async () => {
  const want: Record<DrafterLayout, object> = {
    inferact: { format: 'k3_dspark', numLayers: 5, taps: [0, 1, 2, 3], block: 7, slots: 'next', blockAttention: 'bidirectional', stream: 'prefix', embedding: 'target', lmHead: 'target', redundantEmbedding: true },
    'inferact-block5': { format: 'k3_dspark', numLayers: 3, taps: [1, 2, 3], block: 5, slots: 'same', blockAttention: 'causal', embedding: 'target', lmHead: 'target' },
    radixark: { format: 'dflash', numLayers: 5, taps: [0, 2, 3], block: 7, slots: 'next', embedding: 'target', lmHead: 'target', redundantEmbedding: false },
    redhatai: { format: 'speculators', numLayers: 5, taps: [1, 2, 3], block: 8, slots: 'next', blockAttention: 'causal', embedding: 'own', lmHead: 'own' },
  };
  for (const layout of DRAFTER_LAYOUTS) {
    const d = loadDrafter(await drafterDir(layout, 'tiny'));
    for (const [k, v] of Object.entries(want[layout])) assert.deepEqual((d.config as unknown as Record<string, unknown>)[k], v, `${layout}: ${k}`);
    assert.ok(d.entries, layout);
    for (const e of d.entries.values()) assert.equal(e.dtype, 'BF16', `${layout}: ${e.name}`);
    assert.equal(d.config.attn.kind, layout.startsWith('inferact') ? 'mla' : 'gqa');
    assert.ok(d.config.confidence?.withMarkov, `${layout}: confidence head reads [h, markov_w1[prev]]`);
  }
  const inf = loadDrafter(await drafterDir('inferact', 'tiny'));
  for (const n of ['context_proj.weight', 'context_norm.weight', 'final_norm.weight', 'layers.4.self_attn.kv_a_proj_with_mqa.weight', 'layers.0.self_attn.q_a_layernorm.weight', 'markov_head.markov_w2.weight', 'confidence_head.proj.bias']) assert.ok(inf.entries!.has(n), n);
  assert.ok(inf.neverReadBytes > 0, 'the embedding copy is counted as never read');
  const rad = loadDrafter(await drafterDir('radixark', 'tiny'));
  for (const n of ['fc.weight', 'hidden_norm.weight', 'norm.weight', 'layers.0.self_attn.q_norm.weight', 'layers.0.self_attn.k_proj.weight']) assert.ok(rad.entries!.has(n), n);
  assert.ok(!rad.entries!.has('embed_tokens.weight') && !rad.entries!.has('lm_head.weight'));
  const rh = loadDrafter(await drafterDir('redhatai', 'tiny'));
  assert.ok(rh.entries!.has('embed_tokens.weight') && rh.entries!.has('lm_head.weight'));
  assert.equal(rh.neverReadBytes, 0);
  const g = rh.config.attn;
  assert.ok(g.kind === 'gqa' && g.layerKinds.join() === 'sliding,sliding,sliding,sliding,full' && g.slidingWindow === 16);
});

test('real-size configs give the published parameter counts', async () => {
  // RadixArk 2,249,289,601 and RedHatAI 4,744,900,481 as their cards give them; Inferact "3.56 B", 68 tensors
  const count = async (l: DrafterLayout) => loadDrafter(await drafterDir(l, 'real'));
  assert.equal((await count('radixark')).parameters, 2249289601);
  assert.equal((await count('redhatai')).parameters, 4744900481);
  const inf = await count('inferact');
  assert.equal(Math.round(inf.parameters / 1e7) / 100, 3.56);
  assert.equal(drafterTensorSpecs(inf.config).length, 68);
  assert.equal(inf.neverReadBytes, 163840 * 7168 * 2);
  assert.equal(inf.readBytes, (inf.parameters - 163840 * 7168) * 2);
  const k3 = loadConfig(K3_CONFIG);
  for (const l of DRAFTER_LAYOUTS) checkDrafterTarget((await count(l)).config, k3, K3_CONFIG);
});

test('refusals: one line naming the file and the field', () => {
  const cases: [DrafterLayout, (j: Record<string, unknown>) => void, RegExp][] = [
    ['inferact', (j) => (j.foo = 1), /config\.json: unknown field foo/],
    ['inferact', (j) => (j.aux_hidden_stream = 'mixture'), /aux_hidden_stream "mixture"/],
    ['inferact', (j) => (j.mla_use_output_gate = true), /mla_use_output_gate/],
    ['inferact', (j) => delete j.block_size, /missing required field block_size/],
    ['inferact', (j) => (j.target_layer_ids = [23, 2, 47, 71, 89]), /distinct and ascending/],
    ['inferact', (j) => (j.num_target_layers = 4), /num_target_layers = 4/],
    ['inferact', (j) => (j.markov_head_type = 'gated'), /markov_head_type "gated"/],
    ['inferact', (j) => (j.rope_scaling = { rope_type: 'yarn' }), /rope_parameters and rope_scaling/],
    ['inferact', (j) => (j.target_layer_ids = [2, 23, 47, 71, 93]), /past the 93-layer target/],
    ['radixark', (j) => ((j.dflash_config as Record<string, unknown>).mask_token_id = 5, j.mask_token_id = 163837), /field mask_token_id = 163837 disagrees with dflash_config\.mask_token_id = 5/],
    ['radixark', (j) => ((j.dflash_config as Record<string, unknown>).slot_shift = 1), /unknown field dflash_config\.slot_shift/],
    ['radixark', (j) => (j.model_type = 'llama'), /model_type "llama"/],
    ['redhatai', (j) => (j.aux_hidden_state_layer_ids = [0, 24]), /aux_hidden_state_layer_ids holds 0/],
    ['redhatai', (j) => (j.draft_vocab_size = 32000), /draft_vocab_size = 32000/],
    ['redhatai', (j) => ((j.transformer_layer_config as Record<string, unknown>).layer_types = ['chunked_attention', 'x', 'x', 'x', 'x']), /field transformer_layer_config\.layer_types holds "chunked_attention"/],
    ['redhatai', (j) => (j.speculators_model_type = 'eagle3'), /speculators_model_type "eagle3"/],
  ];
  for (const [layout, edit, re] of cases) refusal(() => loadDrafter(editedConfig(layout, edit)), re);
  const k3 = loadConfig(K3_CONFIG);
  refusal(() => checkDrafterTarget(parseDrafterConfig(drafterConfigJson('radixark', 'tiny'), 'x/config.json'), k3, K3_CONFIG), /target_hidden_size 64 is not the target's hidden_size 7168/);
});

test('refusals: tensors missing, unexpected, misshapen or not BF16', async () => {
  const cfg = parseDrafterConfig(drafterConfigJson('radixark', 'tiny'), 'c');
  const specs = drafterTensorSpecs(cfg);
  const write = async (name: string, tensors: { name: string; dtype: 'BF16' | 'F32'; shape: number[] }[]) => {
    const dir = path.join(tmp, name);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(drafterConfigJson('radixark', 'tiny')));
    await writeSafetensors(path.join(dir, 'model.safetensors'), tensors.map((t) => ({ ...t, data: new Uint8Array(t.shape.reduce((a, b) => a * b, 1) * (t.dtype === 'F32' ? 4 : 2)) })));
    return dir;
  };
  const base = specs.map((s) => ({ name: s.name, dtype: 'BF16' as const, shape: s.shape }));
  refusal(() => loadDrafter(''), /does not exist/);
  const missing = await write('missing', base.filter((t) => t.name !== 'layers.2.mlp.up_proj.weight'));
  refusal(() => loadDrafter(missing), /lacks tensor layers\.2\.mlp\.up_proj\.weight/);
  const extra = await write('extra', [...base, { name: 'layers.0.self_attn.g_proj.weight', dtype: 'BF16', shape: [2, 2] }]);
  refusal(() => loadDrafter(extra), /model\.safetensors: unexpected tensor layers\.0\.self_attn\.g_proj\.weight/);
  const shape = await write('shape', base.map((t) => (t.name === 'fc.weight' ? { ...t, shape: [64, 128] } : t)));
  refusal(() => loadDrafter(shape), /tensor fc\.weight has shape \[64, 128\], expected \[64, 192\]/);
  const dtype = await write('dtype', base.map((t) => (t.name === 'confidence_head.proj.weight' ? { ...t, dtype: 'F32' as const } : t)));
  refusal(() => loadDrafter(dtype), /confidence_head\.proj\.weight is F32, expected BF16/);
});

test('expert union of W positions follows the measured trace points', () => {
  assert.equal(expertUnion(1), 1);
  assert.equal(expertUnion(2), 1.66);
  assert.equal(expertUnion(6), 3.75);
  assert.equal(expertUnion(8), 4.72);
  assert.ok(Math.abs(expertUnion(9) - 5.205) < 1e-9);
});

test('k3 plan --drafter: placement, bytes per emitted token, --json; bad input exits 2 with one line', async () => {
  const b5 = await drafterDir('inferact-block5', 'real');
  const r = k3(['plan', K3_CONFIG, '--memory', '8GB', '--drafter', b5, '--accept-len', '3.31', '--json']);
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout) as { budget_bytes: number; total_bytes: number; items: { bytes: number }[]; drafter: Record<string, number | string> & { sweep: Record<string, number> } };
  const d = j.drafter;
  assert.equal(j.items.reduce((a, i) => a + i.bytes, 0), j.total_bytes);
  assert.ok(j.total_bytes <= j.budget_bytes);
  assert.equal(d.block, 5);
  assert.equal(d.sweep.width, 6);
  assert.equal(d.never_read_bytes, 163840 * 7168 * 2);
  assert.ok(d.placement === 'pinned' || d.placement === 'streamed');
  assert.equal(d.bytes_per_emitted_token, d.sweep.total_bytes / 3.31);
  assert.ok((d.ratio_to_baseline as number) < 1, 'a block of 5 at 3.31 reads less per token than --spec 0');
  // Block5 borrows K3's lm_head: the target plan pins it first, so no sweep reads it twice
  assert.equal(d.sweep.lm_head_again_bytes, 0);
  const human = k3(['plan', K3_CONFIG, '--memory', '32GB', '--drafter', b5, '--accept-len', '3.31']);
  assert.equal(human.status, 0, human.stderr);
  assert.match(human.stdout, /per emitted token at 3\.31/);
  assert.match(human.stdout, /never read .*copy of K3's embedding/);
  const bad = (args: string[], re: RegExp) => {
    const x = k3(['plan', K3_CONFIG, '--no-estimate', ...args]);
    assert.equal(x.status, 2, x.stderr);
    assert.match(x.stderr, re);
    assert.equal(x.stderr.trim().split('\n').length, 1, x.stderr);
  };
  bad(['--drafter', b5, '--accept-len', '7'], /--accept-len 7 is outside 1\.\.6/);
  bad(['--accept-len', '3'], /--accept-len needs --drafter/);
  bad(['--drafter', editedConfig('radixark', (x) => (x.block_size = 'seven'))], /config\.json: field block_size must be a number/);
  bad(['--drafter', await drafterDir('radixark', 'tiny')], /target_hidden_size 64 is not the target's hidden_size 7168/);
});

test('k3 synth --drafter writes a layout the loader reads', () => {
  const out = path.join(tmp, 'cli-redhatai');
  const r = k3(['synth', '--drafter', 'redhatai', '--out', out, '--json']);
  assert.equal(r.status, 0, r.stderr);
  const d = loadDrafter(out);
  assert.equal(d.config.format, 'speculators');
  assert.equal(d.entries!.size, (JSON.parse(r.stdout) as { tensors: number }).tensors);
  const bad = k3(['synth', '--drafter', 'eagle', '--out', out]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--drafter must be one of inferact, inferact-block5, radixark, redhatai/);
});
