// `k3 pack`: records 4 KiB-aligned, one per layer (split at tensor boundaries above --max-record),
// K3's experts left in place and scattered or forced experts packed one record each; the packed
// directory gives byte-identical logits; re-running is a no-op; a failed pack leaves nothing;
// --verify finds a flipped byte.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { type TensorEntry } from '../../src/checkpoint/safetensors.js';
import { loadConfig } from '../../src/checkpoint/config.js';
import { Model } from '../../src/model/model.js';
import { trunkOrder } from '../../src/checkpoint/names.js';
import { PACK_ALIGN, type PackManifest } from '../../src/checkpoint/packed.js';
import { packCheckpoint, verifyPack, type PackOptions } from '../../src/store/pack.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { Interrupted, ReadError, UserError } from '../../src/util/errors.js';
import { CLI, GOLDEN, fixture, readTensorBytes } from '../helpers.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-pack-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

let n = 0;
const tmpOut = (tag: string) => path.join(TMP, `${tag}-${n++}`);

async function pack(model: string, opts: Partial<PackOptions> = {}) {
  const out = opts.out ?? tmpOut(path.basename(model));
  const r = await packCheckpoint({ model, out, ...opts });
  return { out, r, m: r.manifest };
}

function idsOf(dir: string): number[] {
  const ids = JSON.parse(fs.readFileSync(fixture(dir, 'tokens.json'), 'utf8')).short as number[];
  assert.ok(Array.isArray(ids) && ids.length >= 12, `${path.join(dir, 'tokens.json')}: no 12 short ids`);
  return ids.slice(0, 12);
}

async function logits(dir: string, ids: number[]): Promise<Buffer> {
  const model = Model.open(dir, { ctx: 64 });
  try {
    const l = await model.forward(model.newState(), ids, 'all');
    return Buffer.from(l.buffer, l.byteOffset, l.byteLength);
  } finally {
    await model.close();
  }
}

function tmpLeftovers(out: string): string[] {
  return fs.readdirSync(path.dirname(out)).filter((f) => f.startsWith(`${path.basename(out)}.tmp-`));
}

/** Alignment, one record per layer unless split, every packed tensor byte-equal to its source. */
function checkLayout(src: string, out: string, m: PackManifest, maxRecord: number): void {
  const cfg = loadConfig(src);
  for (const r of m.records) {
    assert.equal(r.offset % PACK_ALIGN, 0, `record ${r.name} at ${r.offset} is not 4 KiB-aligned`);
    const f = m.files.find((x) => x.name === r.file);
    assert.ok(f && r.offset + r.length <= f.size, `record ${r.name} inside its file`);
  }
  const byRecord = new Map<number, string[]>();
  for (const [name, t] of Object.entries(m.tensors)) {
    assert.equal(t.offset_in_record % PACK_ALIGN, 0, `tensor ${name} at ${t.offset_in_record} in its record is not 4 KiB-aligned`);
    byRecord.set(t.record, [...(byRecord.get(t.record) ?? []), name]);
  }
  for (const [ri, names] of byRecord) {
    const r = m.records[ri]!;
    assert.ok(r.length <= maxRecord || names.length === 1, `record ${r.name} (${r.length} bytes, ${names.length} tensors) exceeds --max-record ${maxRecord}`);
  }
  // Each layer: records layer.l or layer.l.part0.., in order, holding its trunk matrices in forward order.
  for (let l = 0; l < cfg.numLayers; l++) {
    const recs = m.records.map((r, i) => ({ r, i })).filter(({ r }) => r.name === `layer.${l}` || r.name.startsWith(`layer.${l}.part`));
    assert.ok(recs.length >= 1, `layer ${l} has a record`);
    if (recs.length > 1) recs.forEach(({ r }, k) => assert.equal(r.name, `layer.${l}.part${k}`));
    const inLayer = Object.entries(m.tensors)
      .filter(([, t]) => recs.some(({ i }) => i === t.record))
      .sort(([, a], [, b]) => a.record - b.record || a.offset_in_record - b.offset_in_record)
      .map(([name]) => name);
    const bases = trunkOrder(cfg).filter((x) => x.layer === l).map((x) => x.base);
    const firstOf = (b: string) => inLayer.findIndex((nm) => nm.startsWith(`${b}.`));
    const pos = bases.map(firstOf);
    assert.ok(pos.every((p) => p >= 0), `layer ${l}: every trunk matrix packed`);
    assert.deepEqual(pos, [...pos].sort((a, b) => a - b), `layer ${l}: trunk matrices in forward order`);
  }
  if (maxRecord >= 2 ** 29) assert.ok(m.records.every((r) => !r.name.includes('.part')), 'no split at the default limit');
  // Bytes: every tensor of the packed directory equals its source.
  const a = indexCheckpointDir(src);
  const b = indexCheckpointDir(out);
  for (const [name, e] of b) {
    const s = a.get(name);
    assert.ok(s, `${name} exists in the source`);
    assert.equal(e.nbytes, s.nbytes);
    assert.ok(readTensorBytes(e).equals(readTensorBytes(s)), `${name}: packed bytes differ from the source`);
  }
  for (const name of a.keys()) assert.ok(b.has(name) || m.dropped.includes(name), `${name} is packed or listed as dropped`);
}

