// `k3 pack --compress`: the bf16 block code is lossless (every coded tensor decodes to the
// source's bytes), the WebAssembly decoder gives the reference decoder's bytes, logits through a
// compressed pack are the uncompressed pack's bytes (golden K3 and Kimi Linear, streamed and
// resident), and damaged coded bytes fail the read with one clear error instead of other numbers.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { readManifest } from '../../src/checkpoint/packed.js';
import { bf16Decoder } from '../../src/kernels/fast.js';
import { REF_DECODER, decodeRunInPlace, encodeBlock, type BlockDecoder, type CodedRun } from '../../src/formats/bf16-code.js';
import { Model } from '../../src/model/model.js';
import { packCheckpoint, verifyPack } from '../../src/store/pack.js';
import { ReadError } from '../../src/util/errors.js';
import { CLI, GOLDEN, readTensorBytes, sameBytes, xorshift } from '../helpers.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-compress-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

const WASM = bf16Decoder();
const DECODERS: [string, BlockDecoder][] = [['ref', REF_DECODER], ['wasm', WASM]];

/** bf16 bits of N(0, sigma) samples (Box-Muller on a fixed generator), rounded to nearest even. */
function gaussBf16(n: number, sigma: number, seed: number): Uint16Array {
  const rnd = xorshift(seed);
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = sigma * Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
  const u = new Uint32Array(f.buffer);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = (u[i]! + 0x7fff + ((u[i]! >> 16) & 1)) >>> 16;
  return out;
}

function decodeWith(dec: BlockDecoder, coded: Uint8Array, n: number): Uint16Array | string {
  const out = new Uint16Array(n);
  if (coded.byteLength === 2 * n) return new Uint16Array(coded.slice().buffer);
  const why = dec.decodeBlock(coded, n, new Uint8Array(out.buffer));
  return why ?? out;
}

test('blocks decode to their exact bytes, reference and wasm alike (sizes off 16, escapes, zeros, raw fallback)', () => {
  const rnd = xorshift(7);
  const blocks: Uint16Array[] = [
    gaussBf16(32768, 1 / Math.sqrt(7168), 1),
    gaussBf16(4097, 0.02, 2), // odd size: padding to 16
    gaussBf16(5, 1, 3),
    new Uint16Array(100), // all zeros: one exponent
    Uint16Array.from({ length: 3000 }, () => Math.floor(rnd() * 65536)), // random bits: stored raw
  ];
  // Many exponents: a wide log-uniform spread forces escapes beyond the 16 table entries.
  const wide = gaussBf16(20000, 1, 4);
  for (let i = 0; i < wide.length; i += 37) wide[i] = (wide[i]! & 0x807f) | ((Math.floor(rnd() * 254) + 1) << 7);
  blocks.push(wide);
  for (const [bi, v] of blocks.entries()) {
    const coded = encodeBlock(v);
    assert.ok(coded.byteLength <= 2 * v.length, `block ${bi}: stored no bigger than raw`);
    if (bi === 0) assert.ok(coded.byteLength < 0.78 * 2 * v.length, `N(0, 1/in) block codes to ${coded.byteLength / (2 * v.length)} of raw`);
    if (bi === 4) assert.equal(coded.byteLength, 2 * v.length, 'random bits are stored raw');
    if (bi === 5) assert.ok(new DataView(coded.buffer).getUint32(8, true) > 0, 'the wide block has escapes');
    for (const [name, dec] of DECODERS) {
      const got = decodeWith(dec, coded, v.length);
      assert.ok(typeof got !== 'string', `${name}, block ${bi}: ${String(got)}`);
      assert.deepEqual(Buffer.from(got.buffer), Buffer.from(v.buffer, v.byteOffset, 2 * v.length), `${name}, block ${bi}: bytes differ`);
    }
  }
});

