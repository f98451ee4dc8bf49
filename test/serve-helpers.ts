// Starting `k3 serve` on the demo K3 checkpoint for the server tests (any free port, read from
// its start line), and small fetch helpers.

import { spawn, type ChildProcess } from 'node:child_process';
import { CLI } from './helpers.js';

export interface Serving {
  url: string;
  proc: ChildProcess;
  stderr: () => string;
  stop(): Promise<number | null>;
}

export async function startServe(model: string, extra: string[] = []): Promise<Serving> {
  const proc = spawn(process.execPath, [CLI, 'serve', model, '--port', '0', '--threads', '1', '--ctx', '512', ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
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
    stop: () =>
      new Promise((resolve) => {
        if (proc.exitCode !== null) return resolve(proc.exitCode);
        proc.once('exit', (code) => resolve(code));
        proc.kill('SIGTERM');
      }),
  };
}

/** POST a JSON body (or a raw string) and return the status and the parsed JSON answer. */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
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
