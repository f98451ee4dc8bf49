// Never a wrong token in silence: each way a checkpoint, a pack, a state file or a read can go
// wrong ends in one error line and a non-zero exit (4 for bad bytes met while running), never a
// different token with exit 0. Each case damages a copy of a golden checkpoint and runs the CLI.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN } from '../helpers.js';
import { readSafetensorsHeader } from '../../src/checkpoint/safetensors.js';
import { Model } from '../../src/model/model.js';
import { loadState, saveState } from '../../src/generate/state-file.js';
import { UserError } from '../../src/util/errors.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-integrity-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

export function copyGolden(name: string, tag: string): string {
  const dir = path.join(TMP, `${name}-${tag}`);
  fs.mkdirSync(dir);
  for (const f of fs.readdirSync(path.join(GOLDEN, name))) fs.copyFileSync(path.join(GOLDEN, name, f), path.join(dir, f));
  for (const f of fs.readdirSync(dir)) fs.chmodSync(path.join(dir, f), 0o644);
  return dir;
}

function k3(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertOneLine(r: { code: number | null; stdout: string; stderr: string }, code: number, ...mention: string[]): void {
  assert.equal(r.code, code, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('k3: '));
  assert.equal(lines.length, 1, `one error line, got: ${r.stderr}`);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  for (const m of mention) assert.ok(r.stderr.includes(m), `mentions ${m}: ${r.stderr}`);
}

function flipByte(file: string, at: number): void {
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, at);
  b[0]! ^= 0x01;
  fs.writeSync(fd, b, 0, 1, at);
  fs.closeSync(fd);
}

const IDS = ['--ids', '1,2,3', '--gen', '4'];
const clean = new Map<string, string>();
function cleanRun(name: string): string {
  let out = clean.get(name);
  if (out === undefined) {
    const r = k3(['run', path.join(GOLDEN, name), ...IDS]);
    assert.equal(r.code, 0, r.stderr);
    clean.set(name, (out = r.stdout));
  }
  return out;
}

test('a packed record with one flipped byte, and a manifest offset shifted by 4096: one line, exit 4, no token', () => {
  const src = copyGolden('k2-yarn', 'pack');
  const out = path.join(TMP, 'k2-packed');
  assert.equal(k3(['pack', src, out]).code, 0);
  assert.equal(k3(['run', out, ...IDS]).stdout, cleanRun('k2-yarn'), 'the intact pack runs the clean tokens');
  const manifest = path.join(out, 'packed.json');
  const intact = fs.readFileSync(manifest, 'utf8');
  const m = JSON.parse(intact) as { records: { name: string; kind: string; file: string; offset: number; length: number }[] };
  const rec = m.records.find((r) => r.kind === 'layer')!;
  const data = path.join(out, rec.file);
  flipByte(data, rec.offset + (rec.length >> 1));
  for (const extra of [[], ['--verify-reads'], ['--memory', '158M', '--threads', '1', '--no-preload']]) {
    const r = k3(['run', out, ...IDS, ...extra]);
    assertOneLine(r, 4, data, `record ${rec.name}`, 'offset', 'checksum');
    assert.equal(r.stdout.trim(), '', 'no token printed');
  }
  assertOneLine(k3(['verify', out]), 4, rec.name);
  flipByte(data, rec.offset + (rec.length >> 1)); // repaired
  m.records[m.records.indexOf(rec) + 1]!.offset += 4096;
  fs.writeFileSync(manifest, JSON.stringify(m));
  const r = k3(['run', out, ...IDS]);
  assert.notEqual(r.code, 0);
  assertOneLine(r, r.code!);
  assert.equal(r.stdout.trim(), '', 'no token printed');
});

test('a safetensors header length one byte short, or a byte long: one line, exit 2', () => {
  for (const delta of [-1, 1, -8]) {
    const dir = copyGolden('k2-yarn', `hlen${delta}`);
    const f = path.join(dir, 'model.safetensors');
    const b = fs.readFileSync(f);
    b.writeBigUInt64LE(b.readBigUInt64LE(0) + BigInt(delta), 0);
    fs.writeFileSync(f, b);
    assertOneLine(k3(['run', dir, ...IDS]), 2, 'model.safetensors');
    assertOneLine(k3(['info', dir]), 2, 'model.safetensors');
  }
});