for (const name of ['k3', 'kimi-linear', 'k2-yarn', 'k2-thinking-int4']) {
  test(`${name}: packed records aligned, experts in place, same logits, re-run is a no-op`, async () => {
    const src = path.join(GOLDEN, name);
    const { out, r, m } = await pack(src);
    assert.equal(r.skipped, false);
    checkLayout(src, out, m, m.options.max_record);
    assert.equal(m.experts_in_place, true, 'the golden experts are contiguous per expert: left in place');
    assert.ok(m.records.every((x) => x.kind !== 'expert'));
    assert.ok(fs.existsSync(path.join(out, 'config.json')));
    const ids = idsOf(src);
    assert.ok((await logits(out, ids)).equals(await logits(src, ids)), 'logits from the packed directory are byte-identical');
    const again = await packCheckpoint({ model: src, out });
    assert.equal(again.skipped, true, 're-running is a no-op');
    assert.deepEqual(tmpLeftovers(out), []);
    const v = await verifyPack(out);
    assert.deepEqual([v.mismatches, v.problems], [[], []]);
  });
}

test('k2: experts packed one 4 KiB-aligned record each (forced, and when scattered in the shards)', async () => {
  const src = path.join(GOLDEN, 'k2-thinking-int4');
  const cfg = loadConfig(src);
  const moeLayers = cfg.layers.filter((L) => L.ffn === 'moe').length;
  const ids = idsOf(src);
  const ref = await logits(src, ids);
  const forced = await pack(src, { experts: 'pack' });
  assert.equal(forced.m.experts_in_place, false);
  const exRecs = forced.m.records.filter((r) => r.kind === 'expert');
  assert.equal(exRecs.length, moeLayers * cfg.moe.experts, 'one record per expert');
  assert.ok(exRecs.every((r) => r.offset % PACK_ALIGN === 0 && r.length === forced.m.experts!.expert_bytes));
  assert.ok(forced.m.files.some((f) => f.name === 'experts-00001.bin'));
  checkLayout(src, forced.out, forced.m, forced.m.options.max_record);
  assert.ok((await logits(forced.out, ids)).equals(ref), 'same logits with packed experts');
  await assert.rejects(packCheckpoint({ model: src, out: forced.out }), UserError, 'other options on an existing pack: refused');

  // A K2 checkpoint whose expert tensors are scattered (all gate_proj first, ...): auto packs them.
  const scattered = path.join(TMP, 'k2-scattered');
  fs.mkdirSync(scattered);
  fs.copyFileSync(path.join(src, 'config.json'), path.join(scattered, 'config.json'));
  const entries = [...indexCheckpointDir(src).values()];
  const key = (e: TensorEntry) => e.name.replace(/^(.*experts\.)(\d+)\.(\w+)\.(.*)$/, (_s, a, id, mat, rest) => `${a}${mat}.${rest}.${String(id).padStart(4, '0')}`);
  entries.sort((x, y) => (key(x) < key(y) ? -1 : 1));
  writeSafetensors(path.join(scattered, 'model.safetensors'), entries);
  const s = await pack(scattered);
  assert.equal(s.m.experts_in_place, false, 'scattered experts are packed');
  assert.equal(s.m.records.filter((r) => r.kind === 'expert').length, moeLayers * cfg.moe.experts);
  checkLayout(scattered, s.out, s.m, s.m.options.max_record);
  assert.ok((await logits(s.out, ids)).equals(ref), 'same logits from the packed scattered checkpoint');
  await assert.rejects(packCheckpoint({ model: scattered, out: tmpOut('x'), experts: 'in-place' }), /not one contiguous run/);
});

