// Load test of `k3 serve` (issue 11): N streaming chat clients at once (default 32), a quarter
// of them disconnecting mid-stream, against the same requests sent one at a time, in one run.
// Reports throughput (generated tokens/s over the wall time), p50 / p99 time to first token, the
// server's peak RSS against --memory, failures other than the deliberate disconnects, /health
// afterwards, and whether every completed reply equals its solo run (same seed: same bytes).
// Each request bans the model's stop ids with logit_bias -100, so that every reply runs to
// --tokens (a trained model such as models-shipped/demo-k3-trained otherwise ends at once).
// Plain fetch (no autocannon: it does not read SSE streams per request); the server is a child
// process, so its RSS is its own.
//
//   npm run build && node dist/bench/serve.js [--model models/demo-k3] [--clients 32]
//       [--tokens 32] [--parallel 8] [--memory 2G] [--threads 2] [--json]
//
// Benchmarks are not tests: nothing here gates CI.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { synthCheckpoint } from '../src/synth/synth.js';
import { demoTokenizerFiles, loadTokenizer, stopTokenIds } from '../src/tokenizer/index.js';
import { parseSize } from '../src/store/plan.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

interface Outcome {
  text: string;
  tokens: number;
  ttft: number;
  ok: boolean;
  disconnected: boolean;
}

async function streamOne(url: string, i: number, tokens: number, disconnectAfter: number | null, bias: Record<string, number>): Promise<Outcome> {
  const t0 = performance.now();
  const ac = new AbortController();
  const out: Outcome = { text: '', tokens: 0, ttft: NaN, ok: false, disconnected: false };
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      signal: ac.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: `Request number ${i}: tell me something.` }], max_tokens: tokens, temperature: 0.8, seed: i, logit_bias: bias, stream: true, stream_options: { include_usage: true } }),
    });
    if (!res.ok) return out;
    const dec = new TextDecoder();
    let buf = '';
    for await (const part of res.body!) {
      buf += dec.decode(part as Uint8Array, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, k);
        buf = buf.slice(k + 2);
        if (line === 'data: [DONE]') {
          out.ok = true;
          continue;
        }
        const chunk = JSON.parse(line.slice(6));
        if (chunk.usage) out.tokens = chunk.usage.completion_tokens; // exact count (text pieces can hold several tokens)
        const d = chunk.choices[0]?.delta;
        if (d?.content === undefined || d.role) continue;
        if (out.tokens === 0) out.ttft = (performance.now() - t0) / 1000;
        out.tokens++;
        out.text += d.content;
        if (disconnectAfter !== null && out.tokens >= disconnectAfter) {
          out.disconnected = true;
          ac.abort();
          return out;
        }
      }
    }
  } catch (e) {
    if (!out.disconnected) throw e;
  }
  return out;
}

function pct(xs: number[], p: number): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

