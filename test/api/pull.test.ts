// `k3 pull` against a mock Hub (test/hub-mock.ts): a sharded synthetic K3 with two vision-only
// shards, an image and git metadata. The pull skips what text does not need, survives dropped
// connections, 5xx and a corrupted body, resumes after SIGKILL without fetching finished files
// again, reuses the Hub cache (online and offline), never sends the token to the CDN, and the
// folder it writes runs with `k3 run` to the same ids as the source.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { CLI } from '../helpers.js';
import { startMockHub, type MockRepo } from '../hub-mock.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { writeSafetensors } from '../../src/synth/writer.js';
import { pull } from '../../src/api/hub/pull.js';
import { globToRegExp, selectFiles } from '../../src/api/hub/select.js';
import { hubEnv, parseRepoSpec } from '../../src/api/hub/env.js';
import { UserError } from '../../src/util/errors.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-pull-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

const REPO = 'moonshot-test/Kimi-K3-Synth';
const COMMIT = 'c0ffee'.padEnd(40, '0');
const TOKEN = 'hf_test_token';
const SHARD = (i: number) => `model-0000${i}-of-000003.safetensors`;
const VISION = ['model-vision-00001.safetensors', 'model-vision-00002.safetensors'];
const IDS = ['--ids', '1,2,3', '--gen', '3'];
const FAST = { retries: 4, backoffMs: 10, stallMs: 5000 };

function k3(args: string[], env: NodeJS.ProcessEnv = {}, opts: { kill?: () => boolean } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // Asynchronous: the mock Hub answers from this process's event loop.
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, HOME: TMP, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const poll = opts.kill ? setInterval(() => opts.kill!() && child.kill('SIGKILL'), 2) : undefined;
    child.on('close', (code) => {
      clearInterval(poll);
      resolve({ code, stdout, stderr });
    });
  });
}

