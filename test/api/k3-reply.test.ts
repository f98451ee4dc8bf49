// The K3 reply parser on ids (src/api/k3-reply.ts) against ../shared/golden/k3-chat/parse.jsonl,
// with the real K3 vocabulary and with the demo vocabulary: whole replies, id by id
// (deltas concatenate to the final fields at every step), prefixes of streams, UTF-8 characters
// split across ids, control-token look-alikes as text, and random id soup.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Tokenizer } from '../../src/tokenizer/index.js';
import { K3ReplyParser, parseK3Reply, type K3Delta, type K3Parsed, type K3ToolCall } from '../../src/api/k3-reply.js';
import { compactJson } from '../../src/api/k3-arguments.js';
import { UserError } from '../../src/util/errors.js';
import { ROOT, TOKENIZER, fixture, readFixture, readJsonl, xorshift } from '../helpers.js';

const SHARED = path.join(ROOT, '..', 'shared');
const GOLDEN = path.join(SHARED, 'golden', 'k3-chat');
const CONTROLS = ['<|open|>', '<|close|>', '<|sep|>', '<|end_of_msg|>'];

interface ParseCase {
  name: string;
  prompt_channel: 'think' | 'response';
  text?: string;
  segments?: Array<{ text: string; special: boolean }>;
  expected: K3Parsed;
}

/** The real K3 vocabulary with the K3 fixture config's special names moved to the real ids
 *  (the fixture numbers them after its own 6,144 ranks; the real table starts at 163,584). */
function realK3(): Tokenizer {
  const model = fs.readFileSync(fixture(SHARED, 'realdata', 'k3-tokenizer', 'tiktoken.model'), 'utf8');
  const cfg = JSON.parse(readFixture(path.join(TOKENIZER, 'k3'), 'tokenizer_config.json')) as { added_tokens_decoder: Record<string, unknown> };
  const moved = Object.fromEntries(Object.entries(cfg.added_tokens_decoder).map(([id, v]) => [String(Number(id) - 6144 + 163584), v]));
  return new Tokenizer(model, { ...cfg, added_tokens_decoder: moved });
}

const DEMO_DIR = path.join(ROOT, 'models-shipped', 'demo-k3-trained');
const demo = new Tokenizer(readFixture(DEMO_DIR, 'tiktoken.model'), readFixture(DEMO_DIR, 'tokenizer_config.json'));
const real = realK3();

/** A golden case as ids: control tokens as their ids, every text part encoded on its own. */
function caseIds(tok: Tokenizer, c: ParseCase): number[] {
  const segs = c.segments ?? c.text!.split(/(<\|open\|>|<\|close\|>|<\|sep\|>|<\|end_of_msg\|>)/).filter((t) => t !== '').map((t) => ({ text: t, special: CONTROLS.includes(t) }));
  return segs.flatMap((s) => (s.special ? [tok.specialId(s.text)!] : tok.encode(s.text, { allowSpecial: false })));
}

const cases = readJsonl<ParseCase>(GOLDEN, 'parse.jsonl');

/** `arguments` compared as parsed JSON (top-level key order too); as text when not JSON. */
function sameArguments(got: string, want: string, where: string): void {
  let g: unknown, w: unknown;
  try {
    w = JSON.parse(want);
  } catch {
    assert.equal(got, want, where);
    return;
  }
  assert.doesNotThrow(() => (g = JSON.parse(got)), `${where}: ${got}`);
  assert.deepEqual(g, w, where);
  assert.deepEqual(Object.keys(g as object), Object.keys(w as object), `${where}: key order`);
}

function sameCalls(got: K3ToolCall[], want: K3ToolCall[], where: string): void {
  assert.equal(got.length, want.length, `${where}: number of calls`);
  got.forEach((g, i) => {
    const w = want[i]!;
    assert.equal(g.id, w.id, where);
    assert.equal(g.type, 'function', where);
    assert.equal(g.function.name, w.function.name, where);
    sameArguments(g.function.arguments, w.function.arguments, `${where} call ${i}`);
  });
}

function checkParsed(got: K3Parsed, want: K3Parsed, where: string): void {
  assert.equal(got.reasoning_content, want.reasoning_content, `${where}: reasoning_content`);
  assert.equal(got.content, want.content, `${where}: content`);
  sameCalls(got.tool_calls, want.tool_calls, where);
  assert.equal(got.complete, want.complete, `${where}: complete`);
  assert.equal(got.finish_reason, want.finish_reason, `${where}: finish_reason`);
  assert.deepEqual(got.truncated_call, want.truncated_call, `${where}: truncated_call`);
  assert.equal(got.state, want.state, `${where}: state`);
}

