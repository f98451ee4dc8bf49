// Peak RSS as the OS counts it (GNU time's %M) against --memory at the floor of `k3 plan`
// (issue 44): `k3 run` of a synthetic K3, a K2 and the K3's `k3 pack --compress` on 1, 2 and 4
// threads, and `k3 serve` of the K3 under 8 concurrent chat requests (4 decoded together, 4
// waiting), stopped by SIGTERM so that time reports it. Hidden size 1024, so that the trunk
// (~40 MiB) streams at the floor instead of fitting in the plan's slack. Prints a Markdown table.
//
//   npm run build && node dist/bench/peak-rss.js [--dir /tmp/k3-peak-rss] [--threads 1,2,4]
//       [--serve-threads 1,2,4] [--tokens 16] [--json]
//
// Benchmarks are not tests: nothing here gates CI (test/store/memory.test.ts holds the same bound).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { synthCheckpoint } from '../src/synth/synth.js';
import { packCheckpoint } from '../src/store/pack.js';
import { demoTokenizerFiles } from '../src/tokenizer/index.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'dist', 'src', 'cli', 'main.js');
const TIME = '/usr/bin/time';
const MiB = 2 ** 20;
const { values } = parseArgs({
  options: {
    dir: { type: 'string', default: '/tmp/k3-peak-rss' },
    threads: { type: 'string', default: '1,2,4' },
    'serve-threads': { type: 'string', default: '1,2,4' },
    tokens: { type: 'string', default: '16' },
    json: { type: 'boolean', default: false },
  },
});
const log = (s: string) => process.stderr.write(s + '\n');
if (!fs.existsSync(TIME)) throw new Error(`${TIME} is missing (apt-get install time)`);

function floorOf(dir: string, ctx: number, threads: number, extra: string[] = []): number {
  const r = spawnSync(process.execPath, [CLI, 'plan', dir, '--json', '--no-estimate', '--memory', '4G', '-c', String(ctx), '-t', String(threads), ...extra], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`k3 plan: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { floor_bytes: number }).floor_bytes;
}

/** %M of the process `time` ran, in bytes, from the file `time -o` wrote. */
const peakFrom = (file: string): number => Number(fs.readFileSync(file, 'utf8').trim().split('\n').pop()) * 1024;

interface Row {
  model: string;
  command: string;
  threads: number;
  floor: number;
  peak: number;
  warned: boolean;
}

function runRow(model: string, dir: string, threads: number): Row {
  const floor = floorOf(dir, 256, threads);
  const out = path.join(values.dir!, `time-${process.pid}.txt`);
  const args = ['run', dir, '--ids', '1,2,3,4,5,6,7,8', '-n', values.tokens!, '-c', '256', '--memory', String(floor), '-t', String(threads), '--json'];
  const r = spawnSync(TIME, ['-f', '%M', '-o', out, process.execPath, CLI, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`k3 ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return { model, command: `k3 ${args.slice(0, 1).join(' ')} -t ${threads}`, threads, floor, peak: peakFrom(out), warned: /above the memory budget/.test(r.stderr) };
}

async function serveRow(dir: string, threads: number): Promise<Row> {
  const floor = floorOf(dir, 512, threads, ['--parallel', '4']);
  const out = path.join(values.dir!, `time-serve-${process.pid}.txt`);
  const args = ['serve', dir, '--port', '0', '-c', '512', '-t', String(threads), '--parallel', '4', '--memory', String(floor)];
  const proc = spawn(TIME, ['-f', '%M', '-o', out, process.execPath, CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    proc.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = / on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    void exited.then((code) => reject(new Error(`k3 serve exited with ${code}: ${err}`)));
  });
  const statuses = await Promise.all(Array.from({ length: 8 }, async (_, i) => {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: `Request ${i}: tell me something.` }], max_tokens: Number(values.tokens), temperature: 0.8, seed: i, stream: i % 2 === 0 }),
    });
    await r.text();
    return r.status;
  }));
  if (statuses.some((s) => s !== 200)) throw new Error(`k3 serve answered ${statuses.join(', ')}`);
  // GNU time does not pass signals on: SIGTERM goes to the server, time's one child
  const server = Number(fs.readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, 'utf8').trim());
  process.kill(server, 'SIGTERM');
  const code = await exited;
  if (code !== 0) throw new Error(`k3 serve stopped with ${code}: ${err}`);
  return { model: 'K3, 8 requests', command: `k3 serve --parallel 4 -t ${threads}`, threads, floor, peak: peakFrom(out), warned: /above the memory budget/.test(err) };
}

fs.mkdirSync(values.dir!, { recursive: true });
const k3 = path.join(values.dir!, 'k3'), k2 = path.join(values.dir!, 'k2'), z = path.join(values.dir!, 'k3-compress');
if (!fs.existsSync(k3)) await synthCheckpoint({ arch: 'k3', preset: 'demo', hidden: 1024, out: k3, extraFiles: demoTokenizerFiles() });
if (!fs.existsSync(k2)) await synthCheckpoint({ arch: 'k2', hidden: 1024, out: k2 });
if (!fs.existsSync(z)) await packCheckpoint({ model: k3, out: z, compress: true });
const rows: Row[] = [];
for (const [name, dir] of [['K3 (synthetic)', k3], ['K2 (synthetic)', k2], ['K3 pack --compress', z]] as const) {
  for (const t of values.threads!.split(',').map(Number)) {
    rows.push(runRow(name, dir, t));
    log(`${name} -t ${t}: ${(rows.at(-1)!.peak / MiB).toFixed(1)} MiB of ${(rows.at(-1)!.floor / MiB).toFixed(1)}`);
  }
}
for (const t of values['serve-threads']!.split(',').map(Number)) {
  rows.push(await serveRow(k3, t));
  log(`serve -t ${t}: ${(rows.at(-1)!.peak / MiB).toFixed(1)} MiB of ${(rows.at(-1)!.floor / MiB).toFixed(1)}`);
}
if (values.json) {
  console.log(JSON.stringify(rows, null, 2));
} else {
  console.log('| model | command | threads | floor MiB | peak RSS MiB | ratio | warned |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.model} | ${r.command} | ${r.threads} | ${(r.floor / MiB).toFixed(1)} | ${(r.peak / MiB).toFixed(1)} | ${(r.peak / r.floor).toFixed(3)} | ${r.warned ? 'yes' : 'no'} |`);
}
