// Every byte a pack computes on is checked: the in-place experts (a digest each, recorded at pack
// time), packed.json itself (its own digest; no unknown key), and each part of a record the first
// time it is read (a transient flip in a small tensor is caught without --verify-reads). Plus the
// lesser promises: a sidecar missing an entry is refused by run as by verify, and a state file is
// refused by a model with the same shapes but other weights. A pack of a source with a sidecar is
// checked against it as it reads: a changed byte is not sealed under a fresh digest.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, GOLDEN } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { loadState, saveState } from '../../src/generate/state-file.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { UserError } from '../../src/util/errors.js';
import { CHECKSUMS_NAME } from '../../src/store/checksums.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-pack-integrity-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

function k3(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertOneLine(r: { code: number | null; stdout: string; stderr: string }, code: number, ...mention: string[]): void {
  assert.equal(r.code, code, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('k3: '));
  assert.equal(lines.length, 1, `one error line, got: ${r.stderr}`);
  assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  for (const m of mention) assert.ok(r.stderr.includes(m), `mentions ${m}: ${r.stderr}`);
  assert.equal(r.stdout.trim(), '', 'no token printed');
}

function copyDir(from: string, tag: string): string {
  const dir = path.join(TMP, tag);
  fs.cpSync(from, dir, { recursive: true });
  for (const f of fs.readdirSync(dir)) fs.chmodSync(path.join(dir, f), 0o644);
  return dir;
}

function flipByte(file: string, at: number): void {
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, at);
  b[0]! ^= 0x01;
  fs.writeSync(fd, b, 0, 1, at);
  fs.closeSync(fd);
}

interface Manifest {
  experts: { files: string[]; expert_bytes: number; at: Record<string, [number, number]>; sha256: Record<string, string> };
  source_shards: Record<string, unknown>[];
  manifest_sha256?: string;
  [k: string]: unknown;
}

const readJson = (f: string): Manifest => JSON.parse(fs.readFileSync(f, 'utf8')) as Manifest;
/** The manifest's digest as the reader computes it (JSON.stringify without manifest_sha256). */
function redigest(m: Manifest): Manifest {
  const rest = { ...m };
  delete rest.manifest_sha256;
  return { ...rest, manifest_sha256: createHash('sha256').update(JSON.stringify(rest)).digest('hex') };
}

const IDS = ['--ids', '1,2,3', '--gen', '4'];

/** Flags for a run at the floor of `dir` (IDS' context: 7 tokens), on one thread, reading
 *  through the page cache: the plan counts threads and bounce buffers, so it is made for the same. */
function atFloor(dir: string): string[] {
  const r = k3(['plan', dir, '--json', '--no-estimate', '--memory', '4G', '-c', '7', '-t', '1', '--io', 'buffered']);
  assert.equal(r.code, 0, r.stderr);
  return ['--memory', String((JSON.parse(r.stdout) as { floor_bytes: number }).floor_bytes), '--threads', '1', '--io', 'buffered'];
}
let clean: string | undefined;
const cleanK3 = (): string => (clean ??= k3(['run', path.join(GOLDEN, 'k3'), ...IDS]).stdout);

/** The K3 golden copied (its shards are changed below), packed, and the experts the run reads. */
async function k3Pack(tag: string): Promise<{ src: string; out: string; clean: string; used: string[] }> {
  const src = copyDir(path.join(GOLDEN, 'k3'), `k3-src-${tag}`);
  const out = path.join(TMP, `k3-pack-${tag}`);
  const p = k3(['pack', src, out]);
  assert.equal(p.code, 0, p.stderr);
  const r = k3(['run', out, ...IDS]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, cleanK3(), 'the intact pack runs the clean tokens');
  // Which experts a prefill of these ids routes to (the CLI run reads them too).
  const model = Model.open(out, { ctx: 64 });
  const used: string[] = [];
  model.store.trace = (e) => {
    if (e.kind === 'read-expert' && !e.guess) used.push(`layers.${e.layer}.block_sparse_moe.experts.${e.expert}.`);
  };
  await model.forward(model.newState(), [1, 2, 3], 'last');
  await model.close();
  assert.ok(used.length > 0, 'the prefill reads experts');
  return { src, out, clean: r.stdout, used };
}