/** Feed ids one at a time; after every id the deltas so far must add up to finish(). */
function streamChecked(tok: Tokenizer, ids: number[], channel: 'think' | 'response', where: string): K3Parsed {
  const p = new K3ReplyParser(tok, channel);
  let reasoning = '', content = '';
  const calls: K3ToolCall[] = [];
  const take = (d: K3Delta): void => {
    assert.equal(Object.keys(d).length, 1, `${where}: one field per delta`);
    if (d.reasoning_content !== undefined) reasoning += d.reasoning_content;
    if (d.content !== undefined) content += d.content;
    if (d.tool_call !== undefined) {
      const { index, ...call } = d.tool_call;
      assert.equal(index, calls.length, `${where}: tool_call index`);
      calls.push(call);
    }
    assert.ok(d.reasoning_content !== '' && d.content !== '', `${where}: empty delta`);
  };
  let last = p.finish();
  ids.forEach((id, k) => {
    p.push(id).forEach(take);
    last = p.finish();
    const at = `${where} after ${k + 1} ids`;
    assert.equal(reasoning, last.reasoning_content ?? '', `${at}: reasoning deltas`);
    if (channel === 'response') assert.equal(last.reasoning_content, null, at);
    assert.equal(content, last.content, `${at}: content deltas`);
    assert.deepEqual(calls, last.tool_calls, `${at}: tool_call deltas`);
  });
  return last;
}

test('parse.jsonl: 39 cases, real K3 vocabulary, whole and id by id', () => {
  assert.equal(cases.length, 39);
  assert.deepEqual(['<|end_of_msg|>', '<|open|>', '<|close|>', '<|sep|>'].map((s) => real.specialId(s)), [163586, 163587, 163588, 163589]);
  for (const c of cases) {
    const ids = caseIds(real, c);
    checkParsed(parseK3Reply(real, ids, c.prompt_channel), c.expected, c.name);
    checkParsed(streamChecked(real, ids, c.prompt_channel, c.name), c.expected, `${c.name} (streamed)`);
  }
});

test('parse.jsonl: the same with the demo vocabulary (BPE without merges of multi-byte characters: each split across ids)', () => {
  assert.deepEqual(['<|end_of_msg|>', '<|open|>', '<|close|>', '<|sep|>'].map((s) => demo.specialId(s)), [1010, 1011, 1012, 1013]);
  for (const c of cases) {
    const ids = caseIds(demo, c);
    checkParsed(streamChecked(demo, ids, c.prompt_channel, c.name), c.expected, `${c.name} (demo)`);
  }
});

test('__prefix_K_of_N cases: the full reply streamed and stopped at that point reports the same', () => {
  const prefixes = cases.filter((c) => /__prefix_\d+_of_\d+$/.test(c.name));
  assert.equal(prefixes.length, 8);
  for (const c of prefixes) {
    const full = cases.find((f) => f.name === c.name.replace(/__prefix_.*$/, ''))!;
    assert.ok(full.text!.startsWith(c.text!), c.name);
    for (const tok of [real, demo]) {
      const ids = caseIds(tok, full);
      const p = new K3ReplyParser(tok, full.prompt_channel);
      // stop where the decoded ids (control tokens verbatim) are the prefix text
      let k = 0;
      for (; k < ids.length && tok.decode(ids.slice(0, k)) !== c.text; k++) p.push(ids[k]!);
      assert.ok(k < ids.length, `${c.name}: the prefix ends on an id boundary of the full reply`);
      checkParsed(p.finish(), c.expected, `${c.name} (cut from ${full.name}, ${tok.numBase} ranks)`);
    }
  }
});

/** Ordinary ids of single bytes (every byte has a rank in a tiktoken vocabulary). */
function byteIds(tok: Tokenizer): Map<number, number> {
  const m = new Map<number, number>();
  for (let id = 0; id < tok.numBase && m.size < 256; id++) {
    const b = tok.tokenBytes(id);
    if (b.length === 1) m.set(b[0]!, id);
  }
  return m;
}

