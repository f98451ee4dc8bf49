// Property-based fuzzing through the real CLI (a few dozen processes; fast-check, fixed seeds):
// flags that must not change the output, bytes flipped in a packed trunk, packed manifests
// edited. Every case ends in the clean run's bytes with exit 0, or in one error line with exit
// 1, 2 or 4: never a stack trace, a hang, or different tokens with exit 0.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fc from 'fast-check';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN } from '../helpers.js';
import { Tally, jsonMutation, runs, seed } from '../fuzz.js';
import { manifestDigest, type PackManifest } from '../../src/checkpoint/packed.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-fuzz-cli-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

// One compute thread unless a case says otherwise (the output does not depend on it; starting is faster).
const IDS = ['--ids', '1,2,3', '--gen', '4', '--threads', '1'];

function k3(args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The property of every CLI case: the clean bytes with exit 0, or one error line with exit 1, 2 or 4. */
function cleanOrOneLine(r: { code: number | null; stdout: string; stderr: string }, clean: string, tally: Tally, what: string): void {
  assert.doesNotMatch(r.stderr, /\n\s+at |internal error/, `no stack trace (${what}): ${r.stderr}`);
  if (r.code === 0) {
    assert.equal(r.stdout, clean, `exit 0 means the clean tokens (${what})`);
    return tally.add('clean');
  }
  assert.ok(r.code === 1 || r.code === 2 || r.code === 4, `exit code ${r.code} (${what}): ${r.stderr}`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('k3: '));
  assert.equal(lines.length, 1, `one error line (${what}): ${r.stderr}`);
  tally.add(`exit ${r.code}`);
}

test('fuzz CLI: flags that must not change the output', () => {
  const dir = path.join(GOLDEN, 'k3');
  const clean = k3(['run', dir, ...IDS]);
  assert.equal(clean.code, 0, clean.stderr);
  const junk = fc.oneof(fc.constantFrom('', '-1', 'x', '1e9', '0', '99999999999999999999'), fc.string({ maxLength: 6 }));
  const flag = fc.oneof(
    fc.constantFrom('139M', '200M', '1G', '2G', '150000000').map((v) => ['--memory', v]),
    fc.constantFrom('laptop', 'max', 'auto', 'nope').map((v) => ['--preset', v]),
    fc.integer({ min: 1, max: 3 }).map((v) => ['--threads', String(v)]),
    fc.integer({ min: 1, max: 70 }).map((v) => ['--chunk', String(v)]),
    fc.integer({ min: 1, max: 4096 }).map((v) => ['--ctx', String(v)]),
    fc.constantFrom('wasm', 'ref', 'simd').map((v) => ['--kernels', v]),
    fc.constantFrom(['--no-preload'], ['--verify-reads'], ['--allow-nonfinite'], ['--json-nope']),
    fc.tuple(fc.constantFrom('--memory', '--threads', '--chunk', '--ctx', '--kernels', '--mla-latent-eps'), junk).map(([f, v]) => [f, v]),
  );
  const tally = new Tally();
  fc.assert(
    fc.property(fc.array(flag, { maxLength: 4 }), (flags) => {
      const args = flags.flat();
      cleanOrOneLine(k3(['run', dir, ...IDS, ...args]), clean.stdout, tally, args.join(' '));
    }),
    { seed: seed(2001), numRuns: runs(20, 5), includeErrorInReport: true },
  );
  console.log(`CLI flags (spawned): ${tally}`);
});

test('fuzz CLI: bytes flipped in a packed trunk, and edited manifests', () => {
  const out = path.join(TMP, 'pk');
  assert.equal(k3(['pack', path.join(GOLDEN, 'k2-yarn'), out]).code, 0);
  const clean = k3(['run', out, ...IDS]);
  assert.equal(clean.code, 0, clean.stderr);
  const trunk = path.join(out, 'trunk-00001.bin');
  const size = fs.statSync(trunk).size;
  const tally = new Tally();
  fc.assert(
    fc.property(fc.nat(size - 1), fc.integer({ min: 1, max: 255 }), (at, x) => {
      const fd = fs.openSync(trunk, 'r+');
      const b = Buffer.alloc(1);
      fs.readSync(fd, b, 0, 1, at);
      const was = b[0]!;
      b[0] = was ^ x;
      fs.writeSync(fd, b, 0, 1, at);
      try {
        cleanOrOneLine(k3(['run', out, ...IDS]), clean.stdout, tally, `byte ${at} ^ ${x}`);
      } finally {
        b[0] = was;
        fs.writeSync(fd, b, 0, 1, at);
        fs.closeSync(fd);
      }
    }),
    { seed: seed(2002), numRuns: runs(10, 5), includeErrorInReport: true },
  );
  console.log(`packed trunk byte flips (spawned): ${tally}`);
  const manifest = path.join(out, 'packed.json');
  const intact = fs.readFileSync(manifest, 'utf8');
  const m = JSON.parse(intact) as Record<string, unknown>;
  const head = { ...m, tensors: Object.fromEntries(Object.entries(m.tensors as object).slice(0, 4)), experts: null };
  const tally2 = new Tally();
  fc.assert(
    fc.property(jsonMutation(head), (edited) => {
      const e = edited as Record<string, unknown>;
      const doc = { ...m, ...e, tensors: { ...(m.tensors as object), ...(e.tensors as object) }, experts: m.experts };
      fs.writeFileSync(manifest, JSON.stringify({ ...doc, manifest_sha256: manifestDigest(doc as unknown as PackManifest) })); // past the digest check
      cleanOrOneLine(k3(['run', out, ...IDS]), clean.stdout, tally2, 'edited manifest');
    }),
    { seed: seed(2003), numRuns: runs(10, 5), includeErrorInReport: true },
  );
  fs.writeFileSync(manifest, intact);
  console.log(`packed manifests (spawned): ${tally2}`);
});
