// Fuzzing `k3 serve` as a server (issue 44), beside fuzz-http's bodies: batches of concurrent
// clients that send slowly, stall and hang up, go away mid-stream, send prompts around and far
// past the context, or flood the queue. Every client gets an answer (a completion, a 4xx, 429
// when the queue is full) or is the one that hung up; never a 5xx, a crash or a hang; after each
// batch /health answers and the engine drains to no sequence. Fixed seeds (test/fuzz.ts); a few
// batches in `npm test`, more with FUZZ_RUNS.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as fc from 'fast-check';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { Tally, runs, seed } from '../fuzz.js';
import { startServe, type Serving } from '../serve-helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-fuzz-serve-'));
const DEMO = join(tmp, 'demo-k3');
const CTX = 256;
const CLIENT_LIMIT_MS = 30_000; // a client still waiting after this is a hang
let srv: Serving;

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  srv = await startServe(DEMO, ['--ctx', String(CTX), '--parallel', '2', '--queue', '4', '--body-limit', String(1 << 20)]);
});
after(async () => {
  const code = await srv?.stop();
  rmSync(tmp, { recursive: true, force: true });
  assert.equal(code, 0, srv?.stderr());
});

type Action =
  | { kind: 'request'; path: string; body: object; stream: boolean }
  | { kind: 'slow'; body: object; pieces: number; gapMs: number }
  | { kind: 'hangup'; body: object; at: number }
  | { kind: 'gone'; body: object; afterChunks: number }
  | { kind: 'flood'; n: number };

const ids = (n: number) => Array.from({ length: n }, (_, i) => 1 + ((i * 11) % 300));
const small = fc.record({ prompt: fc.constantFrom(ids(3), ids(9), 'a fox', 'hello there'), max_tokens: fc.integer({ min: 1, max: 4 }) });
const chat = fc.record({ messages: fc.constant([{ role: 'user', content: 'hi' }]), max_tokens: fc.integer({ min: 1, max: 3 }), chat_template_kwargs: fc.constant({ thinking: false }) });
/** Prompts just under, at and past the context, far past it, as ids and as text. */
const long = fc.oneof(
  fc.constantFrom(CTX - 4, CTX - 1, CTX, CTX + 1, 4 * CTX, 100_000).map((n) => ({ prompt: ids(n), max_tokens: 2 })),
  fc.constantFrom(2_000, 50_000, 400_000).map((n) => ({ prompt: 'ab '.repeat(n), max_tokens: 2 })),
  fc.constantFrom(3_000, 300_000).map((n) => ({ messages: [{ role: 'user', content: 'a '.repeat(n) }], max_tokens: 2 })),
);
const bodyOf = fc.oneof({ arbitrary: small, weight: 3 }, { arbitrary: chat, weight: 1 }, { arbitrary: long, weight: 2 });
const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant('request' as const), body: bodyOf, stream: fc.boolean() }).map((a) => ({ ...a, path: 'messages' in a.body ? '/v1/chat/completions' : '/v1/completions' })),
  fc.record({ kind: fc.constant('slow' as const), body: small, pieces: fc.integer({ min: 2, max: 6 }), gapMs: fc.integer({ min: 5, max: 60 }) }),
  fc.record({ kind: fc.constant('hangup' as const), body: bodyOf, at: fc.double({ min: 0, max: 0.99, noNaN: true }) }),
  fc.record({ kind: fc.constant('gone' as const), body: fc.record({ prompt: fc.constant(ids(5)), max_tokens: fc.integer({ min: 20, max: 200 }) }), afterChunks: fc.integer({ min: 0, max: 3 }) }),
  fc.record({ kind: fc.constant('flood' as const), n: fc.integer({ min: 4, max: 12 }) }),
);

const pathOf = (body: object) => ('messages' in body ? '/v1/chat/completions' : '/v1/completions');

/** A status the server may answer with: a completion, a refusal, a full queue. */
function acceptable(status: number, what: string, text: string): void {
  assert.ok(status === 200 || (status >= 400 && status < 500), `${what}: status ${status}: ${text.slice(0, 300)}`);
}

async function request(path: string, body: object, signal?: AbortSignal): Promise<{ status: number; text: string }> {
  const r = await fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
  return { status: r.status, text: await r.text() };
}

