// `--kimi-linear-biased-weights` (ARCHITECTURE.md §3.6: the Kimi Linear HF remote code gathers the
// routing weights from the biased scores s + b; the default, as vLLM, from the unbiased s).
// shared/golden has no reference logits for the biased variant, so: the router's weights on the
// golden's own correction biases against the formula written plainly here (float64), and whole
// forward passes through the CLI flag: it runs, is deterministic (same bytes twice), changes the
// Kimi Linear logits away from the (unbiased) reference, and is a no-op for K3.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN, GOLDEN_TOL, fixture, readTensorBytes, xorshift } from '../helpers.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { loadConfig } from '../../src/checkpoint/config.js';
import { route } from '../../src/model/router.js';
import { decodeNpyF32, readNpyF32 } from '../../src/util/npy.js';
import { Model } from '../../src/model/model.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-biased-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));
const KL = path.join(GOLDEN, 'kimi-linear');

function biases(dir: string): Float32Array[] {
  const out: Float32Array[] = [];
  for (const [name, e] of indexCheckpointDir(dir)) {
    if (!name.endsWith('.e_score_correction_bias')) continue;
    assert.equal(e.dtype, 'F32', name);
    const b = readTensorBytes(e);
    out.push(new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)));
  }
  return out;
}

test('router with the golden Kimi Linear biases: weights from s + b (switch on) or s (off), as the plain formula', () => {
  const cfg = loadConfig(KL, { kimiLinearBiasedWeights: true }).moe;
  assert.equal(cfg.biasedWeights, true);
  const E = cfg.experts, K = cfg.topK, T = 16;
  const bs = biases(KL);
  assert.equal(bs.length, 7, 'one correction bias per MoE layer (layers 2..8)');
  assert.ok(bs.some((b) => b.some((v) => v !== 0)), 'nonzero biases: the switch must matter');
  const rnd = xorshift(0x1234567);
  for (const bias of bs) {
    const logits = new Float32Array(T * E).map(() => 4 * (rnd() - 0.5));
    for (const biased of [true, false]) {
      const r = route({ ...cfg, biasedWeights: biased }, logits, bias, T);
      for (let t = 0; t < T; t++) {
        const s = Array.from({ length: E }, (_, e) => 1 / (1 + Math.exp(-logits[t * E + e]!)));
        const c = s.map((v, e) => v + bias[e]!);
        // top-k of c (one group), descending, ties to the lower index
        const sel = [...c.keys()].sort((a, b) => c[b]! - c[a]! || a - b).slice(0, K);
        assert.deepEqual(Array.from(r.ids[t]!), sel, `t ${t} selection`);
        const w = sel.map((e) => (biased ? c[e]! : s[e]!));
        const sum = w.reduce((a, v) => a + v, 0);
        for (let j = 0; j < K; j++) {
          const want = (cfg.renormalize ? w[j]! / sum : w[j]!) * cfg.scaling;
          assert.ok(Math.abs(r.weights[t]![j]! - want) <= 1e-6 * Math.abs(want), `biased ${biased} t ${t} slot ${j}: ${r.weights[t]![j]} vs ${want}`);
        }
      }
    }
  }
});

function logits(dir: string, ids: number[], tag: string, ...flags: string[]): Buffer {
  const out = path.join(TMP, `${tag}.npy`);
  const r = spawnSync(process.execPath, [fixture(CLI), 'logits', dir, '--ids', ids.join(','), '--out', out, ...flags], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return fs.readFileSync(out);
}

const f32 = (b: Buffer) => decodeNpyF32(b).data;

function maxDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

test('k3 logits --kimi-linear-biased-weights: runs, same bytes twice, moves Kimi Linear off the unbiased reference, no-op on K3', async () => {
  const ids = JSON.parse(fs.readFileSync(fixture(KL, 'tokens.json'), 'utf8')).short as number[];
  const off = logits(KL, ids, 'off');
  const on1 = logits(KL, ids, 'on1', '--kimi-linear-biased-weights');
  const on2 = logits(KL, ids, 'on2', '--kimi-linear-biased-weights');
  assert.ok(on1.equals(on2), 'deterministic: the same bytes twice');
  const gold = readNpyF32(fixture(KL, 'logits-short.npy')).data;
  const dOff = maxDiff(f32(off), gold), dOn = maxDiff(f32(on1), gold);
  console.log(`kimi-linear short: max |dlogit| vs the unbiased reference: switch off ${dOff.toExponential(3)}, on ${dOn.toExponential(3)}`);
  assert.ok(dOff < GOLDEN_TOL, `switch off: ${dOff} >= ${GOLDEN_TOL}`);
  assert.ok(dOn > 10 * GOLDEN_TOL, `switch on should change the logits measurably, max |diff| ${dOn}`);
  // The flag is the config override of the library API.
  const m = Model.open(KL, { overrides: { kimiLinearBiasedWeights: true } });
  const api = await m.forward(m.newState(), ids, 'all');
  await m.close();
  assert.ok(Buffer.from(api.buffer, api.byteOffset, api.byteLength).equals(Buffer.from(f32(on1).buffer)), 'CLI flag == Model.open override');
  // K3 routes with the unbiased scores whatever the switch says (it is Kimi Linear only).
  const k3 = path.join(GOLDEN, 'k3');
  const k3ids = ids.slice(0, 8);
  assert.ok(logits(k3, k3ids, 'k3off').equals(logits(k3, k3ids, 'k3on', '--kimi-linear-biased-weights')), 'K3 unchanged by the switch');
});