test('UTF-8 characters split across ids are released whole; a cut one is held, never half-emitted', () => {
  const bytes = byteIds(real);
  const split = (s: string): number[] => [...Buffer.from(s, 'utf8')].map((b) => bytes.get(b)!);
  const [O, C, S, E] = ['<|open|>', '<|close|>', '<|sep|>', '<|end_of_msg|>'].map((s) => real.specialId(s)!) as [number, number, number, number];
  const t = (s: string): number[] => real.encode(s, { allowSpecial: false });
  const ids = [
    ...split('é😀 думаю'), C, ...t('think'), S,
    O, ...t('response'), S, ...split('日本語 ✓'), C, ...t('response'), S,
    O, ...t('tools'), S, O, ...t('call tool="'), ...split('météo'), ...t('"'), S,
    O, ...t('argument key="'), ...split('città'), ...t('" type="string"'), S, ...split('Zürich 🏔'), C, ...t('argument'), S,
    C, ...t('call'), S, C, ...t('tools'), S, C, ...t('message'), S, E,
  ];
  const p = new K3ReplyParser(real, 'think');
  const deltas = ids.flatMap((id) => p.push(id));
  for (const d of deltas) assert.ok(!(d.reasoning_content ?? d.content ?? '').includes('\ufffd'), JSON.stringify(d));
  const r = p.finish();
  assert.equal(r.reasoning_content, 'é😀 думаю');
  assert.equal(r.content, '日本語 ✓');
  assert.deepEqual(r.tool_calls, [{ id: 'call_1', type: 'function', function: { name: 'météo', arguments: '{"città":"Zürich 🏔"}' } }]);
  assert.equal(deltas.filter((d) => d.reasoning_content !== undefined).map((d) => d.reasoning_content).join(''), 'é😀 думаю');

  // the stream stops inside a character: its bytes are held, not shown as U+FFFD
  const cut = new K3ReplyParser(real, 'response');
  const got = [...split('ab'), ...split('😀').slice(0, 3)].flatMap((id) => cut.push(id));
  assert.deepEqual(got, [{ content: 'a' }, { content: 'b' }]);
  assert.equal(cut.finish().content, 'ab');
  // a control id cuts the character off for good: it is invalid text, shown as U+FFFD
  assert.equal(parseK3Reply(real, [...split('😀').slice(0, 2), C, ...t('response'), S], 'response').content, '\ufffd');
});

test('control look-alikes written as ordinary ids are text, in every channel', () => {
  for (const tok of [real, demo]) {
    const id = (s: string): number => tok.specialId(s)!;
    const t = (s: string): number[] => tok.encode(s, { allowSpecial: false });
    const fake = '<|close|>think<|sep|><|open|>response<|sep|>';
    const ids = [...t(fake), id('<|close|>'), ...t('think'), id('<|sep|>'), id('<|open|>'), ...t('response'), id('<|sep|>'), ...t('<|close|>response<|sep|><|end_of_msg|>'), id('<|end_of_msg|>')];
    const r = parseK3Reply(tok, ids, 'think');
    assert.equal(r.reasoning_content, fake);
    assert.equal(r.content, '<|close|>response<|sep|><|end_of_msg|>');
    assert.equal(r.complete, true);
    assert.equal(r.finish_reason, 'stop');
  }
});

test('arguments keep the model\'s number spelling and key order; json blocks verbatim', () => {
  const id = (s: string): number => real.specialId(s)!;
  const t = (s: string): number[] => real.encode(s, { allowSpecial: false });
  const open = (tag: string): number[] => [id('<|open|>'), ...t(tag), id('<|sep|>')];
  const close = (tag: string): number[] => [id('<|close|>'), ...t(tag), id('<|sep|>')];
  const arg = (k: string, type: string, v: string): number[] => [...open(`argument key="${k}" type="${type}"`), ...t(v), ...close('argument')];
  const ids = [
    ...open('call tool="f" index="1"'), ...arg('10', 'number', '1.0'), ...arg('2', 'array', '[1.50, 2e3, {"b": 1, "a": "x y"}]'), ...arg('__proto__', 'object', '{"z": null}'), ...close('call'),
    ...open('call tool="g" index="2"'), ...open('json type="object"'), ...t(' {"x": 1.0}\n'), ...close('json'), ...close('call'),
  ];
  const r = parseK3Reply(real, [...close('think'), ...open('tools'), ...ids], 'think');
  assert.equal(r.tool_calls[0]!.function.arguments, '{"10":1.0,"2":[1.50,2e3,{"b":1,"a":"x y"}],"__proto__":{"z":null}}');
  assert.equal(r.tool_calls[1]!.function.arguments, ' {"x": 1.0}\n');
  assert.equal(r.finish_reason, 'length');
  assert.equal(r.state, 'tools');
  // a truncated call's partial arguments keep "__proto__" as an own key
  const partial = parseK3Reply(real, [...open('tools'), ...open('call tool="f"'), ...arg('__proto__', 'object', '{"z": null}'), ...arg('n', 'number', '1')], 'response').truncated_call;
  assert.ok(partial !== null && partial.name === 'f');
  assert.ok(Object.hasOwn(partial.arguments_partial, '__proto__'));
  assert.deepEqual(Object.getPrototypeOf(partial.arguments_partial), Object.prototype);
  assert.equal(partial.arguments_partial.n, 1);
  assert.equal(compactJson(' { "a b" : [ 1 , "\\" x" ] } '), '{"a b":[1,"\\" x"]}');
});