/** A raw HTTP request over a socket: the body in `pieces` writes `gapMs` apart (or cut off at `cut` bytes, then the socket closed). */
function raw(body: object, o: { pieces: number; gapMs: number; cut?: number }): Promise<{ status: number | null; text: string }> {
  const url = new URL(srv.url);
  const data = Buffer.from(JSON.stringify(body));
  const head = `POST ${pathOf(body)} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: ${data.length}\r\nConnection: close\r\n\r\n`;
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(url.port), url.hostname);
    let got = '';
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('error', () => {}); // a reset after our own hang-up
    s.on('close', () => resolve({ status: got ? Number(/^HTTP\/1\.1 (\d+)/.exec(got)?.[1] ?? NaN) : null, text: got }));
    const send = async () => {
      s.write(head);
      const end = o.cut ?? data.length;
      const step = Math.max(1, Math.ceil(end / o.pieces));
      for (let i = 0; i < end; i += step) {
        s.write(data.subarray(i, Math.min(end, i + step)));
        await new Promise((r) => setTimeout(r, o.gapMs));
      }
      if (o.cut !== undefined) s.destroy();
    };
    send().catch(reject);
  });
}

async function run(a: Action, tally: Tally): Promise<void> {
  switch (a.kind) {
    case 'request': {
      const r = await request(a.path, { ...a.body, stream: a.stream }, AbortSignal.timeout(CLIENT_LIMIT_MS));
      acceptable(r.status, `${a.path} ${JSON.stringify(a.body).slice(0, 80)}`, r.text);
      if (r.status === 200 && a.stream) assert.match(r.text, /data: \[DONE\]\n\n$/);
      tally.add(`request ${r.status}`);
      return;
    }
    case 'slow': {
      const r = await raw(a.body, { pieces: a.pieces, gapMs: a.gapMs });
      assert.ok(r.status !== null, 'a slow client got no answer');
      acceptable(r.status, 'slow client', r.text);
      tally.add(`slow ${r.status}`);
      return;
    }
    case 'hangup': {
      const len = Buffer.byteLength(JSON.stringify(a.body));
      const r = await raw(a.body, { pieces: 2, gapMs: 5, cut: Math.floor(a.at * len) });
      if (r.status !== null) acceptable(r.status, 'hang-up', r.text);
      tally.add('hangup');
      return;
    }
    case 'gone': {
      const ac = new AbortController();
      const res = await fetch(`${srv.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...a.body, stream: true }), signal: ac.signal });
      acceptable(res.status, 'gone', '');
      if (res.status === 200) {
        const reader = res.body!.getReader();
        for (let i = 0; i < a.afterChunks; i++) if ((await reader.read()).done) break;
      }
      ac.abort();
      tally.add('gone');
      return;
    }
    case 'flood': {
      const rs = await Promise.all(Array.from({ length: a.n }, (_, i) => request('/v1/completions', { prompt: ids(2 + i), max_tokens: 1 }, AbortSignal.timeout(CLIENT_LIMIT_MS))));
      for (const r of rs) {
        acceptable(r.status, 'flood', r.text);
        tally.add(`flood ${r.status}`);
      }
      return;
    }
  }
}

/** The server answers /health promptly and its engine drains (no sequence left running). */
async function settled(): Promise<void> {
  const t0 = performance.now();
  const h = await fetch(`${srv.url}/health`, { signal: AbortSignal.timeout(5_000) });
  assert.equal(h.status, 200);
  assert.ok(performance.now() - t0 < 3_000, `/health after ${(performance.now() - t0).toFixed(0)} ms`);
  for (let i = 0; ; i++) {
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    if (/^k3_active_sequences 0$/m.test(m) && /^k3_queue_length 0$/m.test(m)) return;
    assert.ok(i < 100, `the engine did not drain: ${m.match(/^k3_(active_sequences|queue_length) .*$/gm)?.join(', ')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('server campaign: slow clients, hang-ups, clients gone mid-stream, long prompts, floods', { timeout: 600_000 }, async () => {
  const tally = new Tally();
  let batches = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 5 }), async (batch) => {
      await Promise.all(batch.map((a) => run(a, tally)));
      await settled();
      batches++;
    }),
    { seed: seed(7101), numRuns: runs(6, 50), includeErrorInReport: true, endOnFailure: true },
  );
  assert.equal(srv.proc.exitCode, null, 'the server is up');
  console.log(`# server campaign: ${batches} batches, 0 crashes, 0 hangs: ${tally}`);
});