function peakRss(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { model: { type: 'string' }, clients: { type: 'string' }, tokens: { type: 'string' }, parallel: { type: 'string' }, memory: { type: 'string' }, threads: { type: 'string' }, json: { type: 'boolean' } } });
  const model = values.model ?? path.join(ROOT, 'models', 'demo-k3');
  if (!fs.existsSync(path.join(model, 'config.json'))) await synthCheckpoint({ arch: 'k3', preset: 'demo', out: model, extraFiles: demoTokenizerFiles() });
  const cfg = JSON.parse(fs.readFileSync(path.join(model, 'config.json'), 'utf8')) as { eos_token_id?: number | number[]; text_config?: { eos_token_id?: number | number[] } };
  const bias = Object.fromEntries(stopTokenIds(await loadTokenizer(model), cfg.eos_token_id ?? cfg.text_config?.eos_token_id).map((id) => [String(id), -100]));
  const clients = Number(values.clients ?? 32);
  const tokens = Number(values.tokens ?? 32);
  const memory = values.memory ?? '2G';
  const args = [path.join(ROOT, 'dist', 'src', 'cli', 'main.js'), 'serve', model, '--port', '0', '--memory', memory, '--parallel', values.parallel ?? '8', '--threads', values.threads ?? '2', '--queue', String(clients)];
  // each phase on a fresh server, so that neither finds the other's prompts in the prefix cache
  const start = async () => {
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const url = await new Promise<string>((resolve, reject) => {
      proc.stderr.on('data', (d: Buffer) => {
        err += d;
        const m = / on (http:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]!);
      });
      proc.once('exit', (c) => reject(new Error(`k3 serve exited ${c}: ${err}`)));
    });
    return { proc, url, stop: () => new Promise<void>((r) => (proc.once('exit', () => r()), proc.kill('SIGTERM'))) };
  };
  const first = await start();
  const t0 = performance.now();
  const solo: Outcome[] = [];
  try {
    for (let i = 0; i < clients; i++) solo.push(await streamOne(first.url, i, tokens, null, bias));
  } finally {
    await first.stop();
  }
  const soloWall = (performance.now() - t0) / 1000;
  const { proc, url } = await start();
  try {
    // together: every client at once, every fourth disconnecting after a few tokens
    const t1 = performance.now();
    const together = await Promise.all(Array.from({ length: clients }, (_, i) => streamOne(url, i, tokens, i % 4 === 3 ? Math.max(1, tokens >> 3) : null, bias)));
    const wall = (performance.now() - t1) / 1000;
    const health = (await fetch(`${url}/health`)).status;
    const completed = together.filter((o) => !o.disconnected);
    const failed = completed.filter((o) => !o.ok).length;
    const mismatched = completed.filter((o) => o.text !== solo[together.indexOf(o)]!.text).length;
    const rss = peakRss(proc.pid!);
    const budget = parseSize(memory);
    const soloTok = solo.reduce((a, o) => a + o.tokens, 0);
    const togTok = together.reduce((a, o) => a + o.tokens, 0);
    const r = {
      clients,
      tokens_per_request: tokens,
      disconnected: together.filter((o) => o.disconnected).length,
      solo: { wall_s: soloWall, tokens_per_s: soloTok / soloWall, ttft_p50_s: pct(solo.map((o) => o.ttft), 50), ttft_p99_s: pct(solo.map((o) => o.ttft), 99) },
      concurrent: { wall_s: wall, tokens_per_s: togTok / wall, ttft_p50_s: pct(together.map((o) => o.ttft), 50), ttft_p99_s: pct(together.map((o) => o.ttft), 99) },
      throughput_ratio: togTok / wall / (soloTok / soloWall),
      failed,
      completed_equal_to_solo: `${completed.length - mismatched}/${completed.length}`,
      peak_rss_bytes: rss,
      memory_bytes: budget,
      rss_under_memory: rss < budget,
      health_after: health,
    };
    if (values.json) console.log(JSON.stringify(r));
    else {
      const f = (x: number) => x.toFixed(3);
      console.log(`k3 serve load test: ${clients} streaming clients, ${tokens} tokens each, ${r.disconnected} disconnecting mid-stream`);
      console.log('                 tokens/s   TTFT p50   TTFT p99   wall');
      console.log(`one at a time  ${r.solo.tokens_per_s.toFixed(1).padStart(10)}  ${f(r.solo.ttft_p50_s).padStart(8)} s ${f(r.solo.ttft_p99_s).padStart(8)} s ${r.solo.wall_s.toFixed(1)} s`);
      console.log(`all at once    ${r.concurrent.tokens_per_s.toFixed(1).padStart(10)}  ${f(r.concurrent.ttft_p50_s).padStart(8)} s ${f(r.concurrent.ttft_p99_s).padStart(8)} s ${r.concurrent.wall_s.toFixed(1)} s`);
      console.log(`throughput ratio ${r.throughput_ratio.toFixed(2)}x; failed ${failed}; completed replies equal to solo: ${r.completed_equal_to_solo}`);
      console.log(`peak RSS ${(rss / 2 ** 20).toFixed(0)} MiB of --memory ${(budget / 2 ** 20).toFixed(0)} MiB (${r.rss_under_memory ? 'under' : 'OVER'}); /health afterwards: ${health}`);
    }
  } finally {
    proc.kill('SIGTERM');
  }
}

await main();
