// A weight read that fails mid-request (injected: FaultyReader, at the floor budget so every
// forward pass streams): the request is answered 500 in OpenAI's error shape and the server stays
// up (/health answers; the engine loop has no sequence left).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel } from '../src/api/index.js';
import { Model } from '../src/model/model.js';
import { startServer } from '../src/server/server.js';
import { FaultyReader } from '../src/store/fault.js';
import { FsReader } from '../src/store/store.js';
import { synthCheckpoint } from '../src/synth/synth.js';
import { demoTokenizerFiles } from '../src/tokenizer/index.js';
import { post } from './serve-helpers.js';

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
