// Tokenizer goldens (../shared/golden/tokenizer/, the independent tiktoken-made set, read in place:
// see its README.md): ids, pre-token splits, long runs, decodes, streaming decode, specials.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Tokenizer, parseTiktokenModel, referenceChunks } from '../../src/tokenizer/index.js';
import { bpeHeap, bpeSimple } from '../../src/tokenizer/bpe.js';
import { UserError } from '../../src/util/errors.js';
import { TOKENIZER, readFixture, readJsonl } from '../helpers.js';

const F = TOKENIZER;
const read = (f: string): string => readFixture(F, f);
const jsonl = <T>(f: string): T[] => readJsonl<T>(F, f);

interface Case {
  name: string;
  text: string;
  allow_special: boolean;
  ids: number[];
}
interface Pretokens {
  name: string;
  allow_special: boolean;
  pieces: string[];
  special_at: number[];
}

const MODEL = read('tiktoken.model');
const k2 = new Tokenizer(MODEL, read('k2/tokenizer_config.json'));
const k3 = new Tokenizer(MODEL, read('k3/tokenizer_config.json'));

function checkCases(file: string, tok: Tokenizer): void {
  const cases = jsonl<Case>(file);
  const failed: string[] = [];
  for (const c of cases) {
    const ids = tok.encode(c.text, { allowSpecial: c.allow_special });
    if (JSON.stringify(ids) !== JSON.stringify(c.ids)) failed.push(`${c.name} (allow_special ${c.allow_special})`);
  }
  assert.deepEqual(failed, [], `${failed.length} of ${cases.length} cases differ`);
}

function checkPretokens(file: string, casesFile: string, tok: Tokenizer): void {
  const cases = jsonl<Case>(casesFile);
  const pre = jsonl<Pretokens>(file);
  assert.equal(pre.length, cases.length);
  const failed: string[] = [];
  pre.forEach((p, i) => {
    const c = cases[i]!;
    assert.equal(p.name, c.name);
    const segs = tok.pretokenize(c.text, { allowSpecial: p.allow_special });
    const pieces = segs.map((s) => s.text);
    const specialAt = segs.flatMap((s, j) => (s.special ? [j] : []));
    if (JSON.stringify(pieces) !== JSON.stringify(p.pieces) || JSON.stringify(specialAt) !== JSON.stringify(p.special_at)) {
      failed.push(p.name);
    }
  });
  assert.deepEqual(failed, [], `${failed.length} of ${pre.length} splits differ`);
}

test('config: layout, vocab size, families', () => {
  const specials = JSON.parse(read('specials.json')) as {
    num_base_tokens: number;
    k2: { registered: [number, number]; vocab_size: number; all: Record<string, number> };
    k3: { registered: [number, number]; vocab_size: number; all: Record<string, number> };
  };
  for (const [tok, want, fam] of [
    [k2, specials.k2, 'k2'],
    [k3, specials.k3, 'k3'],
  ] as const) {
    assert.equal(tok.numBase, specials.num_base_tokens);
    assert.equal(tok.vocabSize, want.vocab_size);
    assert.equal(tok.family, fam);
    assert.deepEqual(Object.fromEntries(tok.specials), want.all);
  }
  assert.equal(k2.bosId, 6144);
  assert.equal(k2.eosId, 6145);
  assert.equal(k2.padId, 6399);
  assert.equal(typeof k2.chatTemplate, 'string', 'a chat template is present');
  assert.ok(k2.chatTemplate!.includes('im_middle'));
  assert.equal(k3.chatTemplate, undefined);
});

test('cases.jsonl: identical ids (K2 table)', () => checkCases('cases.jsonl', k2));
test('k3/cases.jsonl: identical ids (K3 table)', () => checkCases('k3/cases.jsonl', k3));
test('pretokens.jsonl: identical pre-token splits', () => checkPretokens('pretokens.jsonl', 'cases.jsonl', k2));
test('k3/pretokens.jsonl: identical pre-token splits', () => checkPretokens('k3/pretokens.jsonl', 'k3/cases.jsonl', k3));