test('damaged blocks: both decoders refuse them, with the same verdict', () => {
  const v = gaussBf16(8192, 0.05, 9);
  const coded = encodeBlock(v);
  const rnd = xorshift(11);
  for (let k = 0; k < 200; k++) {
    const bad = coded.slice();
    const at = Math.floor(rnd() * bad.byteLength);
    bad[at] = bad[at]! ^ (1 << Math.floor(rnd() * 8));
    const verdicts = DECODERS.map(([, dec]) => decodeWith(dec, bad, v.length));
    assert.equal(typeof verdicts[0], 'string', `flip at byte ${at}: not detected (${at < 28 ? 'header' : 'body'})`);
    assert.deepEqual(verdicts[1], verdicts[0], `flip at byte ${at}: the decoders disagree`);
  }
  const short = coded.subarray(0, coded.byteLength - 1);
  for (const [, dec] of DECODERS) assert.match(String(decodeWith(dec, short, v.length)), /escapes for 8192 values make/);
});

test('in place: a run of blocks read into the tail of its raw-sized buffer decodes over itself', () => {
  const cols = 300, rows = [7, 7, 7, 3];
  const src = gaussBf16(cols * 24, 0.1, 5);
  const stored: Uint8Array[] = [];
  let r = 0;
  for (const n of rows) {
    stored.push(encodeBlock(src.subarray(r * cols, (r + n) * cols)));
    r += n;
  }
  // One raw block among coded ones.
  stored[1] = new Uint8Array(src.buffer, 7 * cols * 2, 7 * cols * 2).slice();
  const run: CodedRun = { cols, blockRows: rows, stored: stored.map((s) => s.byteLength), where: 'test', offset: 0 };
  const total = stored.reduce((s, x) => s + x.byteLength, 0);
  for (const [name, dec] of DECODERS) {
    const buf = new Uint8Array(2 * cols * 24);
    let o = buf.byteLength - total;
    for (const s of stored) {
      buf.set(s, o);
      o += s.byteLength;
    }
    decodeRunInPlace(buf, run, dec);
    assert.deepEqual(Buffer.from(buf), Buffer.from(src.buffer), `${name}: in-place run differs`);
  }
});

const CASES = ['k3', 'kimi-linear'];
const packs = new Map<string, { plain: string; coded: string }>();

async function packsOf(name: string): Promise<{ plain: string; coded: string }> {
  let p = packs.get(name);
  if (!p) {
    const src = path.join(GOLDEN, name);
    p = { plain: path.join(TMP, `${name}-plain`), coded: path.join(TMP, `${name}-coded`) };
    await packCheckpoint({ model: src, out: p.plain });
    const r = await packCheckpoint({ model: src, out: p.coded, compress: true });
    assert.ok(r.coded && r.coded.tensors > 0 && r.coded.storedBytes < 0.8 * r.coded.rawBytes, `${name}: ${JSON.stringify(r.coded)}`);
    packs.set(name, p);
  }
  return p;
}

for (const name of CASES) {
  test(`${name}: every coded tensor decodes to the source's bytes; every other tensor is the source's`, async () => {
    const { coded } = await packsOf(name);
    const src = indexCheckpointDir(path.join(GOLDEN, name));
    const m = readManifest(coded);
    assert.equal(m.version, 2);
    const entries = indexCheckpointDir(coded);
    let n = 0;
    for (const [tname, e] of entries) {
      const want = readTensorBytes(src.get(tname)!);
      if (!e.coded) {
        assert.ok(readTensorBytes(e).equals(want), `${tname}: bytes differ`);
        continue;
      }
      n++;
      const [rows, cols] = e.shape as [number, number];
      const c = e.coded;
      const blockRows = c.stored.map((_, b) => Math.min(rows, (b + 1) * c.blockRows) - b * c.blockRows);
      for (const [dname, dec] of DECODERS) {
        const buf = new Uint8Array(e.nbytes);
        const fd = fs.openSync(e.file, 'r');
        fs.readSync(fd, buf, e.nbytes - c.storedBytes, c.storedBytes, e.offset);
        fs.closeSync(fd);
        decodeRunInPlace(buf, { cols, blockRows, stored: c.stored, where: tname, offset: e.offset }, dec);
        assert.ok(Buffer.from(buf).equals(want), `${dname}: ${tname} decodes to other bytes`);
      }
    }
    assert.ok(n > 50, `${n} coded tensors`);
  });

  test(`${name}: logits through the compressed pack are the uncompressed pack's bytes (floor with small pieces, resident)`, async () => {
    const { plain, coded } = await packsOf(name);
    const ids = (JSON.parse(fs.readFileSync(path.join(GOLDEN, name, 'tokens.json'), 'utf8')).short as number[]).slice(0, 12);
    const run = async (dir: string, floor: boolean) => {
      const opts = { ctx: 64, chunk: 5, maxPiece: 8192 };
      const budget = floor ? Model.plan(dir, { ...opts, budget: 0 }).floorBytes : Number.MAX_SAFE_INTEGER;
      const model = Model.open(dir, { ...opts, budget });
      const logits = await model.forward(model.newState(), ids, 'all', 5);
      const stats = { ...model.store.stats };
      await model.close();
      return { logits, stats };
    };
    const ref = await run(plain, false);
    for (const floor of [true, false]) {
      const a = await run(plain, floor);
      const b = await run(coded, floor);
      assert.ok(sameBytes(a.logits, ref.logits));
      assert.ok(sameBytes(b.logits, ref.logits), `floor=${floor}: logits differ`);
      if (floor) assert.ok(b.stats.trunkBytesRead < 0.85 * a.stats.trunkBytesRead, `trunk bytes read: ${b.stats.trunkBytesRead} coded vs ${a.stats.trunkBytesRead}`);
    }
  });
}

