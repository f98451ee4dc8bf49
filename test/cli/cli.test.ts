// The CLI as users of llama.cpp / Ollama expect it: negative option values, short flags,
// --version, "did you mean", `-` for stdin; Ctrl-C during `k3 run` keeps the tokens and the
// report (exit 130); a closed stdout ends quietly, a full one is one line; SIGINT during synth
// and pack leaves nothing, a stale temp dir of a killed run is removed; --ctx stops generation;
// a tokenizer that does not fit the model and a missing folder are named as such.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { removeStaleTmp } from '../../src/util/stale-tmp.js';
import { Model } from '../../src/model/model.js';
import { CLI, GOLDEN, ROOT } from '../helpers.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-cli-test-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));
const DEMO = path.join(TMP, 'demo');
await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });

const k3 = (args: string[], input?: string): SpawnSyncReturns<string> => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', input });
const json = (r: SpawnSyncReturns<string>): Record<string, unknown> => {
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as Record<string, unknown>;
};
/** One line on stderr, no stack trace. */
function oneLine(r: SpawnSyncReturns<string>, code: number, ...parts: (string | RegExp)[]): void {
  assert.equal(r.status, code, `exit ${r.status}: ${r.stderr}`);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.doesNotMatch(r.stderr, /\n\s+at |Error:/);
  for (const p of parts) assert.match(r.stderr, typeof p === 'string' ? new RegExp(p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) : p);
}
/** A pid that no process has now (a child that has exited). */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '0']).pid!;
}

test('negative option values, and short flags (llama.cpp: -m -p -n -t -c -s) mean the long ones', () => {
  const long = json(k3(['run', DEMO, '--prompt', 'hi', '--max-tokens', '4', '--threads', '1', '--ctx', '64', '--seed', '3', '--temperature', '0.9', '--presence-penalty', '-0.5', '--json']));
  const short = json(k3(['run', '-m', DEMO, '-p', 'hi', '-n', '4', '-t', '1', '-c', '64', '-s', '3', '--temperature', '0.9', '--presence-penalty', '-0.5', '--json']));
  assert.deepEqual(short.generated_ids, long.generated_ids);
  assert.equal((long.generated_ids as number[]).length, 4);
  const eq = json(k3(['run', DEMO, '--prompt=hi', '-n', '4', '--seed=3', '--temperature', '0.9', '--presence-penalty=-0.5', '--json']));
  assert.deepEqual(eq.generated_ids, long.generated_ids);
  const r = k3(['run', DEMO, '-p', 'hi', '-n', '2', '--seed', '-1', '--temperature', '1', '--json']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /--seed -1: using seed \d+/);
  oneLine(k3(['run', DEMO, '-p', 'hi', '--seed', '-2']), 2, '--seed must be an integer');
});