/** A plain safetensors writer: tensors in the given order, bytes copied from their source entries. */
function writeSafetensors(file: string, entries: TensorEntry[]): void {
  const header: Record<string, unknown> = {};
  let off = 0;
  for (const e of entries) {
    header[e.name] = { dtype: e.dtype, shape: e.shape, data_offsets: [off, off + e.nbytes] };
    off += e.nbytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(json), ...entries.map(readTensorBytes)]));
}

test('synthetic sharded K3: experts in place across shards; --max-record splits layers at tensor boundaries', async () => {
  const src = path.join(TMP, 'k3-synth');
  await synthCheckpoint({ arch: 'k3', preset: 'tiny', out: src, shards: 3 });
  const ids = [3, 1, 4, 1, 5, 9, 2, 6];
  const ref = await logits(src, ids);
  const whole = await pack(src);
  assert.equal(whole.m.experts_in_place, true);
  assert.equal(whole.m.experts!.files.length > 1, true, 'experts live in several source shards');
  checkLayout(src, whole.out, whole.m, whole.m.options.max_record);
  assert.ok((await logits(whole.out, ids)).equals(ref));

  const maxRecord = 64 * 1024;
  const split = await pack(src, { maxRecord, fileSize: 1 << 20 });
  assert.ok(split.m.records.some((r) => r.name.endsWith('.part1')), 'some layer is split');
  assert.ok(split.m.files.filter((f) => f.name.startsWith('trunk-')).length > 1, 'data files roll over at --file-size');
  assert.ok(split.m.files.every((f) => f.size <= 1 << 20 || split.m.records.filter((r) => r.file === f.name).length === 1));
  checkLayout(src, split.out, split.m, maxRecord);
  assert.ok((await logits(split.out, ids)).equals(ref), 'same logits from the split pack');

  const v = await verifyPack(split.out);
  assert.deepEqual([v.mismatches, v.problems], [[], []]);

  // Moving the pack and the source together keeps working: the source is found relative to OUT.
  const moved = path.join(TMP, 'moved');
  fs.mkdirSync(moved);
  fs.renameSync(src, path.join(moved, path.basename(src)));
  fs.renameSync(split.out, path.join(moved, path.basename(split.out)));
  assert.ok((await logits(path.join(moved, path.basename(split.out)), ids)).equals(ref), 'same logits after moving both');
  fs.renameSync(path.join(moved, path.basename(src)), path.join(TMP, 'elsewhere'));
  assert.throws(() => indexCheckpointDir(path.join(moved, path.basename(split.out))), /source checkpoint .* is missing/);
});

