// Every op of the registry (src/kernels/ops/) against its reference, as bytes: arguments drawn from
// the op's declaration (dims, shapes, value ranges; seeded), run by the reference the op names and
// by the WebAssembly op through a chain, at 1, 2 and 3 threads with relaxed SIMD on and off.

import { test, before, after } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { createKernels, type Kernels } from '../../src/kernels/fast.js';
import { OPS, opCode, RANGE_AT, OP_WORDS } from '../../src/kernels/ops/registry.js';
import { dimExpr, type DrawnArgs, type OpDef } from '../../src/kernels/ops/op.js';
import type { OpArg } from '../../src/kernels/chain.js';
import { kernelsDoc } from '../../src/kernels/ops/doc.js';
import { xorshift } from '../helpers.js';

/** Draws per op: enough that the tiles' edges (16, 4, 1 columns) and odd sizes all come up. */
const DRAWS = 8;

let kernels: Kernels[] = [];

before(async () => {
  const o = { memoryBytes: 8 << 20, maxMemoryBytes: 128 << 20, maxCols: 1024, minWorkPerThread: 1 };
  for (const threads of [1, 2, 3]) for (const relaxed of [true, false]) kernels.push(await createKernels({ ...o, threads, relaxed }));
});
after(async () => {
  await Promise.all(kernels.map((k) => k.close()));
  kernels = [];
});

type Dims = Record<string, number>;

function drawDims(def: OpDef, rnd: () => number): Dims {
  const dims: Dims = {};
  for (const [name, [lo, hi]] of Object.entries(def.dims!)) dims[name] = lo + Math.floor(rnd() * (hi - lo + 1));
  return dims;
}

/** The op's arrays and values for `dims`: what the reference gets (the kernels get copies). */
function drawArgs(def: OpDef, dims: Dims, rnd: () => number): DrawnArgs {
  const a: DrawnArgs = {};
  for (const d of def.args) {
    const [lo, hi] = d.draw ?? [-1, 1];
    const fill = <T extends Float32Array | Float64Array>(x: T): T => x.map(() => lo + (hi - lo) * rnd()) as T;
    if (d.kind === 'int') {
      assert.ok(d.name in dims, `${def.name}: int argument ${d.name} is not a dim`);
      a[d.name] = dims[d.name]!;
    } else if (d.kind === 'bytes') a[d.name] = dimExpr(d.value!, dims);
    else if (d.kind === 'f32') a[d.name] = fill(new Float32Array(dimExpr(d.shape!, dims)));
    else if (d.kind === 'f64') a[d.name] = fill(new Float64Array(dimExpr(d.shape!, dims)));
    else if (d.kind === 'table') a[d.name] = Array.from({ length: dimExpr(d.count!, dims) }, () => fill(new Float32Array(dimExpr(d.shape!, dims))));
    else assert.fail(`${def.name}: the registry test cannot draw ${d.kind} argument ${d.name}`);
  }
  return a;
}

function copyArgs(a: DrawnArgs): DrawnArgs {
  const c: DrawnArgs = {};
  for (const [k, v] of Object.entries(a)) c[k] = typeof v === 'number' ? v : Array.isArray(v) ? v.map((x) => x.slice()) : v.slice();
  return c;
}

/** The drawn arguments placed in k's memory, as Chain.op takes them (tables as the offset of their i32 table). */
function place(k: Kernels, def: OpDef, a: DrawnArgs): { args: Record<string, OpArg>; arrays: Record<string, Float32Array | Float64Array> } {
  const args: Record<string, OpArg> = {}, arrays: Record<string, Float32Array | Float64Array> = {};
  for (const d of def.args) {
    const v = a[d.name]!;
    if (typeof v === 'number') args[d.name] = v;
    else if (Array.isArray(v)) {
      const tab = k.alloc(4 * v.length, 4);
      const rows = v.map((x) => {
        const y = k.allocF32(x.length);
        y.set(x);
        return y.byteOffset;
      });
      new Int32Array(tab.u8.buffer, tab.offset, v.length).set(rows);
      args[d.name] = tab.offset;
    } else {
      const r = k.alloc(Math.max(8, v.byteLength), 64);
      const x = v instanceof Float64Array ? new Float64Array(r.u8.buffer, r.offset, v.length) : new Float32Array(r.u8.buffer, r.offset, v.length);
      x.set(v as never);
      args[d.name] = arrays[d.name] = x;
    }
  }
  return { args, arrays };
}

function sameBytes(got: ArrayBufferView, want: ArrayBufferView, what: string): void {
  const g = Buffer.from(got.buffer, got.byteOffset, got.byteLength), w = Buffer.from(want.buffer, want.byteOffset, want.byteLength);
  if (g.equals(w)) return;
  let i = 0;
  while (g[i] === w[i]) i++;
  assert.fail(`${what}: first byte difference at ${i} of ${w.length}`);
}

/** The reference's functions by name, imported from the modules the op names. */
async function refFns(def: OpDef): Promise<Record<string, (...a: never[]) => unknown>> {
  const fns: Record<string, (...a: never[]) => unknown> = {};
  for (const [name, mod] of Object.entries(def.ref!.fns)) {
    const m = (await import(new URL(`../../src/${mod}`, import.meta.url).href)) as Record<string, (...a: never[]) => unknown>;
    assert.equal(typeof m[name], 'function', `${def.name}: ${mod} exports no ${name}`);
    fns[name] = m[name]!;
  }
  return fns;
}

test('the registry: codes are places, words fit, every op names its reference', () => {
  OPS.forEach((d, i) => {
    assert.equal(opCode(d), i);
    assert.equal(RANGE_AT[i], 1 + d.args.length);
    assert.ok(RANGE_AT[i]! + 2 <= OP_WORDS, `${d.name}: words`);
    assert.ok(d.ref ? d.dims : d.refNote, `${d.name}: a drawn reference (ref, dims) or a note naming the test that compares it`);
  });
  assert.equal(new Set(OPS.map((d) => d.name)).size, OPS.length, 'op names are unique');
});

test('docs/KERNELS.md is the registry\'s (npm run kernels-doc writes it)', () => {
  const file = new URL('../../../docs/KERNELS.md', import.meta.url);
  assert.ok(fs.readFileSync(file, 'utf8') === kernelsDoc(), 'docs/KERNELS.md differs from the registry: run npm run kernels-doc');
});

for (const def of OPS.filter((d) => d.ref)) {
  test(`${def.name}: WebAssembly == ${def.ref!.name}, bytes, ${DRAWS} draws, threads 1/2/3, relaxed SIMD on/off`, async () => {
    const fns = await refFns(def);
    const rnd = xorshift(0x9e3779b9 ^ [...def.name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) | 0, 7));
    for (let i = 0; i < DRAWS; i++) {
      const dims = drawDims(def, rnd);
      const drawn = drawArgs(def, dims, rnd);
      const want = copyArgs(drawn);
      def.ref!.run(fns as never, want, dims);
      const units = dimExpr(def.split.range, dims);
      for (const k of kernels) {
        const m = k.mark();
        try {
          const { args, arrays } = place(k, def, drawn);
          const ch = k.chain();
          try {
            ch.op(def, args, units, 1 << 30); // (work enough for every thread)
            ch.run();
          } finally {
            ch.done();
          }
          for (const d of def.args) {
            if (d.io !== 'out' && d.io !== 'inout') continue;
            sameBytes(arrays[d.name]!, want[d.name] as Float32Array, `${def.name} ${d.name} ${JSON.stringify(dims)} threads=${k.threads} relaxed=${k.relaxed}`);
          }
        } finally {
          k.release(m);
        }
      }
    }
  });
}
