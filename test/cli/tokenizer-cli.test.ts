// `k3 tokenize` / `k3 detokenize` end to end, loadTokenizer errors, and the demo vocabulary.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEMO_VOCAB_SIZE, Tokenizer, demoTokenizerFiles, loadTokenizer, renderChat, stopTokenIds } from '../../src/tokenizer/index.js';
import { UserError } from '../../src/util/errors.js';
import { TOKENIZER } from '../helpers.js';

const F = TOKENIZER;
const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

const dir = mkdtempSync(join(tmpdir(), 'k3-tok-'));
copyFileSync(join(F, 'tiktoken.model'), join(dir, 'tiktoken.model'));
copyFileSync(join(F, 'k2/tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

function k3(...args: string[]): { code: number | null; stdout: Buffer; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'buffer' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.toString('utf8') };
}

test('tokenize --text / --text-file / --json / --no-special', () => {
  const r = k3('tokenize', dir, '--text', 'Hello world');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.toString(), '39,315,491,5445,969\n');
  const j = k3('tokenize', dir, '--text', 'Hello world<|im_end|>', '--json');
  assert.deepEqual(JSON.parse(j.stdout.toString()), { ids: [39, 315, 491, 5445, 969, 6146] });
  const n = k3('tokenize', dir, '--text', '<|im_end|>', '--json', '--no-special');
  assert.ok(!(JSON.parse(n.stdout.toString()) as { ids: number[] }).ids.includes(6146));
  const file = join(dir, 'in.txt');
  writeFileSync(file, '月之暗面\n');
  const f = k3('tokenize', dir, '--text-file', file, '--json');
  const ids = (JSON.parse(f.stdout.toString()) as { ids: number[] }).ids;
  assert.equal(ids[0], 6139);
  // Round trip through detokenize: exact bytes, no newline added.
  const d = k3('detokenize', dir, '--ids', ids.join(','));
  assert.equal(d.code, 0, d.stderr);
  assert.ok(d.stdout.equals(Buffer.from('月之暗面\n')));
});

test('detokenize writes exact bytes, even partial UTF-8', () => {
  // decode/prefix style: a token that is an incomplete UTF-8 sequence comes out raw.
  const tok = new Tokenizer(readFileSync(join(F, 'tiktoken.model'), 'utf8'), readFileSync(join(F, 'k2/tokenizer_config.json'), 'utf8'));
  const ids = tok.encode('é');
  const bytes = tok.decodeBytes(ids);
  const r = k3('detokenize', dir, '--ids', ids.join(','));
  assert.ok(r.stdout.equals(Buffer.from(bytes)));
});

test('CLI errors: missing files, bad ids, bad flags (exit 2, one line)', () => {
  const empty = mkdtempSync(join(tmpdir(), 'k3-tok-empty-'));
  try {
    const r = k3('tokenize', empty, '--text', 'x');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /tiktoken\.model/);
    assert.doesNotMatch(r.stderr, /\n.+/); // one line, no trace
    copyFileSync(join(F, 'tiktoken.model'), join(empty, 'tiktoken.model'));
    const c = k3('detokenize', empty, '--ids', '1');
    assert.equal(c.code, 2);
    assert.match(c.stderr, /tokenizer_config\.json/);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
  assert.equal(k3('tokenize', dir).code, 2);
  assert.equal(k3('tokenize', dir, '--text', 'a', '--text-file', 'b').code, 2);
  assert.equal(k3('tokenize', dir, '--text-file', join(dir, 'nope.txt')).code, 2);
  assert.equal(k3('detokenize', dir).code, 2);
  const bad = k3('detokenize', dir, '--ids', '1,x');
  assert.equal(bad.code, 2);
  const unknown = k3('detokenize', dir, '--ids', '99999');
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /99999/);
});

test('loadTokenizer: UserError naming the missing file', async () => {
  await assert.rejects(loadTokenizer(join(dir, 'nowhere')), (e: unknown) => e instanceof UserError && /tiktoken\.model/.test(e.message));
  const t = await loadTokenizer(dir);
  assert.equal(t.family, 'k2');
  assert.equal(t.vocabSize, 6400);
  assert.equal(typeof t.chatTemplate, 'string', 'a chat template is present');
  assert.ok(t.chatTemplate!.includes('im_middle'));
  // A template shipped as chat_template.jinja (config without one) is picked up.
  const d = mkdtempSync(join(tmpdir(), 'k3-tok-tpl-'));
  try {
    const cfg = JSON.parse(readFileSync(join(F, 'k2/tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
    const tpl = cfg.chat_template as string;
    delete cfg.chat_template;
    copyFileSync(join(F, 'tiktoken.model'), join(d, 'tiktoken.model'));
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify(cfg));
    assert.equal((await loadTokenizer(d)).chatTemplate, undefined);
    writeFileSync(join(d, 'chat_template.jinja'), tpl);
    assert.equal((await loadTokenizer(d)).chatTemplate, tpl);
    writeFileSync(join(d, 'tiktoken.model'), 'garbage\n');
    await assert.rejects(loadTokenizer(d), /tokenizer in .*: tiktoken\.model: line 1/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test('demo vocabulary: 512 ids, K3 layout, round trips, deterministic', async () => {
  const files = demoTokenizerFiles();
  assert.deepEqual(demoTokenizerFiles(), files);
  assert.equal(files['tiktoken.model'].trim().split('\n').length, DEMO_VOCAB_SIZE - 16);
  const d = mkdtempSync(join(tmpdir(), 'k3-tok-demo-'));
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(join(d, name), text);
    const tok = await loadTokenizer(d);
    assert.equal(tok.numBase, 496);
    assert.equal(tok.vocabSize, 512);
    assert.equal(tok.family, 'k3');
    assert.equal(tok.specials.size, 16);
    assert.equal(tok.specialId('[BOS]'), 496);
    assert.equal(tok.specialId('[EOS]'), 497);
    assert.equal(tok.specialId('<|end_of_msg|>'), 498);
    assert.equal(tok.specialId('<|reserved_token_504|>'), 504);
    assert.equal(tok.specialId('[PAD]'), 511);
    assert.deepEqual(stopTokenIds(tok), [497, 498]);
    for (const text of ['The model reads the text one token at a time.', 'Hello, world! 123 — ünïcödé 月之暗面 😀\n\tx', '<|open|>[EOS]']) {
      const ids = tok.encode(text);
      assert.ok(ids.every((id) => id >= 0 && id < 512));
      assert.equal(tok.decode(ids), text);
    }
    // Merges help: common English is shorter than its bytes.
    const en = 'the model reads the text and writes the next token';
    assert.ok(tok.encode(en).length < en.length / 2.5, `${tok.encode(en).length} tokens`);
    const chat = renderChat(tok, [{ role: 'user', content: 'Hello' }], { addGenerationPrompt: true });
    assert.ok(chat.ids.every((id) => id < 512));
    assert.equal(tok.decode(chat.ids), chat.text);
    // The CLI works on it too.
    const r = k3('tokenize', d, '--text', 'the end', '--json');
    assert.deepEqual(JSON.parse(r.stdout.toString()), { ids: tok.encode('the end') });
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});
