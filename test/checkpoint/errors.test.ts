// Bad input gets one clear line naming the file and the problem, exit code 2 (1 for I/O), and no
// stack trace. Each case damages a copy of a golden checkpoint and runs the real CLI.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN, GOLDEN_TOL } from '../helpers.js';

// Every damaged copy goes in one temporary folder, removed when the test process ends.
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-err-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

function copyCase(name: string): string {
  const dir = fs.mkdtempSync(path.join(TMP, `${name}-`));
  for (const f of fs.readdirSync(path.join(GOLDEN, name))) fs.copyFileSync(path.join(GOLDEN, name, f), path.join(dir, f));
  for (const f of fs.readdirSync(dir)) fs.chmodSync(path.join(dir, f), 0o644);
  return dir;
}

function k3(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertUserError(r: { code: number | null; stderr: string }, code: number, ...mustMention: string[]): void {
  assert.equal(r.code, code, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, `one line, got: ${r.stderr}`);
  assert.match(lines[0]!, /^k3: /);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  for (const m of mustMention) assert.ok(r.stderr.includes(m), `message mentions ${m}: ${r.stderr}`);
}

/** Rewrite a safetensors file with an edited header (data bytes unchanged). */
function editHeader(file: string, edit: (h: Record<string, { data_offsets: [number, number] }>) => void): void {
  const b = fs.readFileSync(file);
  const n = Number(b.readBigUInt64LE(0));
  const h = JSON.parse(b.subarray(8, 8 + n).toString('utf8'));
  edit(h);
  let js = JSON.stringify(h);
  js += ' '.repeat((8 - (js.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(js.length));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(js), b.subarray(8 + n)]));
}

test('a truncated shard is refused at load, naming the shard and a tensor', () => {
  const dir = copyCase('k2-thinking-int4');
  const shard = path.join(dir, 'model-00002-of-00003.safetensors');
  fs.truncateSync(shard, fs.statSync(shard).size - 1000);
  assertUserError(k3('run', dir, '--ids', '1,2,3', '--gen', '2'), 2, 'model-00002-of-00003.safetensors', 'truncated');
});

test('a header whose offsets overrun the file is refused', () => {
  const dir = copyCase('k2-yarn');
  const file = path.join(dir, 'model.safetensors');
  editHeader(file, (h) => {
    const e = h['model.norm.weight']!;
    e.data_offsets = [e.data_offsets[0] + 10_000_000, e.data_offsets[1] + 10_000_000];
  });
  assertUserError(k3('logits', dir, '--ids', '1,2', '--out', path.join(dir, 'x.npy')), 2, 'model.safetensors', 'model.norm.weight', 'overrun');
  assert.ok(!fs.existsSync(path.join(dir, 'x.npy')), 'nothing written');
});

/** Rewrite a safetensors file without tensor `name` (its bytes cut out, later offsets moved down). */
function dropTensor(file: string, name: string): void {
  const b = fs.readFileSync(file);
  const n = Number(b.readBigUInt64LE(0));
  const h = JSON.parse(b.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
  const [s0, s1] = h[name]!.data_offsets;
  delete h[name];
  for (const [k, e] of Object.entries(h)) if (k !== '__metadata__' && e.data_offsets[0] >= s1) e.data_offsets = [e.data_offsets[0] - (s1 - s0), e.data_offsets[1] - (s1 - s0)];
  let js = JSON.stringify(h);
  js += ' '.repeat((8 - (js.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(js.length));
  const data = b.subarray(8 + n);
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(js), data.subarray(0, s0), data.subarray(s1)]));
}

test('a missing tensor is named', () => {
  const dir = copyCase('kimi-linear');
  dropTensor(path.join(dir, 'model.safetensors'), 'model.layers.2.self_attn.v_proj.weight');
  assertUserError(k3('run', dir, '--ids', '1,2,3', '--gen', '1'), 2, 'model.layers.2.self_attn.v_proj.weight', 'missing');
});

test('a config missing num_experts names the field', () => {
  const dir = copyCase('kimi-linear');
  const cfgFile = path.join(dir, 'config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8'));
  delete cfg.num_experts;
  fs.writeFileSync(cfgFile, JSON.stringify(cfg));
  assertUserError(k3('info', dir), 2, 'config.json', 'num_experts');
});

test('a K3 config missing text_config.num_experts names the nested field', () => {
  const dir = copyCase('k3');
  const cfgFile = path.join(dir, 'config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8'));
  delete cfg.text_config.num_experts;
  fs.writeFileSync(cfgFile, JSON.stringify(cfg));
  assertUserError(k3('run', dir, '--ids', '1', '--gen', '1'), 2, 'text_config.num_experts');
});

test('a token id >= vocab is refused', () => {
  assertUserError(k3('run', path.join(GOLDEN, 'k3'), '--ids', '1,512', '--gen', '1'), 2, '512', 'vocabulary');
});

test('usage mistakes: unknown command, unknown flag, missing model, bad ids', () => {
  assertUserError(k3('frobnicate'), 2, 'frobnicate');
  assertUserError(k3('run', path.join(GOLDEN, 'k3'), '--idz', '1'), 2, 'idz');
  assertUserError(k3('run', '/nonexistent/model', '--ids', '1'), 2, '/nonexistent/model');
  assertUserError(k3('logits', path.join(GOLDEN, 'k3'), '--ids', '1,x', '--out', '/tmp/none.npy'), 2, 'x');
});

test(`k3 logits writes a float32 .npy [T, vocab] equal to the golden logits within ${GOLDEN_TOL}`, async () => {
  const out = path.join(fs.mkdtempSync(path.join(TMP, 'logits-')), 'l.npy');
  const tokens = JSON.parse(fs.readFileSync(path.join(GOLDEN, 'k3', 'tokens.json'), 'utf8')).short as number[];
  const r = k3('logits', path.join(GOLDEN, 'k3'), '--ids', tokens.join(','), '--out', out);
  assert.equal(r.code, 0, r.stderr);
  const { readNpyF32 } = await import('../../src/util/npy.js');
  const got = readNpyF32(out);
  const gold = readNpyF32(path.join(GOLDEN, 'k3', 'logits-short.npy'));
  assert.deepEqual(got.shape, gold.shape);
  let m = 0;
  for (let i = 0; i < got.data.length; i++) m = Math.max(m, Math.abs(got.data[i]! - gold.data[i]!));
  assert.ok(m < GOLDEN_TOL, `max diff ${m} >= ${GOLDEN_TOL}`);
});

test('k3 run --json reports ids and timings; k3 info --json reports the layer map', () => {
  const r = k3('run', path.join(GOLDEN, 'kimi-linear'), '--ids', '1,2,3', '--gen', '4', '--json');
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.deepEqual(j.prompt_ids, [1, 2, 3]);
  assert.equal(j.generated_ids.length, 4);
  assert.ok(j.seconds_per_token > 0);
  const i = JSON.parse(k3('info', path.join(GOLDEN, 'kimi-linear'), '--json').stdout);
  assert.deepEqual(i.mla_layers, [3, 7]);
  assert.equal(i.layer_map[0], 'KDA+dense');
});
