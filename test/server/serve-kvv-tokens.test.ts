// Moonshot's own prompt-token counts: a synthetic K3 with the real vocabulary (vocab_size 163840,
// ../shared/realdata/k3-tokenizer/tiktoken.model) served by `k3 serve`; each of the 44 requests
// of ../shared/golden/k3-chat/kvv-prompt-tokens.jsonl (from the Kimi Vendor Verifier) reports
// exactly its expected usage.prompt_tokens, streamed and not, with cached_tokens within it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { ROOT, TOKENIZER, readFixture } from '../helpers.js';
import { post, sse, startServe, type Serving } from '../serve-helpers.js';

const SHARED = join(ROOT, '..', 'shared');
const REAL_VOCAB = join(SHARED, 'realdata', 'k3-tokenizer', 'tiktoken.model');
const CASES = join(SHARED, 'golden', 'k3-chat', 'kvv-prompt-tokens.jsonl');

interface Row {
  id: string;
  request: Record<string, unknown>;
  expected_prompt_tokens: number;
}

const tmp = fs.mkdtempSync(join(tmpdir(), 'k3-kvv-'));
const MODEL = join(tmp, 'k3-real-vocab');
let srv: Serving;

/** K3's tokenizer_config: the fixture's K3 specials moved to the real vocabulary's slots (163584+). */
function realK3Config(): string {
  const cfg = JSON.parse(readFixture(TOKENIZER, 'k3/tokenizer_config.json')) as { added_tokens_decoder: Record<string, unknown> };
  const moved = Object.fromEntries(Object.entries(cfg.added_tokens_decoder).map(([id, t]) => [String(Number(id) - 6144 + 163584), t]));
  return JSON.stringify({ ...cfg, added_tokens_decoder: moved });
}

before(async () => {
  await synthCheckpoint({ arch: 'k3', out: MODEL, vocab: 163840, hidden: 64, layers: 2, experts: 4, topK: 2, extraFiles: { 'tiktoken.model': fs.readFileSync(REAL_VOCAB), 'tokenizer_config.json': realK3Config() } });
  srv = await startServe(MODEL, ['--ctx', '8192']);
});
after(async () => {
  await srv?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('the 44 requests of Moonshot\'s prompt-token cases report exactly the expected prompt_tokens', async () => {
  const rows = fs.readFileSync(CASES, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Row);
  assert.equal(rows.length, 44);
  for (const row of rows) {
    const body = { ...row.request, max_tokens: 1, stream: false };
    const r = await post(`${srv.url}/v1/chat/completions`, body);
    assert.equal(r.status, 200, `${row.id}: ${JSON.stringify(r.json).slice(0, 300)}`);
    assert.equal(r.json.usage.prompt_tokens, row.expected_prompt_tokens, row.id);
    assert.ok(r.json.usage.prompt_tokens_details.cached_tokens <= r.json.usage.prompt_tokens, row.id);
  }
  // streamed: the usage chunk ends the stream with the same count
  for (const row of rows.slice(0, 4)) {
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...row.request, max_tokens: 1, stream: true }) });
    const { chunks } = await sse(res);
    assert.equal(chunks.at(-1).usage.prompt_tokens, row.expected_prompt_tokens, row.id);
  }
});