test('a damaged coded block: the run fails with one line naming the file and tensor (exit 4); --verify names the record', async () => {
  const { coded } = await packsOf('k3');
  const dir = path.join(TMP, 'k3-damaged');
  fs.cpSync(coded, dir, { recursive: true });
  const m = readManifest(dir);
  const [tname, t] = Object.entries(m.tensors).find(([, x]) => x.encoding)!;
  const rec = m.records[t.record]!;
  const file = path.join(dir, rec.file);
  const fd = fs.openSync(file, 'r+');
  const at = rec.offset + t.offset_in_record + 28 + 5; // a symbol byte of the first block
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, at);
  b[0] = b[0]! ^ 0x10;
  fs.writeSync(fd, b, 0, 1, at);
  fs.closeSync(fd);
  // With the records' sha256 not checked, the coded block's own checksum stops the run.
  const model = Model.open(dir, { ctx: 64, verifyReads: 'off' });
  await assert.rejects(model.forward(model.newState(), [1, 2, 3], 'last', 3), (e: unknown) => e instanceof ReadError && e.exitCode === 4 && e.message.includes(tname) && /damaged \(checksum mismatch\)/.test(e.message));
  await model.close();
  // By default the record's sha256 (checked on first read) stops it first: one line, exit 4.
  const cli = spawnSync(process.execPath, [CLI, 'logits', dir, '--ids', '1,2,3', '--out', path.join(TMP, 'x.npy')], { encoding: 'utf8' });
  assert.equal(cli.status, 4, cli.stderr);
  assert.equal(cli.stderr.trim().split('\n').length, 1, cli.stderr);
  assert.match(cli.stderr, new RegExp(`record ${rec.name} .* fails its checksum`));
  assert.ok(!fs.existsSync(path.join(TMP, 'x.npy')), 'no half-written output');
  const v = await verifyPack(dir);
  assert.deepEqual(v.mismatches.map((x) => x.record), [rec.name]);
});

test('pack --compress from the CLI: version 2, ratio in --json; the same options again is a no-op', () => {
  const out = path.join(TMP, 'cli-coded');
  const args = [CLI, 'pack', path.join(GOLDEN, 'kimi-linear'), out, '--compress', '--json'];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const j = JSON.parse(r.stdout) as { coded: { ratio: number }; skipped: boolean };
  assert.ok(j.coded.ratio > 0.6 && j.coded.ratio < 0.8, String(j.coded.ratio));
  const again = JSON.parse(spawnSync(process.execPath, args, { encoding: 'utf8' }).stdout) as { skipped: boolean };
  assert.equal(again.skipped, true);
  assert.ok(!fs.readdirSync(out).includes('.coded'), 'the coded temporaries are gone');
});