test('a failed pack leaves no OUT and no temporary directory', async () => {
  const src = path.join(TMP, 'k3-copy');
  fs.cpSync(path.join(GOLDEN, 'k3'), src, { recursive: true });
  const shards = fs.readdirSync(src).filter((f) => f.endsWith('.safetensors')).sort();
  const last = path.join(src, shards[shards.length - 1]!);
  const size = fs.statSync(last).size;

  // The source becomes unreadable partway: a shard is truncated after the first chunk was copied.
  const out = tmpOut('failed');
  let cut = false;
  await assert.rejects(
    packCheckpoint({
      model: src,
      out,
      chunkBytes: PACK_ALIGN,
      onProgress: (done) => {
        if (done > 0 && !cut) {
          fs.truncateSync(last, Math.floor(size / 2));
          cut = true;
        }
      },
    }),
    (e: unknown) => e instanceof ReadError && /short read|truncated/.test((e as Error).message),
  );
  assert.ok(cut);
  assert.equal(fs.existsSync(out), false, 'no OUT after a failed pack');
  assert.deepEqual(tmpLeftovers(out), [], 'no temporary directory left behind');

  // A checkpoint with a truncated shard from the start: refused before anything is written.
  const out2 = tmpOut('truncated');
  await assert.rejects(packCheckpoint({ model: src, out: out2 }), UserError);
  assert.equal(fs.existsSync(out2), false);
  assert.deepEqual(tmpLeftovers(out2), []);

  // OUT holding something else is refused and left alone.
  const other = tmpOut('other');
  fs.mkdirSync(other);
  fs.writeFileSync(path.join(other, 'notes.txt'), 'mine');
  await assert.rejects(packCheckpoint({ model: path.join(GOLDEN, 'k3'), out: other }), /not a packed directory/);
  assert.equal(fs.readFileSync(path.join(other, 'notes.txt'), 'utf8'), 'mine');
});

test('an aborted pack (the CLI aborts on SIGINT / SIGTERM) leaves no OUT and no temporary directory', async () => {
  const out = tmpOut('aborted');
  const ac = new AbortController();
  await assert.rejects(
    packCheckpoint({
      model: path.join(GOLDEN, 'k3'),
      out,
      chunkBytes: PACK_ALIGN,
      signal: ac.signal,
      onProgress: (done) => {
        if (done > 0) ac.abort(new Interrupted('pack interrupted (SIGINT); nothing written'));
      },
    }),
    (e: unknown) => e instanceof Interrupted && e.exitCode === 130,
  );
  assert.equal(fs.existsSync(out), false, 'no OUT after an aborted pack');
  assert.deepEqual(tmpLeftovers(out), [], 'no temporary directory left behind');
});

test('CLI: k3 pack, re-run no-op, --verify finds a flipped byte (exit 2 naming the record)', () => {
  fixture(CLI);
  const src = path.join(GOLDEN, 'kimi-linear');
  const out = tmpOut('cli');
  const k3 = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  let r = k3('pack', src, out, '--json');
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.equal(j.skipped, false);
  r = k3('pack', src, out);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /nothing to do/);
  r = k3('pack', '--verify', out);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /all checksums match/);
  r = k3('logits', out, '--ids', '1,2,3', '--out', path.join(TMP, 'cli.npy'));
  assert.equal(r.status, 0, r.stderr);

  const m = JSON.parse(fs.readFileSync(path.join(out, 'packed.json'), 'utf8')) as PackManifest;
  const rec = m.records.find((x) => x.name === 'layer.2')!;
  const file = path.join(out, rec.file);
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, rec.offset + 100);
  b[0] = b[0]! ^ 0x10;
  fs.writeSync(fd, b, 0, 1, rec.offset + 100);
  fs.closeSync(fd);
  r = k3('pack', '--verify', out);
  assert.equal(r.status, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /record layer\.2 /);
  assert.doesNotMatch(r.stderr, /record layer\.1 /);
  r = k3('pack', src);
  assert.equal(r.status, 2);
});
