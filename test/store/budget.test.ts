// The memory budget changes where bytes live, never the numbers: logits and generated ids are
// byte-identical at the floor (everything streamed, one expert slot, tiny pieces), in between,
// and with everything resident; across prefill chunk sizes too. Plus the plan, the floor refusal,
// the read-ahead order, and read faults (exit code 4, no token after the fault).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, FIXTURES, GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';
import { FsReader, type ByteReader } from '../../src/store/store.js';
import { FaultyReader } from '../../src/store/fault.js';
import { ReadError } from '../../src/util/errors.js';
import { viewNow, visitParts } from '../../src/store/mat.js';

const CASES = ['k2-yarn', 'k2-thinking-int4', 'kimi-linear', 'k3'];
const SMALL_PIECE = 8 * 1024;

async function logitsAt(dir: string, budget: number, ids: number[], chunk: number, maxPiece?: number): Promise<{ logits: Float32Array; gen: number[]; model: Model }> {
  const model = Model.open(dir, { budget, chunk, ctx: 64, maxPiece });
  const logits = await model.forward(model.newState(), ids, 'all', chunk);
  const r = await greedy(model, model.newState(), ids.slice(0, 6), 6, { chunk });
  await model.close();
  return { logits, gen: r.generated, model };
}

for (const name of CASES) {
  test(`${name}: same bytes at the floor, in between and all resident; chunks 1, 7, 64`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 20);
    const ref = await logitsAt(dir, Number.MAX_SAFE_INTEGER, ids, 64);
    for (const chunk of [1, 7, 64]) {
      const p = Model.plan(dir, { budget: 0, ctx: 64, chunk, maxPiece: SMALL_PIECE });
      const floor = p.floorBytes;
      const trunk = p.trunkBytes;
      // the last: every piece pinned, a split matrix's pieces in one buffer (one view: a resident lease)
      const budgets = [floor, floor + Math.floor(trunk / 2) + 3 * p.expertBytes, 2 * floor, Number.MAX_SAFE_INTEGER];
      for (const budget of budgets) {
        const r = await logitsAt(dir, budget, ids, chunk, SMALL_PIECE);
        assert.ok(sameBytes(r.logits, ref.logits), `budget ${budget}, chunk ${chunk}: logits differ`);
        assert.deepEqual(r.gen, ref.gen, `budget ${budget}, chunk ${chunk}: generated ids differ`);
        if (budget === Number.MAX_SAFE_INTEGER) {
          const st = r.model.store;
          assert.equal(st.plan.pinnedPieces, st.layout.sequence.length, 'everything pinned');
          const split = [...st.layout.matrices.values()].filter((m) => m.pieces.length > 1);
          assert.ok(split.length > 0, 'some matrix split into pieces');
          // pinned in one buffer: one view, whose rows are the pieces' bytes
          for (const sm of split) {
            const mat = st.mat(sm.base, sm.rows, sm.cols);
            const whole = viewNow(mat);
            assert.ok(whole && whole.rows === sm.rows && whole.data.byteLength === sm.pieces.reduce((n, p) => n + p.bytes, 0), `${sm.base}: one view`);
            let at = 0;
            st.trace = () => {}; // a traced store lends piece by piece
            await visitParts(mat, (v) => {
              assert.ok(v.data.buffer === whole.data.buffer && v.data.byteOffset === whole.data.byteOffset + at, `${sm.base}: a piece at ${at} of its matrix's buffer`);
              at += v.data.byteLength;
            });
            st.trace = null;
          }
        }
        if (budget === floor) {
          assert.equal(r.model.store.plan.pinnedBytes, 0, 'the floor pins nothing');
          assert.ok(r.model.store.stats.trunkBytesRead > 2 * trunk, 'the floor streams the trunk every pass');
        }
      }
    }
  });
}

test('the ring reads the trunk in forward order, ahead of use', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const reads: number[] = [];
  const inner = new FsReader();
  const reader: ByteReader = {
    async read(file, offset, into) {
      reads.push(offset);
      await inner.read(file, offset, into);
    },
    close: () => inner.close(),
  };
  const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE }).floorBytes;
  const m2 = Model.open(dir, { budget: floor, reader, ctx: 64, maxPiece: SMALL_PIECE });
  reads.length = 0;
  await m2.forward(m2.newState(), [1, 2, 3], 'last');
  const seqByOffset = new Map(m2.store.layout.sequence.map((p) => [p.data.offset, p.seq]));
  const order = reads.filter((o) => seqByOffset.has(o)).map((o) => seqByOffset.get(o)!);
  const n = m2.store.layout.sequence.length;
  assert.ok(order.length >= n, `every piece read (${order.length} of ${n})`);
  assert.deepEqual(order.slice(0, n), [...Array(n).keys()], 'first pass reads pieces in sequence order');
  assert.ok(m2.store.ringStats.hits > 0, 'some pieces were read ahead before they were needed');
  await m2.close();
});

