// A weight read that fails mid-request (injected: FaultyReader, at the floor budget so every
// forward pass streams): the request is answered 500 in OpenAI's error shape and the server stays
// up (/health answers; the engine loop has no sequence left). After it, the store, the ring and
// the engine serve the next request with the bytes of a fresh server, and SIGTERM stops it
// (issue 44: a failed trunk read used to stay in the ring, never loaded and never evictable, so
// every later pass waited on it for good).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../../src/api/index.js';
import { Model } from '../../src/model/model.js';
import { startServer } from '../../src/server/server.js';
import { FaultyReader, parseFaultSpec } from '../../src/store/fault.js';
import { ReadError } from '../../src/util/errors.js';
import { FsReader } from '../../src/store/store.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { CLI } from '../helpers.js';
import { post, startServe } from '../serve-helpers.js';

test('a read fault mid-request is a 500 in the OpenAI shape; the server stays up', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'k3-serve-fault-'));
  const dir = join(tmp, 'demo-k3');
  try {
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
    const memory = Model.plan(dir, { budget: 0, ctx: 256, parallel: 4 }).floorBytes; // loadModel's default parallel
    // reads at load, counted on a clean reader; the faulty one fails from the first read after
    const counter = new FaultyReader(new FsReader(), Number.MAX_SAFE_INTEGER);
    await (await loadModel(dir, { memory, ctx: 256, threads: 1, reader: counter })).close();
    const kimi = await loadModel(dir, { memory, ctx: 256, threads: 1, reader: new FaultyReader(new FsReader(), counter.reads) });
    const srv = await startServer(kimi, { port: 0, name: 'demo-k3', maxContext: 256 });
    try {
      const r = await post(`${srv.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
      assert.equal(r.status, 500, JSON.stringify(r.json));
      assert.equal(r.json.error.type, 'server_error');
      assert.match(r.json.error.message, /injected fault/);
      assert.equal((await fetch(`${srv.url}/health`)).status, 200);
      assert.equal(kimi.engine.stats.active, 0);
    } finally {
      await srv.close();
      await kimi.close();
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('after a trunk EIO mid-generation the next request gets a fresh server\'s bytes; SIGTERM stops it', { timeout: 60_000 }, async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'k3-serve-fault-'));
  const dir = join(tmp, 'demo-k3');
  try {
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
    // (the plan counts threads and bounce buffers: -t 1 as startServe, --io buffered as both servers)
    const plan = spawnSync(process.execPath, [CLI, 'plan', dir, '--ctx', '512', '--parallel', '4', '-t', '1', '--io', 'buffered', '--memory', '1M', '--no-estimate', '--json'], { encoding: 'utf8' });
    const floor = String(JSON.parse(plan.stdout).floor_bytes as number);
    // Every pass streams the whole trunk (~120 reads of it): read 400 comes in the 4th
    // pass, while the request below is generating.
    const flags = ['--memory', floor, '--parallel', '4', '--io', 'buffered'];
    const [faulty, fresh] = await Promise.all([startServe(dir, flags, { K3_FAULT: 'eio:trunk:400' }), startServe(dir, flags)]);
    try {
      const body = { prompt: [5, 6, 7], max_tokens: 6, temperature: 0, logprobs: 2 };
      // bounded: before the fix the server answered nothing after the fault
      const signal = AbortSignal.timeout(30_000);
      const broken = await fetch(`${faulty.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }), signal });
      const text = await broken.text();
      assert.match(text, /^data: /, 'tokens came before the fault');
      assert.doesNotMatch(text, /\[DONE\]/, 'the stream ends at the fault');
      const want = await post(`${fresh.url}/v1/completions`, body);
      assert.equal(want.status, 200);
      for (let i = 0; i < 2; i++) {
        const got = await post(`${faulty.url}/v1/completions`, body, {}, signal);
        assert.equal(got.status, 200, JSON.stringify(got.json));
        assert.deepEqual(got.json.choices, want.json.choices);
      }
      assert.equal((await fetch(`${faulty.url}/health`, { signal })).status, 200);
      const t0 = performance.now();
      assert.equal(await faulty.stop(), 0, faulty.stderr());
      const s = (performance.now() - t0) / 1000;
      assert.ok(s < 5, `stopped after ${s.toFixed(1)} s`);
      assert.doesNotMatch(faulty.stderr(), /without waiting/);
    } finally {
      for (const s of [faulty, fresh]) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('a failed read of any kind fails only its request: the next ones get a fresh model\'s bytes', { timeout: 120_000 }, async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'k3-serve-fault-'));
  const dir = join(tmp, 'demo-k3');
  try {
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
    const memory = Model.plan(dir, { budget: 0, ctx: 256, parallel: 4 }).floorBytes;
    const prompt = [5, 6, 7, 8];
    const run = async (kimi: Awaited<ReturnType<typeof loadModel>>) => {
      const events: unknown[] = [];
      const g = kimi.generate(prompt, { maxTokens: 5, logprobs: 2 });
      for await (const e of g) events.push(e);
      return { ids: (await g.result).ids, events };
    };
    const clean = await loadModel(dir, { memory, ctx: 256, threads: 1 });
    const want = await run(clean);
    await clean.close();
    const failed: string[] = [];
    for (const spec of ['eio:trunk:150', 'eof:expert:12', 'eio:embed:2', 'eof:small:0', 'eio:any:400']) {
      const reader = new FaultyReader(new FsReader(), parseFaultSpec(spec));
      const kimi = await loadModel(dir, { memory, ctx: 256, threads: 1, reader });
      try {
        reader.classifyBy(kimi.model.store.layout, kimi.model.config); // counted from here on
        // the fault's request fails (or, where the fault hit no read it needed, succeeds)
        const first = await run(kimi).then(() => null, (e: unknown) => e);
        if (first) {
          assert.ok(first instanceof ReadError, `${spec}: ${String(first)}`);
          failed.push(spec);
        }
        for (let i = 0; i < 2; i++) assert.deepEqual(await run(kimi), want, `${spec}: request ${i + 2}`);
        assert.equal(kimi.engine.stats.active, 0);
      } finally {
        await kimi.close();
      }
    }
    assert.ok(failed.includes('eio:trunk:150') && failed.includes('eof:expert:12'), `faults that failed a request: ${failed.join(', ')}`);
    console.log(`# faults that failed their request, then recovered: ${failed.join(', ')}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
