// `k3 serve`'s API key (issue 44): an empty key is refused at start (one line, exit 2; no request
// could pass it); with a key, /metrics needs it too unless --metrics-open.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { CLI } from '../helpers.js';
import { startServe } from '../serve-helpers.js';

test('an empty --api-key or K3_API_KEY is refused at start: one line, exit 2', () => {
  for (const [args, env, name] of [[['--api-key', ''], {}, '--api-key'], [[], { K3_API_KEY: '' }, 'K3_API_KEY']] as const) {
    const r = spawnSync(process.execPath, [CLI, 'serve', 'no-such-model', '--port', '0', ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 20_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`${name} is empty: no request could pass it`));
  }
});

test('--metrics-open: /metrics answers without the key; /v1/ still needs it', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'k3-serve-key-'));
  const dir = join(tmp, 'demo-k3');
  try {
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
    const srv = await startServe(dir, ['--api-key', 'k', '--metrics-open']);
    try {
      const m = await fetch(`${srv.url}/metrics`);
      assert.equal(m.status, 200);
      assert.match(await m.text(), /^k3_uptime_seconds /m);
      assert.equal((await fetch(`${srv.url}/v1/models`)).status, 401);
      assert.equal((await fetch(`${srv.url}/v1/models`, { headers: { authorization: 'Bearer k' } })).status, 200);
    } finally {
      assert.equal(await srv.stop(), 0, srv.stderr());
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