// The source checkpoint, served by the mock Hub as REPO at COMMIT (branch main).
const SRC = path.join(TMP, 'src');
await synthCheckpoint({ arch: 'k3', out: SRC, shards: 3 });
const idxFile = path.join(SRC, 'model.safetensors.index.json');
const idx = JSON.parse(fs.readFileSync(idxFile, 'utf8')) as { metadata: unknown; weight_map: Record<string, string> };
for (const [i, shard] of VISION.entries()) {
  const tensors = [`vision_tower.encoder.blocks.${i}.wqkv.weight`, `mm_projector.extra.${i}.weight`].map((name, j) => ({ name, dtype: 'F32' as const, shape: [64, 64], data: new Uint8Array(64 * 64 * 4).fill(i * 16 + j + 1) }));
  await writeSafetensors(path.join(SRC, shard), tensors);
  for (const t of tensors) idx.weight_map[t.name] = shard;
}
fs.writeFileSync(idxFile, JSON.stringify(idx, null, 2));
fs.writeFileSync(path.join(SRC, 'README.md'), '# Kimi K3 (synthetic)\n');
fs.writeFileSync(path.join(SRC, '.gitattributes'), '*.safetensors filter=lfs diff=lfs merge=lfs -text\n');
fs.mkdirSync(path.join(SRC, 'figures'));
fs.writeFileSync(path.join(SRC, 'figures', 'arch.png'), Buffer.alloc(50_000, 7));
const files = new Map<string, Buffer>();
const walk = (rel: string): void => {
  for (const d of fs.readdirSync(path.join(SRC, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${d.name}` : d.name;
    if (d.isDirectory()) walk(r);
    else files.set(r, fs.readFileSync(path.join(SRC, r)));
  }
};
walk('');
const repo: MockRepo = { commit: COMMIT, branches: { main: COMMIT }, files, token: TOKEN };
const hub = await startMockHub({ [REPO]: repo });
after(() => hub.close());
const size = (p: string) => files.get(p)!.length;
const EMPTY_CACHE = path.join(TMP, 'no-cache');
const ENV = { HOME: TMP, HF_ENDPOINT: hub.url, HF_TOKEN: TOKEN, HF_HUB_CACHE: EMPTY_CACHE };
const want = await k3(['run', SRC, ...IDS]);
assert.equal(want.code, 0, want.stderr);

test('pull: faults survived, vision shards and media skipped, commit pinned, same ids as the source', async () => {
  hub.reset();
  hub.drop.set(SHARD(1), 1);
  hub.drop.set('config.json', 1);
  hub.fail.set(SHARD(2), 2);
  hub.corrupt.set(SHARD(3), 1);
  const dir = path.join(TMP, 'p1');
  const notes: string[] = [];
  const r = await pull({ repo: REPO, dir, env: ENV, policy: FAST, onNote: (m) => notes.push(m) });
  assert.equal(r.commit, COMMIT);
  assert.deepEqual(r.refetched, [SHARD(3)]);
  assert.ok(r.retries >= 4, `retries ${r.retries}`);
  assert.ok(notes.some((n) => n.includes(SHARD(3)) && n.includes('mismatch')), notes.join('\n'));
  assert.deepEqual(r.skipped.map((s) => [s.path, s.reason]).sort(), [
    ['.gitattributes', 'git metadata'], ['figures/arch.png', 'image or media'], [VISION[0], 'vision tower / projector only'], [VISION[1], 'vision tower / projector only'],
  ]);
  for (const f of r.files) assert.ok(fs.readFileSync(path.join(dir, f)).equals(files.get(f)!), f);
  for (const s of [...VISION, 'figures/arch.png']) assert.ok(!fs.existsSync(path.join(dir, s)), s);
  assert.equal(fs.existsSync(path.join(dir, '.k3-pull')), false, 'no parts or lock left');
  const rec = JSON.parse(fs.readFileSync(path.join(dir, '.k3-pull.json'), 'utf8'));
  assert.equal(rec.commit, COMMIT);
  assert.equal(rec.complete, true);
  // A dropped shard resumed from where it stopped (less than 1.5x its size served), the corrupt one fetched twice.
  assert.ok(hub.served.get(SHARD(1))! < 1.5 * size(SHARD(1)), `served ${hub.served.get(SHARD(1))}`);
  assert.equal(hub.served.get(SHARD(3)), 2 * size(SHARD(3)));
  assert.equal(hub.served.get(VISION[0]), undefined);
  assert.ok(hub.authSeen.hub > 0);
  assert.equal(hub.authSeen.cdn, 0, 'the token never goes to the CDN host');
  const got = await k3(['run', dir, ...IDS]);
  assert.equal(got.code, 0, got.stderr);
  assert.equal(got.stdout, want.stdout);

  hub.reset();
  const again = await pull({ repo: REPO, dir, env: ENV, policy: FAST });
  assert.equal(again.fetched, 0);
  assert.equal(again.present.length, r.files.length);
  assert.equal(hub.gets.size, 0, 'a complete pull fetches nothing');
});

test('pull: a file whose bytes never match is refused and named; a rerun fetches only it', async () => {
  hub.reset();
  hub.corrupt.set(SHARD(2), 2);
  const dir = path.join(TMP, 'p2');
  await assert.rejects(pull({ repo: REPO, dir, env: ENV, policy: FAST, jobs: 1 }), (e: Error) => e instanceof UserError && e.message.includes(SHARD(2)) && /do not match the sha256 .* twice/.test(e.message));
  assert.equal(fs.existsSync(path.join(dir, SHARD(2))), false, 'never under its final name');
  hub.reset();
  const r = await pull({ repo: REPO, dir, env: ENV, policy: FAST });
  assert.deepEqual([...hub.gets.keys()], [SHARD(2)]);
  assert.ok(fs.readFileSync(path.join(dir, SHARD(2))).equals(files.get(SHARD(2))!));
  assert.equal(r.present.length, r.files.length - 1);
});

test('k3 pull: SIGKILL mid-file, the rerun resumes it and fetches no finished file again (--json, --pack)', async () => {
  hub.reset();
  hub.throttle = 4 << 20;
  const dir = path.join(TMP, 'p3');
  const killed = await k3(['pull', REPO, dir, '--jobs', '1'], ENV, { kill: () => (hub.served.get(SHARD(2)) ?? 0) > 0.4 * size(SHARD(2)) });
  assert.equal(killed.code, null, `killed: ${killed.stderr}`);
  assert.ok(fs.existsSync(path.join(dir, SHARD(1))), 'shard 1 finished before the kill');
  assert.equal(fs.existsSync(path.join(dir, SHARD(2))), false, 'nothing half-downloaded under its final name');
  const parts = fs.readdirSync(path.join(dir, '.k3-pull')).filter((f) => f.endsWith('.part'));
  assert.equal(parts.length, 1);
  const partBytes = fs.statSync(path.join(dir, '.k3-pull', parts[0]!)).size;
  assert.ok(partBytes > 0 && partBytes < size(SHARD(2)), `part ${partBytes}`);

  hub.reset();
  const r = await k3(['pull', REPO, dir, '--json', '--pack'], ENV);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, '', 'no progress line with --json');
  const s = JSON.parse(r.stdout);
  assert.equal(s.commit, COMMIT);
  assert.equal(s.packed, `${dir}-packed`);
  assert.equal(hub.served.get(SHARD(1)), undefined, 'a finished file is not fetched again');
  assert.equal(hub.served.get(SHARD(2)), size(SHARD(2)) - partBytes, 'the killed file resumes where its part ends');
  assert.equal(s.fetched_bytes, size(SHARD(2)) - partBytes);
  const got = await k3(['run', `${dir}-packed`, ...IDS]);
  assert.equal(got.code, 0, got.stderr);
  assert.equal(got.stdout, want.stdout);
});

test('k3 pull: SIGINT mid-file is one line, exit 130, the part kept for the rerun', async () => {
  hub.reset();
  hub.throttle = 4 << 20;
  const dir = path.join(TMP, 'p3i');
  const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, 'pull', REPO, dir, '--jobs', '1'], { env: { PATH: process.env.PATH, ...ENV }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    // One SIGINT only: a second one exits at once, without the line.
    const poll = setInterval(() => {
      if ((hub.served.get(SHARD(1)) ?? 0) > 0.3 * size(SHARD(1))) {
        clearInterval(poll);
        child.kill('SIGINT');
      }
    }, 2);
    child.on('close', (code) => {
      clearInterval(poll);
      resolve({ code, stderr });
    });
  });
  assert.equal(r.code, 130);
  assert.equal(r.stderr, `k3: pull interrupted (SIGINT); what was fetched is kept in ${path.join(dir, '.k3-pull')}: rerun to resume\n`);
  assert.equal(fs.existsSync(path.join(dir, SHARD(1))), false);
  assert.equal(fs.readdirSync(path.join(dir, '.k3-pull')).filter((f) => f.endsWith('.part')).length, 1);
});

const hasScript = spawnSync('script', ['--version']).status === 0;

test('k3 pull on a terminal draws one progress line (bytes, rate, ETA)', { skip: !hasScript && 'needs script(1) for a pseudo-terminal' }, async () => {
  hub.reset();
  const dir = path.join(TMP, 'p4');
  const cmd = [process.execPath, CLI, 'pull', REPO, dir].map((a) => `'${a}'`).join(' ');
  const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
    const child = spawn('script', ['-qfec', cmd, '/dev/null'], { env: { PATH: process.env.PATH, ...ENV }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('close', (code) => resolve({ code, out }));
  });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /\rpull \[#+\] 100%.*\/s +ETA .* 7\/7 files/);
  assert.match(r.out, /pull: moonshot-test\/Kimi-K3-Synth@main \(c0ffee000000\) in .*: 7 files, 8\.0 MiB/);
});

/** A Hub cache holding every file of the repository (blobs named by etag, snapshot symlinks, refs/main). */
function makeCache(root: string, corrupt?: string): void {
  const r = path.join(root, `models--${REPO.replace('/', '--')}`);
  fs.mkdirSync(path.join(r, 'refs'), { recursive: true });
  fs.writeFileSync(path.join(r, 'refs', 'main'), COMMIT);
  for (const [p, b] of files) {
    const lfs = /\.(safetensors|png)$/.test(p);
    const etag = lfs ? createHash('sha256').update(b).digest('hex') : createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
    fs.mkdirSync(path.join(r, 'blobs'), { recursive: true });
    const bytes = Buffer.from(b);
    if (p === corrupt) bytes[10] ^= 1;
    fs.writeFileSync(path.join(r, 'blobs', etag), bytes);
    const link = path.join(r, 'snapshots', COMMIT, p);
    fs.mkdirSync(path.dirname(link), { recursive: true });
    fs.symlinkSync(path.relative(path.dirname(link), path.join(r, 'blobs', etag)), link);
  }
}

test('pull: files in the Hub cache are reused (a corrupt one fetched); HF_HUB_OFFLINE pulls from the cache alone', async () => {
  const cache = path.join(TMP, 'cache');
  makeCache(cache, SHARD(1));
  hub.reset();
  const notes: string[] = [];
  const r = await pull({ repo: REPO, dir: path.join(TMP, 'p5'), env: { ...ENV, HF_HUB_CACHE: cache }, policy: FAST, onNote: (m) => notes.push(m) });
  assert.deepEqual([...hub.gets.keys()], [SHARD(1)], 'only the corrupt cached file is fetched');
  assert.equal(r.fromCache.length, r.files.length - 1);
  assert.ok(notes.some((n) => n.includes(SHARD(1)) && n.includes('does not match')), notes.join('\n'));

  const good = path.join(TMP, 'cache-good');
  makeCache(good);
  hub.reset();
  const dir = path.join(TMP, 'p6');
  const off = await pull({ repo: REPO, dir, env: { HOME: TMP, HF_ENDPOINT: hub.url, HF_HUB_CACHE: good, HF_HUB_OFFLINE: '1' }, policy: FAST });
  assert.equal(hub.apiCalls + hub.gets.size, 0, 'offline: no request at all');
  assert.equal(off.commit, COMMIT);
  assert.deepEqual(off.files, r.files);
  for (const f of off.files) assert.ok(fs.readFileSync(path.join(dir, f)).equals(files.get(f)!), f);
  // A Hub that cannot be reached: the cache stands in, as huggingface_hub does.
  const down: string[] = [];
  const closed = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
  const fb = await pull({ repo: REPO, dir: path.join(TMP, 'p6b'), env: { HOME: TMP, HF_ENDPOINT: `http://127.0.0.1:${closed}`, HF_HUB_CACHE: good }, policy: FAST, onNote: (m) => down.push(m) });
  assert.equal(fb.commit, COMMIT);
  assert.ok(down.some((m) => /^moonshot-test\/Kimi-K3-Synth@main: gave up after 3 retries \(127\.0\.0\.1:\d+: ECONNREFUSED\); using moonshot-test\/Kimi-K3-Synth@main = c0ffee000000 from the Hub cache/.test(m)), down.join('\n'));
  await assert.rejects(pull({ repo: REPO, dir: path.join(TMP, 'p7'), env: { HOME: TMP, HF_ENDPOINT: hub.url, HF_HUB_CACHE: EMPTY_CACHE, HF_HUB_OFFLINE: 'true' } }), /HF_HUB_OFFLINE is set and moonshot-test\/Kimi-K3-Synth@main is neither in the Hub cache/);
});

test('pull: one clear line for no token, a missing revision, too little space, a folder of another repo', async () => {
  hub.reset();
  const dir = path.join(TMP, 'p8');
  await assert.rejects(pull({ repo: REPO, dir, env: { HOME: TMP, HF_ENDPOINT: hub.url, HF_HUB_CACHE: EMPTY_CACHE }, policy: FAST }), /access denied \(HTTP 401; gated or private: set HF_TOKEN\)/);
  assert.equal(fs.existsSync(dir), false, 'a pull that failed before writing anything leaves no folder');
  await assert.rejects(pull({ repo: REPO, revision: 'v9', dir, env: ENV, policy: FAST }), /Kimi-K3-Synth@v9: no such revision/);
  await assert.rejects(pull({ repo: REPO, dir, env: ENV, policy: FAST, freeSpace: () => 1000 }), /needs 8\.0 MiB more but the filesystem has 1\.0 KiB free/);
  assert.deepEqual([...hub.gets.keys()], ['model.safetensors.index.json'], 'only the index (it decides the selection) before the space check');
  await assert.rejects(pull({ repo: 'someone/else', dir: path.join(TMP, 'p1'), env: ENV, policy: FAST }), /holds a pull of moonshot-test\/Kimi-K3-Synth/);
  const cli = await k3(['pull', 'not-a-repo'], ENV);
  assert.equal(cli.code, 2);
  assert.equal(cli.stderr, 'k3: pull: "not-a-repo" is not a model repository (owner/name[@revision])\n');
});

test('k3 pull REPO@COMMIT --include --exclude: the vision shards asked for come, the excluded file does not', async () => {
  hub.reset();
  const dir = path.join(TMP, 'p9');
  const r = await k3(['pull', `${REPO}@${COMMIT}`, dir, '--include', 'model-vision-*', '--exclude', 'README.md', '--json'], ENV);
  assert.equal(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  assert.deepEqual([s.revision, s.commit, s.files], [COMMIT, COMMIT, 8]);
  assert.deepEqual(s.skipped.map((x: { path: string }) => x.path).sort(), ['.gitattributes', 'README.md', 'figures/arch.png']);
  for (const f of VISION) assert.ok(fs.readFileSync(path.join(dir, f)).equals(files.get(f)!), f);
  assert.equal(fs.existsSync(path.join(dir, 'README.md')), false);
  const rec = JSON.parse(fs.readFileSync(path.join(dir, '.k3-pull.json'), 'utf8'));
  assert.deepEqual([rec.revision, rec.commit, rec.include, rec.exclude], [COMMIT, COMMIT, ['model-vision-*'], ['README.md']]);
});

test('selection: --include beats --exclude beats the default; globs as fnmatch; repo specs and environment', () => {
  const f = (p: string) => ({ path: p, size: 1, oid: 'x' });
  const listing = ['a.safetensors', 'v.safetensors', 'stray.safetensors', 'x.png', 'config.json', 'README.md', 'pytorch_model.bin'].map(f);
  const wm = { 'language_model.w': 'a.safetensors', 'vision_tower.w': 'v.safetensors', 'mm_projector.w': 'v.safetensors' };
  const d = selectFiles(listing, wm);
  assert.deepEqual(d.keep.map((x) => x.path), ['a.safetensors', 'config.json', 'README.md']);
  assert.deepEqual(Object.fromEntries(d.skipped.map((s) => [s.path, s.reason])), {
    'v.safetensors': 'vision tower / projector only', 'stray.safetensors': 'not in model.safetensors.index.json', 'x.png': 'image or media', 'pytorch_model.bin': 'weights in a format the engine does not read',
  });
  const o = selectFiles(listing, wm, ['v.*', '*.png'], ['*.md', '*.png']);
  assert.deepEqual(o.keep.map((x) => x.path), ['a.safetensors', 'v.safetensors', 'x.png', 'config.json']);
  assert.ok(globToRegExp('*.json').test('sub/dir/a.json'));
  assert.ok(globToRegExp('model-0000[12]-*').test('model-00002-of-3'));
  assert.ok(!globToRegExp('model-0000[!12]-*').test('model-00002-of-3'));
  assert.ok(!globToRegExp('a.b').test('axb'));
  assert.deepEqual(parseRepoSpec('moonshotai/Kimi-K3@refs/pr/1'), { repo: 'moonshotai/Kimi-K3', revision: 'refs/pr/1' });
  assert.deepEqual(parseRepoSpec('https://huggingface.co/moonshotai/Kimi-K3'), { repo: 'moonshotai/Kimi-K3', revision: 'main' });
  assert.throws(() => parseRepoSpec('../etc'), /not a model repository/);
  const e = hubEnv({ HF_HOME: '/h', HF_ENDPOINT: 'https://mirror.example/hf/', HF_HUB_OFFLINE: 'YES' });
  assert.equal(e.cacheDir, path.join('/h', 'hub'));
  assert.equal(e.endpoint.href, 'https://mirror.example/hf');
  assert.equal(e.offline, true);
  assert.equal(hubEnv({ HF_HUB_CACHE: '/c', HF_HUB_OFFLINE: '0' }).cacheDir, '/c');
  assert.equal(hubEnv({ HF_HUB_OFFLINE: '0' }).offline, false);
});