test('a flipped byte of an expert left in place: run exits 4 naming it, pack --verify fails naming it', async () => {
  const { out, used } = await k3Pack('flip');
  const m = readJson(path.join(out, 'packed.json'));
  const prefix = Object.keys(m.experts.at).find((k) => k.endsWith(used[0]!))!;
  assert.ok(prefix, `expert ${used[0]} is in the manifest`);
  assert.match(m.experts.sha256[prefix]!, /^[0-9a-f]{64}$/, 'the in-place expert has a digest');
  const [fi, off] = m.experts.at[prefix]!;
  const shard = path.join(TMP, 'k3-src-flip', m.experts.files[fi]!);
  flipByte(shard, off + (m.experts.expert_bytes >> 1));
  for (const extra of [[], [...atFloor(out), '--no-preload']]) assertOneLine(k3(['run', out, ...IDS, ...extra]), 4, shard, `expert ${prefix}`, 'checksum');
  const v = k3(['pack', '--verify', out]);
  assert.notEqual(v.code, 0, v.stdout);
  assert.ok(v.stderr.includes(`expert ${prefix}`), v.stderr);
  assert.notEqual(k3(['verify', out]).code, 0);
  flipByte(shard, off + (m.experts.expert_bytes >> 1)); // repaired
  assert.equal(k3(['pack', '--verify', out]).code, 0);
});

test('an expert offset shifted in packed.json: exit 4 (the manifest digest); with the digest redone, exit 4 (the expert digest)', async () => {
  const { out, used } = await k3Pack('shift');
  const file = path.join(out, 'packed.json');
  const intact = fs.readFileSync(file, 'utf8');
  const m = readJson(file);
  const prefix = Object.keys(m.experts.at).find((k) => k.endsWith(used[0]!))!;
  m.experts.at[prefix]![1] += 4096;
  fs.writeFileSync(file, JSON.stringify(m));
  assertOneLine(k3(['run', out, ...IDS]), 4, file, 'manifest_sha256');
  assertOneLine(k3(['pack', '--verify', out]), 4, 'manifest_sha256');
  // A manifest rewritten with a matching digest still points the expert at other bytes.
  fs.writeFileSync(file, JSON.stringify(redigest(m)));
  assertOneLine(k3(['run', out, ...IDS]), 4, `expert ${prefix}`, 'checksum');
  const v = k3(['pack', '--verify', out]);
  assert.notEqual(v.code, 0);
  assert.ok(v.stderr.includes(`expert ${prefix}`), v.stderr);
  fs.writeFileSync(file, intact);
});

test('packed.json: a renamed or unknown key is refused naming it; a manifest without its digest is refused', async () => {
  const out = path.join(TMP, 'k2-keys');
  assert.equal(k3(['pack', path.join(GOLDEN, 'k2-yarn'), out]).code, 0);
  const file = path.join(out, 'packed.json');
  const intact = readJson(file);
  const edits: [string, (m: Manifest) => void, string][] = [
    ['renamed shard key', (m) => ((m.source_shards[0]!.fyle = m.source_shards[0]!.file), delete m.source_shards[0]!.file), '"fyle"'],
    ['unknown top-level key', (m) => (m.comment = 'hi'), '"comment"'],
    ['renamed record key', (m) => {
      const r = (m.records as Record<string, unknown>[])[1]!;
      r.sha = r.sha256;
      delete r.sha256;
    }, '"sha"'],
  ];
  for (const [what, edit, key] of edits) {
    const m = structuredClone(intact);
    edit(m);
    fs.writeFileSync(file, JSON.stringify(redigest(m))); // the digest matches: the key check refuses it
    const r = k3(['run', out, ...IDS]);
    assert.equal(r.code, 2, `${what}: ${r.stderr}`);
    assert.ok(r.stderr.includes(key), `${what}: names ${key}: ${r.stderr}`);
  }
  const old = structuredClone(intact);
  delete old.manifest_sha256;
  fs.writeFileSync(file, JSON.stringify(old));
  assertOneLine(k3(['run', out, ...IDS]), 2, 'manifest_sha256', 'k3 pack again');
});

test('a transient flip in a packed small tensor (K3_FAULT=flip:small:0) is caught without --verify-reads, plain and --compress', () => {
  for (const compress of [[], ['--compress']]) {
    const out = path.join(TMP, `k3-small${compress.length ? '-coded' : ''}`);
    assert.equal(k3(['pack', path.join(GOLDEN, 'k3'), out, ...compress]).code, 0);
    // All resident, and (plain pack) streamed at the floor.
    for (const extra of compress.length ? [[]] : [[], atFloor(out)]) {
      assertOneLine(k3(['run', out, ...IDS, ...extra], { K3_FAULT: 'flip:small:0' }), 4, 'checksum', 'offset');
    }
  }
  // A fault that gives the bytes back intact changes nothing.
  const r = k3(['run', path.join(TMP, 'k3-small-coded'), ...IDS], { K3_FAULT: 'short:small:0' });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, cleanK3());
});

