// SIGKILL (no handler runs) during `k3 pack`, `k3 verify` and a chat's /save: afterwards nothing
// half-written looks complete (the output is absent, or complete and correct), and a re-run
// succeeds. Kills land at different points: as soon as a temporary output appears, and after
// fixed delays.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { CLI } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { loadState } from '../../src/generate/state-file.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-sigkill-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

function k3(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Start `k3 args`, SIGKILL it when `when()` first holds or after `ms`, whichever is first; resolves when it has exited. */
function killDuring(args: string[], ms: number, when: () => boolean = () => false, stdin?: string): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'ignore', 'ignore'] });
    if (stdin !== undefined) child.stdin.end(stdin);
    const t0 = performance.now();
    const poll = setInterval(() => {
      if (when() || performance.now() - t0 >= ms) child.kill('SIGKILL');
    }, 1);
    child.on('exit', () => {
      clearInterval(poll);
      resolve();
    });
  });
}

const IDS = ['--ids', '1,2,3', '--gen', '3'];

test('SIGKILL during k3 pack: OUT absent or complete; a re-run packs it', async () => {
  const src = path.join(TMP, 'demo');
  assert.equal(k3('synth', '--arch', 'k3', '--preset', 'demo', '--out', src).code, 0);
  const want = k3('run', src, ...IDS);
  assert.equal(want.code, 0, want.stderr);
  const tmpAppeared = (out: string) => () => fs.readdirSync(TMP).some((f) => f.startsWith(`${path.basename(out)}.tmp-`));
  for (const [i, ms] of [0, 0, 60, 120, 200].entries()) {
    const out = path.join(TMP, `pk${i}`);
    await killDuring(['pack', src, out], ms || 10_000, ms === 0 ? tmpAppeared(out) : undefined);
    if (fs.existsSync(out)) assert.equal(k3('run', out, ...IDS).stdout, want.stdout, 'an OUT that exists is complete');
    const again = k3('pack', src, out);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(k3('run', out, ...IDS).stdout, want.stdout, `re-run ${i} packs it`);
  }
});

test('SIGKILL during k3 verify: no sidecar, or a complete one; a re-run records and checks it', async () => {
  const src = path.join(TMP, 'demo-v');
  assert.equal(k3('synth', '--arch', 'k3', '--preset', 'demo', '--out', src).code, 0);
  for (const ms of [40, 80, 120, 160, 240]) {
    const sidecar = path.join(src, 'k3-checksums.json');
    fs.rmSync(sidecar, { force: true });
    await killDuring(['verify', src], ms);
    if (fs.existsSync(sidecar)) assert.equal(k3('verify', src).code, 0, 'a sidecar that exists is complete and right');
    const r = k3('verify', src);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(k3('verify', src).code, 0);
    assert.deepEqual(fs.readdirSync(src).filter((f) => f.includes('.tmp-')), [], 'stale temporaries removed');
  }
});

test('SIGKILL during /save: the state file absent, or complete and loadable', async () => {
  const dir = path.join(TMP, 'demo-chat');
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
  const model = Model.open(dir, { ctx: 512 });
  try {
    for (const ms of [200, 350, 500, 700, 1000]) {
      const file = path.join(TMP, `s${ms}.k3s`);
      // One turn, then /save: the kill lands before, during or after the write.
      await killDuring(['chat', dir, '--ctx', '512', '--max-tokens', '4'], ms, () => false, `hello\n/save ${file}\n`);
      if (fs.existsSync(file)) assert.ok(loadState(file, model).state.tokens.length > 0, 'a state file that exists is complete');
    }
    const file = path.join(TMP, 'after.k3s');
    const r = spawnSync(process.execPath, [CLI, 'chat', dir, '--ctx', '512', '--max-tokens', '4'], { input: `hello\n/save ${file}\n`, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(loadState(file, model).state.tokens.length > 0, 'a re-run saves');
  } finally {
    await model.close();
  }
});