test('long_runs.jsonl: reference 25,000-char split, and plain tiktoken without it', () => {
  const plain = new Tokenizer(MODEL, read('k2/tokenizer_config.json'), { referenceSplit: false });
  const runs = jsonl<Case & { ids_without_split: number[]; split_lengths: number[] }>('long_runs.jsonl');
  assert.equal(runs.length, 3);
  for (const c of runs) {
    const t0 = performance.now();
    assert.deepEqual(k2.encode(c.text, { allowSpecial: c.allow_special }), c.ids, c.name);
    assert.deepEqual(plain.encode(c.text, { allowSpecial: c.allow_special }), c.ids_without_split, c.name);
    assert.deepEqual(
      referenceChunks(c.text).map((s) => [...s].length),
      c.split_lengths,
      c.name,
    );
    assert.ok(performance.now() - t0 < 2000, `${c.name} took ${performance.now() - t0} ms`);
  }
});

test('reference split counts code points and Python isspace', () => {
  // Astral characters count once (Python str), so 25,001 emoji are cut after 25,000 of them.
  const emoji = '\u{1F600}'.repeat(25_001);
  assert.deepEqual(referenceChunks(emoji).map((s) => [...s].length), [25_000, 1]);
  // U+001C is a space to Python's isspace (not to the regex's \s).
  const fs = '\u001c'.repeat(25_002);
  assert.deepEqual(referenceChunks(fs).map((s) => s.length), [25_000, 2]);
  assert.deepEqual(referenceChunks('a b c'), ['a b c']);
  assert.deepEqual(referenceChunks(''), ['']);
  // The 400,000-char cut: 'ab ' * N cut into 400k-char chunks.
  const big = 'ab '.repeat(140_000);
  assert.deepEqual(referenceChunks(big).map((s) => s.length), [400_000, 20_000]);
});

test('decode.jsonl: exact bytes and replacement-mode text', () => {
  const cases = jsonl<{ name: string; ids: number[]; bytes_b64: string; text: string }>('decode.jsonl');
  assert.equal(cases.length, 77);
  for (const c of cases) {
    assert.equal(Buffer.from(k2.decodeBytes(c.ids)).toString('base64'), c.bytes_b64, c.name);
    assert.equal(k2.decode(c.ids), c.text, c.name);
  }
});

test('every encode case decodes to the exact original bytes', () => {
  for (const [file, tok] of [
    ['cases.jsonl', k2],
    ['k3/cases.jsonl', k3],
    ['long_runs.jsonl', k2],
  ] as const) {
    for (const c of jsonl<Case>(file)) {
      assert.ok(Buffer.from(tok.decodeBytes(c.ids)).equals(Buffer.from(c.text, 'utf8')), `${file} ${c.name}`);
      assert.equal(tok.decode(c.ids), c.text);
    }
  }
});

test('streaming decode never emits half a UTF-8 character', () => {
  const check = (tok: Tokenizer, ids: number[], label: string, validUtf8: boolean): void => {
    const sd = tok.streamDecoder();
    const chunks = ids.map((id) => sd.push(id));
    chunks.push(sd.flush());
    assert.equal(chunks.join(''), tok.decode(ids), label);
    for (const ch of chunks) {
      // A character cut in two would surface as U+FFFD or a lone surrogate in some chunk.
      assert.ok(!/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(ch), `${label}: lone surrogate`);
      if (validUtf8) assert.ok(!ch.includes('\uFFFD'), `${label}: U+FFFD in ${JSON.stringify(ch)}`);
    }
  };
  for (const c of jsonl<Case>('cases.jsonl')) check(k2, c.ids, c.name, !c.text.includes('\uFFFD'));
  for (const c of jsonl<{ name: string; ids: number[] }>('decode.jsonl')) check(k2, c.ids, c.name, false);
  // Multi-byte tokens cut mid-character: output waits for the rest.
  const ids = k2.encode('月之暗面的 こんにちは 😀👨‍👩‍👧');
  const sd = k2.streamDecoder();
  let seen = '';
  for (const id of ids) {
    seen += sd.push(id);
    assert.ok('月之暗面的 こんにちは 😀👨‍👩‍👧'.startsWith(seen));
  }
  assert.equal(seen + sd.flush(), '月之暗面的 こんにちは 😀👨‍👩‍👧');
  // A stream that ends inside a character: the held-back bytes come out as U+FFFD at flush.
  const partial = jsonl<{ name: string; ids: number[]; text: string }>('decode.jsonl').filter((c) => c.text.endsWith('\uFFFD'));
  assert.ok(partial.length > 0);
  for (const c of partial) {
    const s = k2.streamDecoder();
    const streamed = c.ids.map((id) => s.push(id)).join('');
    assert.equal(streamed + s.flush(), c.text, c.name);
  }
});