test('k3 run refuses a sidecar that lacks a tensor (as k3 verify does)', () => {
  const dir = copyDir(path.join(GOLDEN, 'k2-yarn'), 'k2-sidecar');
  assert.equal(k3(['verify', dir]).code, 0);
  const file = path.join(dir, CHECKSUMS_NAME);
  const sc = JSON.parse(fs.readFileSync(file, 'utf8')) as { tensors: Record<string, unknown> };
  const name = 'model.layers.1.input_layernorm.weight';
  assert.ok(sc.tensors[name]);
  delete sc.tensors[name];
  fs.writeFileSync(file, JSON.stringify(sc));
  assertOneLine(k3(['run', dir, ...IDS]), 2, name, CHECKSUMS_NAME);
  assertOneLine(k3(['verify', dir]), 2, name);
});

test('a source byte changed since k3 verify: k3 pack exits 4 naming the tensor and the sidecar, and writes nothing', () => {
  const src = copyDir(path.join(GOLDEN, 'k3'), 'k3-src-sidecar');
  assert.equal(k3(['verify', src]).code, 0);
  const tensors = (JSON.parse(fs.readFileSync(path.join(src, CHECKSUMS_NAME), 'utf8')) as { tensors: Record<string, { file: string; offset: number; length: number }> }).tensors;
  // an intact source packs, its sidecar checked; which trunk matrices --compress codes
  const coded = path.join(TMP, 'k3-sidecar-coded');
  assert.equal(k3(['pack', src, coded, '--compress']).code, 0);
  const codedName = Object.entries(readJson(path.join(coded, 'packed.json')).tensors as Record<string, { encoding?: unknown }>).find(([, t]) => t.encoding)![0];
  fs.rmSync(coded, { recursive: true });
  const expert = Object.keys(tensors).find((n) => /\.experts\.\d+\./.test(n))!;
  for (const [name, flags] of [[expert, []], [codedName, []], [codedName, ['--compress']]] as const) {
    const t = tensors[name]!;
    flipByte(path.join(src, t.file), t.offset + (t.length >> 1));
    const out = path.join(TMP, 'k3-sidecar-out');
    const r = k3(['pack', src, out, ...flags]);
    assert.equal(r.code, 4, `${name} ${flags.join(' ')}: ${r.stderr}`);
    const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('k3: '));
    assert.equal(lines.length, 1, r.stderr);
    assert.ok(lines[0]!.includes(`tensor ${name}`) && lines[0]!.includes(CHECKSUMS_NAME), r.stderr);
    assert.equal(fs.existsSync(out), false, 'nothing packed');
    flipByte(path.join(src, t.file), t.offset + (t.length >> 1)); // repaired
  }
});

test('a state saved from one model is refused by another with the same shapes but other weights; a pack of it loads it', async () => {
  const a = path.join(TMP, 'seed-a');
  const b = path.join(TMP, 'seed-b');
  await synthCheckpoint({ arch: 'k3', out: a, vocab: 300, seed: 1 });
  await synthCheckpoint({ arch: 'k3', out: b, vocab: 300, seed: 2 });
  const ma = Model.open(a, { ctx: 64 });
  const file = path.join(TMP, 'a.k3s');
  try {
    const st = ma.newState();
    await ma.forward(st, [5, 6, 7], 'none');
    saveState(file, ma, st);
    assert.deepEqual(loadState(file, ma).state.tokens, [5, 6, 7]);
  } finally {
    await ma.close();
  }
  const mb = Model.open(b, { ctx: 64 });
  try {
    assert.throws(() => loadState(file, mb), (e: unknown) => e instanceof UserError && e.message.includes(file) && /different model/.test(e.message) && /weights/.test(e.message));
  } finally {
    await mb.close();
  }
  const packed = path.join(TMP, 'seed-a-packed');
  assert.equal(k3(['pack', a, packed, '--compress']).code, 0);
  const mp = Model.open(packed, { ctx: 64 });
  try {
    assert.deepEqual(loadState(file, mp).state.tokens, [5, 6, 7], 'the same weights, packed');
  } finally {
    await mp.close();
  }
});