test('configs that cannot be right are refused by run and info, naming the field', () => {
  const cases: [string, (c: Record<string, unknown>) => void, string][] = [
    ['eps', (c) => (c.rms_norm_eps = -1e-6), 'rms_norm_eps'],
    ['theta', (c) => (c.rope_theta = 0), 'rope_theta'],
    ['factor', (c) => ((c.rope_scaling as Record<string, unknown>).factor = -4), 'factor'],
    ['mscale', (c) => ((c.rope_scaling as Record<string, unknown>).mscale = -1), 'rope_scaling.mscale'],
    ['beta', (c) => ((c.rope_scaling as Record<string, unknown>).beta_slow = 1e9), 'rope_scaling.beta_slow'],
    // every other rope_scaling field too (issue 44)
    ['mscale-all', (c) => ((c.rope_scaling as Record<string, unknown>).mscale_all_dim = -1), 'rope_scaling.mscale_all_dim'],
    ['beta-fast', (c) => ((c.rope_scaling as Record<string, unknown>).beta_fast = 0), 'rope_scaling.beta_fast'],
    ['beta-order', (c) => Object.assign(c.rope_scaling as object, { beta_fast: 0.5, beta_slow: 1 }), 'rope_scaling.beta_fast'],
    ['orig-pos', (c) => ((c.rope_scaling as Record<string, unknown>).original_max_position_embeddings = 0), 'rope_scaling.original_max_position_embeddings'],
    ['type', (c) => ((c.rope_scaling as Record<string, unknown>).type = 'linear'), 'rope_scaling.type'],
    ['scaling', (c) => (c.routed_scaling_factor = 1e9), 'routed_scaling_factor'],
    ['layers', (c) => (c.num_hidden_layers = 1e9), 'num_hidden_layers'],
    ['fewer', (c) => (c.num_hidden_layers = (c.num_hidden_layers as number) - 1), 'num_hidden_layers'],
    ['groups', (c) => Object.assign(c, { n_group: c.n_routed_experts, topk_group: 1 }), 'top-k'],
  ];
  for (const [tag, edit, field] of cases) {
    const dir = copyGolden('k2-yarn', `cfg-${tag}`);
    const file = path.join(dir, 'config.json');
    const c = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
    edit(c);
    fs.writeFileSync(file, JSON.stringify(c));
    assertOneLine(k3(['run', dir, ...IDS]), 2, field);
    assertOneLine(k3(['info', dir]), 2, field);
  }
});

