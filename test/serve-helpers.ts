// Starting `k3 serve` on the demo K3 checkpoint for the server tests (any free port, read from
// its start line), and small fetch helpers.

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { readNpyF32 } from '../src/util/npy.js';
import { CLI } from './helpers.js';

export interface Serving {
  url: string;
  proc: ChildProcess;
  stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export async function startServe(model: string, extra: string[] = [], env: Record<string, string> = {}): Promise<Serving> {
  const proc = spawn(process.execPath, [CLI, 'serve', model, '--port', '0', '--threads', '1', '--ctx', '512', ...extra], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  const url = await new Promise<string>((resolve, reject) => {
    proc.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = / on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`k3 serve exited with ${code}: ${err}`)));
  });
  return {
    url,
    proc,
    stderr: () => err,
    stop: (signal = 'SIGTERM') =>
      new Promise((resolve) => {
        if (proc.exitCode !== null) return resolve(proc.exitCode);
        proc.once('exit', (code) => resolve(code));
        proc.kill(signal);
      }),
  };
}

/** POST a JSON body (or a raw string) and return the status and the parsed JSON answer. */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<{ status: number; json: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body), signal });
  const text = await r.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = { raw: text };
  }
  return { status: r.status, json };
}

/** Read an SSE response: the parsed data chunks up to [DONE] (the second value says whether it came). */
export async function sse(res: Response): Promise<{ chunks: any[]; done: boolean }> {
  const text = await res.text();
  const chunks: any[] = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    if (!block.startsWith('data: ')) continue;
    const d = block.slice(6);
    if (d === '[DONE]') done = true;
    else chunks.push(JSON.parse(d));
  }
  return { chunks, done };
}

/** `k3 logits` on `ids`: the argmax of the last row and its log-probability (log-softmax in double). */
export async function lastRowByK3Logits(model: string, ids: number[], dir: string): Promise<{ id: number; logprob: number }> {
  const out = join(dir, `logits-${process.pid}.npy`);
  // Not spawnSync: a blocked event loop would miss the server closing an idle keep-alive
  // connection, and the next fetch would go out on the dead socket.
  await promisify(execFile)(process.execPath, [CLI, 'logits', model, '--ids', ids.join(','), '--out', out, '--threads', '1', '--ctx', '512'], { encoding: 'utf8' });
  const { shape, data } = readNpyF32(out);
  const V = shape[1]!;
  const row = data.subarray((ids.length - 1) * V, ids.length * V);
  let best = 0;
  for (let i = 1; i < V; i++) if (row[i]! > row[best]!) best = i;
  let sum = 0;
  for (const v of row) sum += Math.exp(v - row[best]!);
  return { id: best, logprob: -Math.log(sum) };
}