test('--version, and "did you mean" for an unknown flag or command', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  for (const args of [['--version'], ['run', '--version']]) {
    const r = k3(args);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^k3 ${pkg.version.replace(/\./g, '\\.')} `));
  }
  oneLine(k3(['run', DEMO, '-p', 'hi', '--sed', '1']), 2, 'unknown option --sed; did you mean --seed?');
  oneLine(k3(['run', DEMO, '-p', 'hi', '--bogus-flag']), 2, 'unknown option --bogus-flag');
  oneLine(k3(['rn', DEMO]), 2, 'unknown command rn; did you mean run?');
  oneLine(k3(['run', DEMO, '--seed']), 2, /--seed <value>.*argument missing/);
});

test('-f - and --text-file - read stdin', () => {
  const a = json(k3(['run', DEMO, '-p', 'Hello there', '-n', '2', '--json']));
  const b = json(k3(['run', DEMO, '-f', '-', '-n', '2', '--json'], 'Hello there'));
  assert.deepEqual(b.prompt_ids, a.prompt_ids);
  assert.deepEqual(b.generated_ids, a.generated_ids);
  const t = k3(['tokenize', DEMO, '--text-file', '-', '--json'], 'Hello there');
  assert.equal(t.status, 0, t.stderr);
  assert.deepEqual((JSON.parse(t.stdout) as { ids: number[] }).ids, a.prompt_ids);
  oneLine(k3(['run', DEMO, '-f', path.join(TMP, 'missing.txt')]), 2, 'cannot read --prompt-file', 'no such file');
});

test('time_to_first_token in --json and the report; --ctx stops generation (stop_reason context)', () => {
  const j = json(k3(['run', DEMO, '--ids', '5,6', '-n', '10', '-c', '4', '--ignore-eos', '--json']));
  assert.equal(j.stop_reason, 'context');
  assert.equal((j.generated_ids as number[]).length, 2, 'prompt 2 + 2 generated fill a context of 4');
  assert.ok(typeof j.time_to_first_token === 'number' && j.time_to_first_token > 0);
  const r = k3(['run', DEMO, '--ids', '5,6', '-n', '10', '-c', '4']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /context of 4 tokens is full/);
  assert.match(r.stderr, /first token after \d/);
  oneLine(k3(['run', DEMO, '--ids', '5,6,7', '-n', '10', '-c', '2']), 2, 'the prompt is 3 tokens', '--ctx 2');
  // Without --ctx, -n N plans the cache for prompt + N tokens.
  assert.equal(json(k3(['run', DEMO, '--ids', '5,6', '-n', '3', '--json'])).ctx, 5);
  // k3 chat: the reply stops at the context, and so does every later turn, with a note.
  const c = k3(['chat', DEMO, '--ctx', '160', '--ignore-eos', '--max-tokens', '1000', '-t', '1', '--no-thinking'], 'Hello there\nmore\n/stats\n');
  assert.equal(c.status, 0, c.stderr);
  assert.match(c.stdout, /context +160 tokens/);
  assert.match(c.stdout, /stop +context/);
  assert.equal(c.stderr.match(/the context of 160 tokens is full/g)?.length, 2, c.stderr);
});

test('SIGINT during k3 run: stops at the next token, prints the tokens and the report, exit 130', async () => {
  const c = spawn(process.execPath, [CLI, 'run', DEMO, '-p', 'hi', '-n', '100000', '--ignore-eos', '-t', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let sent = false;
  c.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    if (!sent && out.length > 10) {
      sent = true;
      c.kill('SIGINT');
    }
  });
  c.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((r) => c.on('close', (x) => r(x)));
  assert.equal(code, 130, err);
  assert.ok(out.length > 10 && out.endsWith('\n'), 'the text so far, ended with a newline');
  assert.match(err, /\[interrupted\]/);
  assert.match(err, /decode .* s\/token/);
  assert.match(err, /peak RSS/);
});

test('a closed stdout (| head -c 5) ends quietly with exit 0; a full one (> /dev/full) is one line, exit 1', async () => {
  const c = spawn(process.execPath, [CLI, 'run', DEMO, '-p', 'hi', '-n', '100000', '--ignore-eos', '-t', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  let got = 0;
  c.stderr.on('data', (d: Buffer) => (err += d.toString()));
  c.stdout.on('data', (d: Buffer) => {
    got += d.length;
    if (got >= 5) c.stdout.destroy(); // what head does after 5 bytes
  });
  const code = await new Promise<number | null>((r) => c.on('close', (x) => r(x)));
  assert.equal(code, 0, err);
  assert.equal(err, '');
  if (fs.existsSync('/dev/full')) {
    const fd = fs.openSync('/dev/full', 'w');
    try {
      const r = spawnSync(process.execPath, [CLI, 'run', DEMO, '-p', 'hi', '-n', '4'], { stdio: ['ignore', fd, 'pipe'], encoding: 'utf8' });
      assert.equal(r.status, 1, r.stderr);
      const lines = r.stderr.trim().split('\n');
      assert.match(lines[0]!, /^k3: cannot write to stdout \(ENOSPC/);
      assert.doesNotMatch(r.stderr, /\n\s+at /);
    } finally {
      fs.closeSync(fd);
    }
  }
});

/** Spawn `args`, send `sig` as soon as `<out>.tmp-<pid>` appears, and wait for the exit. */
async function interruptWhenWriting(args: string[], out: string, sig: NodeJS.Signals): Promise<{ code: number | null; err: string }> {
  const c = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  c.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const tmp = `${out}.tmp-${c.pid}`;
  const poll = setInterval(() => {
    if (fs.existsSync(tmp)) {
      clearInterval(poll);
      c.kill(sig);
    }
  }, 2);
  const code = await new Promise<number | null>((r) => c.on('close', (x) => r(x)));
  clearInterval(poll);
  return { code, err };
}

const leftovers = (out: string): string[] => fs.readdirSync(path.dirname(out)).filter((f) => f.startsWith(path.basename(out)));

test('SIGINT / SIGTERM during k3 synth leave no OUT and no temporary directory; a stale one is removed', async () => {
  const out = path.join(TMP, 'synth-big');
  const r = await interruptWhenWriting(['synth', '--arch', 'k3', '--preset', 'k3-medium', '--out', out], out, 'SIGINT');
  assert.equal(r.code, 130, r.err);
  assert.match(r.err, /^k3: synth interrupted \(SIGINT\)/);
  assert.deepEqual(leftovers(out), []);
  const t = await interruptWhenWriting(['synth', '--arch', 'k3', '--preset', 'k3-medium', '--out', out], out, 'SIGTERM');
  assert.equal(t.code, 130, t.err);
  assert.deepEqual(leftovers(out), []);

  const small = path.join(TMP, 'synth-small');
  const stale = `${small}.tmp-${deadPid()}`;
  fs.mkdirSync(stale);
  fs.writeFileSync(path.join(stale, 'model.safetensors'), 'partial');
  const ok = k3(['synth', '--arch', 'kimi_linear', '--out', small]);
  assert.equal(ok.status, 0, ok.stderr);
  assert.deepEqual(leftovers(small), ['synth-small'], 'the stale temp dir of a killed run is gone');
});

test('SIGINT during k3 pack leaves no OUT and no temporary directory; a stale one is removed', async () => {
  const src = path.join(TMP, 'pack-src');
  await synthCheckpoint({ arch: 'k2', out: src, hidden: 1024, vocab: 16384 });
  const out = path.join(TMP, 'packed');
  const stale = `${out}.tmp-${deadPid()}`;
  fs.mkdirSync(stale);
  const r = await interruptWhenWriting(['pack', src, out], out, 'SIGINT');
  assert.equal(r.code, 130, r.err);
  assert.match(r.err, /pack interrupted/);
  assert.deepEqual(leftovers(out), [], 'neither OUT, nor this run\'s temp dir, nor the stale one');
  // The helper itself: a live pid's temp dir is kept.
  const live = `${out}.tmp-${process.pid}`;
  fs.mkdirSync(live);
  assert.deepEqual(removeStaleTmp(out), []);
  fs.rmSync(live, { recursive: true });
});

test('errors name the real cause: a missing model folder; a tokenizer that does not fit the vocabulary (at load)', async () => {
  oneLine(k3(['run', path.join(TMP, 'nonexistent'), '--prompt', 'hi']), 2, 'model directory', 'does not exist');
  oneLine(k3(['chat', path.join(TMP, 'nonexistent')], ''), 2, 'model directory', 'does not exist');
  const small = path.join(TMP, 'vocab-300');
  await synthCheckpoint({ arch: 'k3', out: small, vocab: 300 });
  const r = k3(['run', small, '--tok', DEMO, '--prompt', 'hi', '-n', '2']);
  oneLine(r, 2, `the tokenizer in ${DEMO} has 512 ids but the model's vocabulary is 300`);
  assert.equal(r.stdout, '', 'refused before generating');
});

