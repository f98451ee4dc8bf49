// Direct I/O (issue 9): O_DIRECT reads give the same bytes as buffered ones at every offset and
// length (unaligned, in place into aligned Wasm memory, across the end of the file), the same
// logits, and fall back to buffered reads, saying so once, where O_DIRECT is refused.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { ALIGN, DirectReader, directSupported } from '../../src/store/direct-reader.js';
import { FsReader } from '../../src/store/store.js';

const DIR = path.join(GOLDEN, 'k3');
const FILE = path.join(DIR, 'model-00001-of-000002.safetensors');
const linux = directSupported();

test('direct reads equal buffered reads: unaligned, in place, large, at the end of the file', { skip: !linux && 'no O_DIRECT here' }, async () => {
  const size = fs.statSync(FILE).size;
  const want = fs.readFileSync(FILE);
  const notices: string[] = [];
  const r = new DirectReader(new FsReader(), (m) => notices.push(m));
  const mem = new WebAssembly.Memory({ initial: Math.ceil((size + 2 * ALIGN) / 65536) });
  const cases: [number, number][] = [[0, 1], [1, 100], [ALIGN - 3, 10], [ALIGN, ALIGN], [ALIGN, 3 * ALIGN + 17], [5, Math.min(size - 5, 9 << 20)], [size - 7, 7], [size - ALIGN - 1, ALIGN + 1], [0, size]];
  for (const [off, len] of cases) {
    const plain = new Uint8Array(len);
    await r.read(FILE, off, plain);
    assert.ok(Buffer.from(plain).equals(want.subarray(off, off + len)), `plain memory: ${len} bytes at ${off}`);
    const aligned = new Uint8Array(mem.buffer, ALIGN, len);
    await r.read(FILE, off, aligned);
    assert.ok(Buffer.from(aligned).equals(want.subarray(off, off + len)), `wasm memory: ${len} bytes at ${off}`);
  }
  assert.ok(r.stats.inPlaceBytes > 0, 'aligned reads into Wasm memory went in place');
  assert.ok(r.stats.bouncedBytes > 0, 'unaligned reads went through the bounce buffers');
  await assert.rejects(r.read(FILE, size - 4, new Uint8Array(8)), /short read/);
  r.close();
  assert.deepEqual(notices, [], 'ext4 takes O_DIRECT: no notice');
});

test('a filesystem that refuses O_DIRECT (EINVAL at open): buffered reads, one notice', { skip: !linux && 'no O_DIRECT here' }, async () => {
  class Refusing extends DirectReader {
    protected override openDirect(file: string): number {
      throw Object.assign(new Error(`open ${file}: EINVAL`), { code: 'EINVAL' });
    }
  }
  const want = fs.readFileSync(FILE);
  const notices: string[] = [];
  const r = new Refusing(new FsReader(), (m) => notices.push(m));
  for (const [off, len] of [[4321, 333], [0, 4096], [17, 5000]] as const) {
    const into = new Uint8Array(len);
    await r.read(FILE, off, into);
    assert.ok(Buffer.from(into).equals(want.subarray(off, off + len)));
  }
  const other = path.join(DIR, 'model-00002-of-000002.safetensors');
  await r.read(other, 0, new Uint8Array(8));
  r.close();
  assert.equal(r.stats.bufferedFiles, 2);
  assert.equal(notices.length, 1, notices.join('\n'));
  assert.match(notices[0]!, /refuses O_DIRECT \(EINVAL\).*page cache/);
});

test('--io direct gives the same logits as --io buffered, at the floor and resident', { skip: !linux && 'no O_DIRECT here' }, async (t) => {
  const ids = (JSON.parse(fs.readFileSync(path.join(DIR, 'tokens.json'), 'utf8')).short as number[]).slice(0, 8);
  let ref: Float32Array | null = null;
  for (const atFloor of [true, false]) {
    for (const io of ['buffered', 'direct'] as const) {
      // the floor of each: --io direct's bounce buffers count in the plan
      const budget = atFloor ? Model.plan(DIR, { budget: 0, ctx: 64, io, threads: 1 }).floorBytes : Number.MAX_SAFE_INTEGER;
      const m = await Model.load(DIR, { budget, ctx: 64, io, threads: 1 });
      const l = await m.forward(m.newState(), ids, 'all', 4);
      await m.close();
      ref ??= l;
      assert.ok(sameBytes(l, ref), `budget ${budget}, --io ${io}: logits differ`);
    }
  }
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'k3-io-')), 'l.npy');
  t.after(() => fs.rmSync(path.dirname(out), { recursive: true, force: true }));
  const bad = spawnSync(process.execPath, [CLI, 'logits', DIR, '--ids', '1,2', '--io', 'fast', '--out', out], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /^k3: logits: --io must be direct, buffered or auto\n$/);
  const ok = spawnSync(process.execPath, [CLI, 'logits', DIR, '--ids', '1,2', '--io', 'direct', '--out', out, '--threads', '1'], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
});
