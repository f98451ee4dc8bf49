// Property-based fuzzing of `k3 serve`'s request bodies (issue 10: HTTP bodies, now that the
// server exists): mutated chat and completion requests, random JSON and raw bytes. Every answer
// is a completion (200) or an OpenAI-shaped JSON error with a 4xx status; never a 5xx, a hang or
// a dropped connection; the server answers /health after every case. Fixed seeds (test/fuzz.ts).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as fc from 'fast-check';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { Tally, runs, seed } from '../fuzz.js';
import { startServe, type Serving } from '../serve-helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'k3-fuzz-http-'));
const DEMO = join(tmp, 'demo-k3');
let srv: Serving;

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  srv = await startServe(DEMO, ['--parallel', '2', '--queue', '64', '--body-limit', String(64 << 10)]);
});
after(async () => {
  const code = await srv?.stop();
  rmSync(tmp, { recursive: true, force: true });
  assert.equal(code, 0, srv?.stderr());
});

/** Any JSON value, small. */
const anyValue = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.double(),
  fc.integer(),
  fc.string({ maxLength: 12 }),
  fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 }), { maxKeys: 3 }),
);
/** Mostly a valid value, sometimes anything: so a good share of requests is valid and runs. */
const mostly = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ arbitrary: valid, weight: 30 }, { arbitrary: anyValue, weight: 1 });
/** max_tokens: small valid counts (so valid cases stay fast), or values that must be refused. */
const maxTokens = fc.oneof({ arbitrary: fc.constantFrom(1, 2), weight: 8 }, fc.integer({ min: -5, max: 0 }), fc.constant(1e9), fc.double(), fc.string({ maxLength: 4 }), fc.constant(null));
const message = fc.record({ role: mostly(fc.constantFrom('system', 'user', 'assistant', 'tool')), content: mostly(fc.string({ maxLength: 20 })) }, { requiredKeys: ['role'] });
const samplingFields = {
  temperature: mostly(fc.double({ min: 0, max: 2, noNaN: true })),
  top_p: mostly(fc.double({ min: 0.05, max: 1, noNaN: true })),
  seed: mostly(fc.integer({ min: 0, max: 1000 })),
  stop: mostly(fc.oneof(fc.string({ maxLength: 3 }), fc.array(fc.string({ maxLength: 3 }), { maxLength: 4 }))),
  presence_penalty: mostly(fc.double({ min: -2, max: 2, noNaN: true })),
  frequency_penalty: mostly(fc.double({ min: -2, max: 2, noNaN: true })),
  logprobs: mostly(fc.boolean()),
  top_logprobs: mostly(fc.integer({ min: 0, max: 5 })),
  n: mostly(fc.constant(1)),
  stream: fc.boolean(),
  model: mostly(fc.constant('demo-k3')),
};
const chatBody = fc.record({ messages: mostly(fc.array(message, { minLength: 1, maxLength: 3 })), max_tokens: maxTokens, ...samplingFields }, { requiredKeys: ['messages', 'max_tokens'] });
const completionBody = fc.record({ prompt: mostly(fc.oneof(fc.string({ maxLength: 20 }), fc.array(fc.integer({ min: -3, max: 600 }), { minLength: 1, maxLength: 6 }))), max_tokens: maxTokens, ...samplingFields }, { requiredKeys: ['prompt', 'max_tokens'] });
const request = fc.oneof(
  { arbitrary: chatBody.map((b) => ({ path: '/v1/chat/completions', body: JSON.stringify(b) })), weight: 4 },
  { arbitrary: completionBody.map(({ logprobs, ...b }) => ({ path: '/v1/completions', body: JSON.stringify({ ...b, ...(typeof logprobs === 'boolean' ? {} : { logprobs }) }) })), weight: 4 },
  fc.json({ maxDepth: 3 }).map((j) => ({ path: '/v1/chat/completions', body: j })),
  fc.string({ maxLength: 40 }).map((s) => ({ path: '/v1/completions', body: s })),
  fc.uint8Array({ maxLength: 64 }).map((u) => ({ path: '/v1/chat/completions', body: Buffer.from(u).toString('latin1') })),
);

test('HTTP bodies: every answer is a completion or a 4xx OpenAI error; the server stays up', async () => {
  const tally = new Tally();
  await fc.assert(
    fc.asyncProperty(request, async ({ path, body }) => {
      const r = await fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const text = await r.text();
      assert.ok(r.status === 200 || (r.status >= 400 && r.status < 500), `status ${r.status} for ${body.slice(0, 200)}: ${text.slice(0, 300)}`);
      if (r.status !== 200) {
        const j = JSON.parse(text) as { error?: { message?: unknown; type?: unknown } };
        assert.equal(typeof j.error?.message, 'string', text);
        assert.equal(typeof j.error?.type, 'string', text);
      } else if (!text.startsWith('data: ')) {
        const j = JSON.parse(text) as { choices?: unknown[]; usage?: unknown };
        assert.ok(Array.isArray(j.choices) && j.choices.length === 1 && j.usage, text);
      } else {
        assert.match(text, /data: \[DONE\]\n\n$/);
      }
      tally.add(String(r.status));
      const h = await fetch(`${srv.url}/health`);
      assert.equal(h.status, 200);
    }),
    { seed: seed(7001), numRuns: runs(400, 10), includeErrorInReport: true },
  );
  console.log(`# http bodies: ${tally}`);
});