test('specials: allowed, disallowed, subsets', () => {
  const im = k2.specialId('<|im_end|>')!;
  assert.equal(im, 6146);
  assert.deepEqual(k2.encode('<|im_end|>'), [im]); // default: allowed (the reference default)
  assert.deepEqual(k2.encode('<|im_end|>', { allowSpecial: true }), [im]);
  const asText = k2.encode('<|im_end|>', { allowSpecial: false });
  assert.ok(asText.length > 1 && !asText.includes(im));
  assert.deepEqual(k2.encodeOrdinary('<|im_end|>'), asText);
  // Only the strings in the set are specials.
  const only = new Set(['[EOS]']);
  assert.deepEqual(k2.encode('[EOS]<|im_end|>', { allowSpecial: only }), [6145, ...asText]);
  // Named slot: no reserved spelling; unnamed slot: reserved spelling; the K2 "+2".
  assert.equal(k2.specialId('<|reserved_token_6149|>'), 6149);
  assert.equal(k2.specialId('<|reserved_token_6398|>'), undefined);
  assert.equal(k2.specialId('<|reserved_token_6400|>'), 6400);
  assert.equal(k3.specialId('<|reserved_token_6400|>'), undefined);
  assert.equal(k3.specialId('<|reserved_token_6209|>'), undefined);
  assert.equal(k3.specialId('<osagent_mode>'), 6209);
  // Specials decode to their strings.
  assert.equal(k2.decode([6146, 6149, 6400]), '<|im_end|><|reserved_token_6149|><|reserved_token_6400|>');
  assert.equal(k2.specialName(6146), '<|im_end|>');
  assert.ok(k2.isSpecial(6146) && !k2.isSpecial(100));
  // The regex never sees across a special.
  assert.deepEqual(
    k2.pretokenize("it<|im_end|>'s").map((s) => s.text),
    ['it', '<|im_end|>', "'s"],
  );
});

test('unknown ids are a UserError', () => {
  assert.throws(() => k2.decode([6402]), UserError);
  assert.throws(() => k3.decode([6400]), UserError);
  assert.throws(() => k2.decodeBytes([-1]), UserError);
  assert.throws(() => k2.streamDecoder().push(999_999), UserError);
});

test('malformed tiktoken.model / config are UserErrors', () => {
  assert.throws(() => new Tokenizer('', '{}'), UserError);
  assert.throws(() => new Tokenizer('QQ== x\n', '{}'), /line 1/);
  assert.throws(() => new Tokenizer('QQ== 0\nQQ== 1\n', '{}'), /duplicate/);
  assert.throws(() => new Tokenizer(MODEL, '{not json'), UserError);
});

test('BPE: heap merge equals the simple scan (ties leftmost)', () => {
  const { ranks } = parseTiktokenModel(MODEL);
  const texts = [
    '~'.repeat(201),
    '='.repeat(77),
    ' '.repeat(99),
    '.'.repeat(1001),
    'internationalization'.repeat(9),
    'ab'.repeat(300) + 'a',
    '月之暗面'.repeat(40),
    '😀👨‍👩‍👧🇨🇳'.repeat(20),
    'Привет'.repeat(50),
  ];
  let seed = 12345;
  const rnd = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0), seed / 2 ** 32);
  const alphabet = 'aeiou tnsrl~=.-éж月😀';
  for (let k = 0; k < 200; k++) {
    const len = 1 + Math.floor(rnd() * 300);
    let s = '';
    for (let i = 0; i < len; i++) s += [...alphabet][Math.floor(rnd() * [...alphabet].length)];
    texts.push(s);
  }
  for (const t of texts) {
    const piece = Buffer.from(t, 'utf8').toString('latin1');
    const a: number[] = [];
    const b: number[] = [];
    bpeSimple(piece, ranks, a);
    bpeHeap(piece, ranks, b);
    assert.deepEqual(b, a, JSON.stringify(t.slice(0, 20)));
  }
});

test('speed: 200 KB of mixed text encodes in well under a second per 100 KB', () => {
  const cases = jsonl<Case>('cases.jsonl');
  let text = '';
  for (let i = 0; text.length < 200_000; i++) text += cases[i % cases.length]!.text + '\n';
  const t0 = performance.now();
  const ids = k2.encode(text);
  const ms = performance.now() - t0;
  assert.equal(k2.decode(ids), text);
  assert.ok(ms < 4000, `took ${ms.toFixed(0)} ms`);
});