test('plan: real K3 config floor under 2 GiB; refusal below the floor names the smallest budget', () => {
  const real = path.join(FIXTURES, 'k3-real-config.json');
  const r = spawnSync(process.execPath, [CLI, 'plan', real, '--memory', '2G', '-t', '4', '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const p = JSON.parse(r.stdout);
  assert.equal(p.budget_bytes, 2 * 2 ** 30);
  assert.ok(p.floor_bytes < 2 * 2 ** 30, `floor ${p.floor_bytes}`);
  // every counted item is named, and they add up
  assert.equal(p.total_bytes, (p.items as { bytes: number }[]).reduce((a, i) => a + i.bytes, 0));
  const keys = ['baseline', 'thread', 'kernel_temp', 'read_buffer', 'decode', 'engine', 'resident_small', 'derived', 'kda_state', 'mla_cache', 'scratch', 'ring', 'pinned_trunk', 'expert_cache', 'embedding_resident'];
  assert.equal(p.total_bytes, keys.reduce((a, k) => a + (p[`${k}_bytes`] as number), 0));
  assert.ok(p.thread_bytes > 3 * p.worker_bytes, '4 threads: 3 workers counted');
  assert.ok(p.total_bytes <= p.budget_bytes);
  const low = spawnSync(process.execPath, [CLI, 'run', path.join(GOLDEN, 'k3'), '--ids', '1,2', '--memory', '64M'], { encoding: 'utf8' });
  assert.equal(low.status, 2);
  assert.match(low.stderr, /smallest budget that works is \d+ bytes/);
  assert.doesNotMatch(low.stderr, /\n\s+at /);
});

test('a read fault mid-run stops generation: ReadError exit 4, no token after the fault', async () => {
  const dir = path.join(GOLDEN, 'k3');
  // Count the reads of a clean run at the floor, then fail partway through decoding.
  const counter = new FaultyReader(new FsReader(), Number.MAX_SAFE_INTEGER);
  const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE }).floorBytes;
  const clean = Model.open(dir, { budget: floor, reader: counter, ctx: 64, maxPiece: SMALL_PIECE });
  await greedy(clean, clean.newState(), [5, 6, 7], 6);
  await clean.close();
  const faulty = new FaultyReader(new FsReader(), Math.floor(counter.reads * 0.6));
  const model = Model.open(dir, { budget: floor, reader: faulty, ctx: 64, maxPiece: SMALL_PIECE });
  const seen: number[] = [];
  await assert.rejects(
    greedy(model, model.newState(), [5, 6, 7], 6, {
      onToken: (id) => {
        assert.ok(!faulty.faulted, 'a token was produced after the read fault');
        seen.push(id);
      },
    }),
    (e: unknown) => e instanceof ReadError && e.exitCode === 4 && /offset \d+/.test(e.message),
  );
  assert.ok(seen.length < 6);
  await model.close();
  // And through the CLI (its defaults: ctx 4096, 32 MiB pieces): exit code 4, one line naming the file and offset.
  const cliFloor = Model.plan(dir, { budget: 0 }).floorBytes;
  const c2 = new FaultyReader(new FsReader(), Number.MAX_SAFE_INTEGER);
  const m3 = Model.open(dir, { budget: cliFloor, reader: c2 });
  await greedy(m3, m3.newState(), [5, 6, 7], 6);
  await m3.close();
  // (-t 1, --io buffered: the plan of Model.open's, so the same weights resident and the same reads)
  const r = spawnSync(process.execPath, [CLI, 'run', dir, '--ids', '5,6,7', '--gen', '6', '--memory', String(cliFloor), '-t', '1', '--io', 'buffered'], { encoding: 'utf8', env: { ...process.env, K3_FAULT_AFTER_READS: String(Math.floor(c2.reads * 0.6)) } });
  assert.equal(r.status, 4, r.stderr);
  assert.match(r.stderr, /^k3: .*safetensors: read of \d+ bytes at offset \d+ failed/);
});
