// The graph (src/graph/graph.ts): calls on weights resident in its home kernel memory chain; a
// streamed weight, a weight outside kernel memory and a JavaScript step run on the host and split
// the chain where they fall. The bytes are the host-only graph's and the reference's; the arena is
// back where it was after done().

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import { Compute, KernelGroup, REF_COMPUTE } from '../../src/graph/compute.js';
import { graphFor, type Graph } from '../../src/graph/graph.js';
import { gatherRowsRef, moeCombineRef } from '../../src/graph/reference.js';
import * as ref from '../../src/kernels/ref.js';
import { residentMat, rowSlice, type Mat } from '../../src/store/mat.js';
import type { WeightView } from '../../src/formats/weight.js';
import { xorshift } from '../helpers.js';

const rnd = xorshift(0x9e3779b9);
const randArr = (n: number): Float32Array => new Float32Array(n).map(() => rnd() - 0.5);
const D = 48, T = 3;

function viewIn(bytes: Uint8Array, rows: number, cols: number, name: string): WeightView {
  new Float32Array(bytes.buffer, bytes.byteOffset, rows * cols).set(randArr(rows * cols));
  return { name, format: 'f32', rows, cols, data: bytes.subarray(0, 4 * rows * cols) };
}

/** A Mat the store would stream: two row blocks, each valid only inside the visit. */
function streamedMat(v: WeightView): Mat {
  const half = v.rows >> 1;
  return {
    name: v.name, rows: v.rows, cols: v.cols, format: v.format,
    lease: () => ({
      kind: 'streamed',
      parts: async (fn) => {
        fn(rowSlice(v, 0, half), 0);
        fn(rowSlice(v, half, v.rows), half);
      },
      whole: async (fn) => fn(v),
    }),
  };
}

let group: KernelGroup;
before(async () => {
  group = await KernelGroup.create(1 << 20, { threads: 2, minWorkPerThread: 1, maxMemoryBytes: 512 << 20 });
});
after(async () => {
  await group.close();
});

test('a graph chains what lies in its home memory and runs the rest on the host: same bytes as the host-only graph and the reference; the arena is released', async () => {
  const c = new Compute(group);
  const a = viewIn(group.alloc(4 * D * D), D, D, 'a'), b = viewIn(group.alloc(4 * D * D), D, D, 'b');
  const s = viewIn(new Uint8Array(4 * D * D), D, D, 's'), p = viewIn(new Uint8Array(4 * D * D), D, D, 'p');
  const x = randArr(T * D);
  const state = c.allocF32(16);
  const forward = async (g: Graph): Promise<Float32Array> => {
    const ya = g.matmul(residentMat(a), x, T), ys = g.matmul(streamedMat(s), x, T);
    g.next();
    const sum = g.alloc(T * D);
    g.host(() => {
      for (let i = 0; i < sum.length; i++) sum[i] = ya[i]! + ys[i]!;
    });
    const yb = g.next().matmul(residentMat(b), sum, T);
    const out = g.next().matmul(residentMat(p), yb, T, new Float32Array(T * D));
    await g.run();
    return out;
  };

  const want = (() => {
    const ya = new Float32Array(T * D), ys = new Float32Array(T * D), yb = new Float32Array(T * D), out = new Float32Array(T * D);
    ref.matmul(a, x, T, ya);
    ref.matmul(s, x, T, ys);
    const sum = ya.map((v, i) => v + ys[i]!);
    ref.matmul(b, sum, T, yb);
    ref.matmul(p, yb, T, out);
    return out;
  })();

  const member = group.members[0]!;
  const proto = Object.getPrototypeOf(member) as { chain: () => unknown };
  const inner = proto.chain;
  let chains = 0;
  proto.chain = function (this: unknown) {
    chains++;
    return inner.call(this);
  };
  const mark = member.mark();
  const g = graphFor(c, [state], []);
  try {
    assert.deepEqual(Buffer.from((await forward(g)).buffer), Buffer.from(want.buffer), 'chained graph');
  } finally {
    g.done();
    proto.chain = inner;
  }
  assert.equal(chains, 2, 'a before the streamed product and the JavaScript step, b after them; p outside kernel memory runs on the host');
  assert.equal(member.mark(), mark, 'the arena is back at its mark');

  for (const h of [graphFor(c, [], []), graphFor(REF_COMPUTE, [state], [])]) {
    try {
      assert.deepEqual(Buffer.from((await forward(h)).buffer), Buffer.from(want.buffer), 'host-only graph');
    } finally {
      h.done();
    }
  }
});

test('overlap() and start(): the calls before the point run at start(), a chain going on past it is launched and joined; gatherRows and moeCombine chain or run on the host, same bytes', async () => {
  const c = new Compute(group);
  const a = viewIn(group.alloc(4 * D * D), D, D, 'a'), b = viewIn(group.alloc(4 * D * D), D, D, 'b');
  const x = randArr(T * D), wts = randArr(2 * T), norm = randArr(D).map((v) => v + 1);
  const rows = [2, 0, 1, 1, 0, 2]; // (t, j) -> a row of b's output, K = 2
  const forward = async (g: Graph): Promise<{ early: Float32Array; out: Float32Array }> => {
    const ya = g.matmul(residentMat(a), x, T);
    g.overlap();
    const yb = g.matmul(residentMat(b), ya, T); // (goes on past start())
    await g.start();
    const early = ya.slice(); // (what the steps before the point write is ready now)
    const z = g.gatherRows(yb, rows, D);
    const ys = rows.map((_, i) => z.subarray(i * D, (i + 1) * D));
    const sum = g.next().moeCombine(ys, wts, T, 2, D, norm, 1e-5);
    await g.run();
    g.join();
    return { early, out: sum.slice() };
  };
  const ya = new Float32Array(T * D), yb = new Float32Array(T * D);
  ref.matmul(a, x, T, ya);
  ref.matmul(b, ya, T, yb);
  const z = gatherRowsRef(yb, rows, D);
  const want = moeCombineRef(rows.map((_, i) => z.subarray(i * D, (i + 1) * D)), wts, T, 2, D, norm, 1e-5, new Float32Array(T * D));

  const member = group.members[0]!;
  const state = c.allocF32(16);
  graphFor(c, [state], [norm]).done(); // (places the norm: once, for good)
  const mark = member.mark();
  for (const g of [graphFor(c, [state], [norm]), graphFor(c, [], []), graphFor(REF_COMPUTE, [state], [norm])]) {
    try {
      const { early, out } = await forward(g);
      assert.deepEqual(Buffer.from(early.buffer), Buffer.from(ya.buffer), 'the step before overlap()');
      assert.deepEqual(Buffer.from(out.buffer), Buffer.from(want.buffer), 'gathered, combined and normed');
    } finally {
      g.done();
    }
  }
  assert.equal(member.mark(), mark, 'the arena is back at its mark');
});