test('k3 info refuses what k3 run refuses: a tensor of the wrong shape', () => {
  const dir = copyGolden('kimi-linear', 'shape');
  const f = path.join(dir, 'model.safetensors');
  const b = fs.readFileSync(f);
  const n = Number(b.readBigUInt64LE(0));
  const h = JSON.parse(b.subarray(8, 8 + n).toString('utf8')) as Record<string, { shape: number[] }>;
  const name = Object.keys(h).find((k) => k.startsWith('model.layers.1.') && h[k]!.shape.length === 2 && h[k]!.shape[0] !== h[k]!.shape[1])!;
  h[name]!.shape = [h[name]!.shape[1]!, h[name]!.shape[0]!];
  let js = JSON.stringify(h);
  js += ' '.repeat((8 - (js.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(js.length));
  fs.writeFileSync(f, Buffer.concat([len, Buffer.from(js), b.subarray(8 + n)]));
  const run = k3(['run', dir, ...IDS]);
  assertOneLine(run, 2, name);
  assertOneLine(k3(['info', dir]), 2, name);
});

/** Overwrite every element of a small tensor with NaN (its dtype's quiet NaN). */
function poison(dir: string, file: string, name: string): void {
  const e = readSafetensorsHeader(path.join(dir, file)).find((x) => x.name === name)!;
  const nan = e.dtype === 'F32' ? Buffer.from([0, 0, 0xc0, 0x7f]) : Buffer.from([0xc0, 0x7f]);
  const bytes = Buffer.alloc(e.nbytes);
  for (let i = 0; i < e.nbytes; i += nan.length) nan.copy(bytes, i);
  const fd = fs.openSync(e.file, 'r+');
  fs.writeSync(fd, bytes, 0, bytes.length, e.offset);
  fs.closeSync(fd);
}

test('NaN in the weights stops the run with exit 4 naming the layer; --allow-nonfinite computes on', () => {
  const dir = copyGolden('k2-yarn', 'nan');
  poison(dir, 'model.safetensors', 'model.layers.2.post_attention_layernorm.weight');
  const r = k3(['run', dir, ...IDS]);
  assertOneLine(r, 4, 'layer 2', 'non-finite');
  assert.equal(r.stdout.trim(), '', 'no token printed');
  const r2 = k3(['run', dir, ...IDS, '--allow-nonfinite']);
  assert.equal(r2.code, 0, r2.stderr);
});

test('k3 verify records per-tensor checksums once, checks them after; runs then catch a flipped byte (exit 4)', () => {
  const dir = copyGolden('k2-yarn', 'verify');
  const first = k3(['verify', dir]);
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, /recorded checksums of \d+ tensors/);
  assert.match(k3(['verify', dir]).stdout, /tensors match/);
  assert.equal(k3(['run', dir, ...IDS, '--verify-reads']).stdout, cleanRun('k2-yarn'), 'same tokens with --verify-reads');
  const e = readSafetensorsHeader(path.join(dir, 'model.safetensors')).find((x) => x.name === 'model.layers.1.mlp.experts.3.up_proj.weight')!;
  flipByte(e.file, e.offset + 10);
  assertOneLine(k3(['verify', dir]), 4, e.name, 'offset');
  const r = k3(['run', dir, ...IDS]);
  assertOneLine(r, 4, e.file, e.name, 'offset');
  assert.equal(r.stdout.trim(), '');
});

test('state files: a flipped byte, a NaN with a valid checksum, a cut file are refused, naming the file', async () => {
  const model = Model.open(path.join(GOLDEN, 'kimi-linear'));
  try {
    const st = model.newState();
    await model.forward(st, [5, 6, 7], 'none');
    const good = path.join(TMP, 'good.k3s');
    saveState(good, model, st);
    assert.deepEqual(loadState(good, model).state.tokens, [5, 6, 7]);
    const bytes = fs.readFileSync(good);
    const flipped = path.join(TMP, 'flipped.k3s');
    const fb = Buffer.from(bytes);
    fb[fb.length - 100]! ^= 0x20;
    fs.writeFileSync(flipped, fb);
    assert.throws(() => loadState(flipped, model), (e: unknown) => e instanceof UserError && e.message.includes(flipped) && /checksum/.test(e.message));
    // A NaN in the arrays, with a checksum that matches: a state no forward pass produces.
    const kda = st.kda.find((k) => k)!;
    kda.S[3] = NaN;
    const nan = path.join(TMP, 'nan.k3s');
    saveState(nan, model, st);
    assert.throws(() => loadState(nan, model), (e: unknown) => e instanceof UserError && e.message.includes(nan) && /NaN/.test(e.message));
  } finally {
    await model.close();
  }
});

test('injected read faults on trunk, experts, embedding rows and small tensors: exit 4 or the clean bytes', () => {
  const dir = copyGolden('k3', 'faults');
  assert.equal(k3(['verify', dir]).code, 0);
  const want = cleanRun('k3');
  // Every target gets a failing read, a read that must be continued or retried, and a flipped
  // bit (caught by --verify-reads: a later read of checked bytes); kinds alternate across targets.
  let n = 0;
  for (const target of ['trunk', 'expert', 'embed', 'small']) {
    const odd = n % 2 === 1;
    for (const kind of [odd ? 'eof' : 'eio', odd ? 'eintr' : 'short', 'flip']) {
      const at = (n++ * 7) % 3; // different points of the run
      const r = k3(['run', dir, ...IDS, '--memory', '148M', '--threads', '1', ...(kind === 'flip' ? ['--verify-reads'] : [])], { K3_FAULT: `${kind}:${target}:${at}` });
      if (kind === 'short' || kind === 'eintr') {
        assert.equal(r.code, 0, `${kind}:${target}: ${r.stderr}`);
        assert.equal(r.stdout, want, `${kind}:${target}: the clean tokens`);
      } else {
        assertOneLine(r, 4, kind === 'flip' ? 'checksum' : 'offset');
      }
    }
  }
});
