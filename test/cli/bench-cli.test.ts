// `k3 bench`: the llama-bench style table as JSON (rows per thread count, kernel rows).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN } from '../helpers.js';

test('k3 bench --json: pp and tg rows for threads 1 and 2, mean ± sd, kernel rows, the machine', () => {
  const r = spawnSync(process.execPath, [CLI, 'bench', path.join(GOLDEN, 'k3'), '-p', '8', '-n', '4', '-r', '2', '--threads-list', '1,2', '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.equal(j.arch, 'k3');
  assert.deepEqual(j.rows.map((x: { test: string; threads: number }) => `${x.test}@${x.threads}`), ['pp8@1', 'tg4@1', 'pp8@2', 'tg4@2']);
  for (const row of j.rows) {
    assert.equal(row.tokens_per_second.runs.length, 2);
    assert.ok(row.tokens_per_second.mean > 0 && row.tokens_per_second.sd >= 0);
  }
  assert.ok(j.kernels.some((k: { kind: string }) => k.kind === 'bf16'));
  assert.ok(j.kernels.some((k: { kind: string }) => k.kind === 'mxfp4'));
  // what the figures were measured on
  assert.ok(typeof j.machine.cpu === 'string' && j.machine.cpu.length > 0 && j.machine.logical_cpus >= 1, JSON.stringify(j.machine));
});

test('k3 bench --profile: a per-token breakdown of the prompt and of decode per thread count, buckets within the token time', () => {
  const r = spawnSync(process.execPath, [CLI, 'bench', path.join(GOLDEN, 'k3'), '-p', '8', '-n', '4', '-r', '1', '--threads-list', '1,2', '--profile', '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.deepEqual(j.profile.map((p: { test: string; threads: number }) => `${p.test} ${p.threads}`), ['pp8 1', 'tg4 1', 'pp8 2', 'tg4 2']);
  for (const p of j.profile) {
    assert.equal(p.tokens, p.test === 'pp8' ? 8 : 4);
    const buckets = ['matmul', 'experts', 'fused', 'dispatch', 'wait', 'js'];
    assert.deepEqual(Object.keys(p.ms).sort(), [...buckets].sort());
    for (const b of buckets) assert.ok(p.ms[b] >= 0, `${b}: ${p.ms[b]}`);
    assert.ok(Math.abs(buckets.reduce((a, b) => a + p.ms[b], 0) - p.ms_per_token) < 1e-6);
    assert.ok(p.ms.matmul > 0 && p.ms.experts > 0 && p.calls_per_token > 0);
  }
  assert.equal(j.profile[0].ms.wait, 0);
});