test('README: `npm run -s k3 -- run MODEL --prompt hi --json | python3 -m json.tool` is valid JSON', { skip: spawnSync('python3', ['--version']).status !== 0 ? 'no python3' : false }, () => {
  const r = spawnSync('sh', ['-c', `npm run -s k3 -- run "${DEMO}" --prompt hi -n 2 --json | python3 -m json.tool`], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.ok(Array.isArray((JSON.parse(r.stdout) as { generated_ids: unknown }).generated_ids));
});

test('k3 plan: an estimate of s/token on this machine, labelled as one; --no-estimate skips it', () => {
  const dir = path.join(GOLDEN, 'k3');
  const r = k3(['plan', dir, '--memory', '1G', '-t', '1']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^estimate \(measured on this machine .*not a run\): [\d.]+ s\/token/m);
  const j = json(k3(['plan', dir, '--memory', '1G', '-t', '1', '--json'])) as { estimate: { seconds_per_token: number; disk_bytes_per_second: number | null } };
  assert.ok(j.estimate.seconds_per_token > 0 && j.estimate.disk_bytes_per_second! > 0);
  assert.equal((json(k3(['plan', dir, '--no-estimate', '--json'])) as { estimate?: unknown }).estimate, undefined);
});

test('--printable (what the demo prints): no special tokens, control characters or U+FFFD', () => {
  const r = k3(['run', DEMO, '-p', 'The quick brown fox', '-n', '64', '--ignore-eos', '--printable', '-t', '1']);
  assert.equal(r.status, 0, r.stderr);
  // eslint-disable-next-line no-control-regex -- control characters are what this test looks for
  const unprintable = new RegExp('[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\ufffd]|\\[EOS\\]|<\\|', 'u');
  assert.doesNotMatch(r.stdout.slice(0, -1), unprintable);
  const raw = json(k3(['run', DEMO, '-p', 'The quick brown fox', '-n', '64', '--ignore-eos', '--json', '-t', '1']));
  assert.match(raw.text as string, /[\ufffd]|\[[A-Z]+\]|<\|/u, 'the random weights do produce such pieces (else this test shows nothing)');
  const demo = k3(['demo', '--random', '--out', DEMO, '--gen', '8']);
  assert.equal(demo.status, 0, demo.stderr);
  assert.match(demo.stderr, /weights are random/);
});

test('loading progress: preload reports bytes read up to the total it plans (drawn on a TTY by run / chat)', async () => {
  const model = Model.open(DEMO, { ctx: 64 });
  try {
    const seen: [number, number][] = [];
    await model.store.preload((done, total) => seen.push([done, total]));
    const last = seen.at(-1)!;
    assert.ok(seen.length >= 2 && last[0] === last[1] && last[1] > 1e6, JSON.stringify(seen.slice(-3)));
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i]![0] >= seen[i - 1]![0] && seen[i]![0] <= seen[i]![1]);
  } finally {
    await model.close();
  }
});