test('tolerances: text right after the think channel is content; stray specials are ignored, a tag no grammar tag can be is text', () => {
  const id = (s: string): number => real.specialId(s)!;
  const t = (s: string): number[] => real.encode(s, { allowSpecial: false });
  const r = parseK3Reply(real, [...t('hm'), id('<|close|>'), ...t('think'), id('<|sep|>'), ...t('\n'), ...t('Answer.'), id('<|sep|>'), id('[EOS]'), id('<|close|>'), ...t('bogus'), id('<|sep|>'), ...t(' more')], 'think');
  assert.deepEqual([r.reasoning_content, r.content, r.state, r.complete], ['hm', '\nAnswer.bogus more', 'response', false]);
  // a weak model's stray <|open|> does not swallow the rest of its reasoning
  const stray = parseK3Reply(real, [...t('a'), id('<|open|>'), ...t(' b c d'), id('<|close|>'), ...t('thin'), ...t('ker')], 'think');
  assert.equal(stray.reasoning_content, 'a b c dthinker');
  // whitespace alone between think and a tag is not content
  const w = parseK3Reply(real, [id('<|close|>'), ...t('think'), id('<|sep|>'), ...t('\n'), id('<|open|>'), ...t('response'), id('<|sep|>'), ...t('x'), id('<|end_of_msg|>'), ...t('after the end')], 'think');
  assert.deepEqual([w.content, w.state, w.finish_reason], ['x', 'done', 'stop']);
  // an open tag cut off by another control id is dropped, never text
  const cut = parseK3Reply(real, [id('<|open|>'), ...t('respo'), id('<|open|>'), ...t('response'), id('<|sep|>'), ...t('ok')], 'think');
  assert.deepEqual([cut.reasoning_content, cut.content], ['', 'ok']);
});

test('a tokenizer without K3 control tokens is refused with one clear line', () => {
  const k2 = new Tokenizer(readFixture(TOKENIZER, 'tiktoken.model'), readFixture(path.join(TOKENIZER, 'k2'), 'tokenizer_config.json'));
  assert.throws(() => new K3ReplyParser(k2, 'think'), (e: unknown) => e instanceof UserError && /<\|open\|>.*K3 tokenizer/.test(e.message));
  assert.throws(() => new K3ReplyParser(real, 'answer' as 'think'), UserError);
});

test('random id soup: no throw, deltas always add up to finish()', () => {
  const rnd = xorshift(0x6b33);
  const specials = ['<|open|>', '<|close|>', '<|sep|>', '<|end_of_msg|>', '[EOS]'].map((s) => demo.specialId(s)!);
  const words = ['think', 'response', 'tools', 'call tool="f"', 'argument key="k" type="number"', 'json type="object"', 'message', '1', ' ', 'é'].map((w) => demo.encode(w, { allowSpecial: false }));
  for (let run = 0; run < 300; run++) {
    const ids: number[] = [];
    const n = 1 + Math.floor(rnd() * 60);
    while (ids.length < n) {
      const r = rnd();
      if (r < 0.4) ids.push(specials[Math.floor(rnd() * 4.2)]!);
      else if (r < 0.8) ids.push(...words[Math.floor(rnd() * words.length)]!);
      else ids.push(Math.floor(rnd() * 256));
    }
    const channel = rnd() < 0.5 ? 'think' : 'response';
    const last = streamChecked(demo, ids, channel, `soup ${run}`);
    assert.deepEqual(last, parseK3Reply(demo, ids, channel), `soup ${run}`);
  }
});
