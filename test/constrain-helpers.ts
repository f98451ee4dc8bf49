// Helpers of the constrained-decoding tests: a JSON document matcher, random walks through a
// grammar under a budget, a K3 reply parser on ids (control ids verbatim), and ajv.

import Ajv2020Module from 'ajv/dist/2020.js';
import { Lit, Seq } from '../src/generate/constrain/core.js';
import { DEAD, JsonCtx, Matcher, SchemaCompiler, WsG } from '../src/generate/constrain/index.js';
import { CLOSE, END, NSYM, OPEN, SEP } from '../src/generate/constrain/symbols.js';
import type { Tokenizer } from '../src/tokenizer/index.js';
import { xorshift } from './helpers.js';

type AjvClass = typeof Ajv2020Module.default;
const Ajv2020: AjvClass = (Ajv2020Module as unknown as { default?: AjvClass }).default ?? (Ajv2020Module as unknown as AjvClass);

/** An ajv validator of a schema (draft 2020-12: prefixItems). */
export function validator(schema: unknown): (v: unknown) => boolean {
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  const f = ajv.compile(schema as object);
  return (v) => f(v) as boolean;
}

/** A matcher of one JSON document of `schema` followed by END. */
export function docMatcher(schema: unknown, layout: 'json' | 'py' = 'json'): { m: Matcher; unsupported: string[] } {
  const comp = new SchemaCompiler(schema as Record<string, unknown>);
  const node = comp.node(schema as Record<string, unknown>);
  const ctx = new JsonCtx(comp.allNodes(), layout);
  const ws = new WsG();
  const m = new Matcher(layout === 'json' ? new Seq([ws, ctx.value(node), ws, new Lit([END])]) : new Seq([ctx.value(node), new Lit([END])]));
  return { m, unsupported: [...comp.unsupported] };
}

/** The state after the UTF-8 bytes of `s`, or DEAD. */
export function feedText(m: Matcher, s: string, from = m.start): number {
  return m.feed(from, Buffer.from(s, 'utf8'));
}

/** Does the document matcher accept exactly `s`? */
export function accepts(m: Matcher, s: string): boolean {
  const st = feedText(m, s);
  if (st === DEAD) return false;
  const e = m.next(st, END);
  return e !== DEAD && m.info(e).accepting;
}

/** Follow symbols that lower the minimum by one until the end; the number of steps (or -1 if the minimum lied). */
export function walkDown(m: Matcher, st: number): number {
  let steps = 0;
  while (!m.info(st).accepting) {
    const want = m.min(st) - 1;
    let next = DEAD;
    for (let s = 0; s < NSYM; s++) {
      const n = m.next(st, s);
      if (n === DEAD) continue;
      if (m.min(n) < want) return -1;
      if (m.min(n) === want && next === DEAD) next = n;
    }
    if (next === DEAD) return -1;
    st = next;
    steps++;
  }
  return steps;
}

/** A random document: random allowed symbols (printable ones favoured) while the minimum fits in `budget`. */
export function randomWalk(m: Matcher, budget: number, seed: number): number[] {
  const rnd = xorshift(seed);
  let st = m.start;
  const out: number[] = [];
  const favoured = [0x22, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x20, 0x30, 0x31, 0x2d, 0x2e, 0x65, 0x61, 0x62, 0x74, 0x66, 0x6e, 0x75, 0x5c, 0xc3, 0xa9, 0x0a];
  while (!m.info(st).accepting) {
    const left = budget - out.length;
    const ok: number[] = [];
    const cands = rnd() < 0.7 ? favoured.concat([CLOSE, END, OPEN, SEP]) : Array.from({ length: NSYM }, (_, i) => i);
    for (const s of cands) {
      const n = m.next(st, s);
      if (n !== DEAD && m.min(n) <= left - 1) ok.push(s);
    }
    if (ok.length === 0) {
      for (let s = 0; s < NSYM; s++) {
        const n = m.next(st, s);
        if (n !== DEAD && m.min(n) <= left - 1) ok.push(s);
      }
    }
    if (ok.length === 0) throw new Error(`walk stuck after ${out.length} symbols`);
    const s = ok[Math.floor(rnd() * ok.length)]!;
    out.push(s);
    st = m.next(st, s);
  }
  return out;
}

export interface ParsedCall {
  name: string;
  index: string;
  args: Array<{ key: string; type: string; value: string }>;
}

export interface ParsedReply {
  reasoning: string | null;
  content: string;
  calls: ParsedCall[] | null;
}

type Item = { ctl: number } | { text: string };

/** Parse a K3 reply on ids (strictly: the grammar of K3-CHAT.md §3.8); throws on anything else. */
export function parseReply(tok: Tokenizer, ids: readonly number[], thinking: boolean): ParsedReply {
  const ctl = new Map<number, number>([[tok.specialId('<|open|>')!, OPEN], [tok.specialId('<|close|>')!, CLOSE], [tok.specialId('<|sep|>')!, SEP], [tok.specialId('<|end_of_msg|>')!, END]]);
  const items: Item[] = [];
  let run: number[] = [];
  const flush = (): void => {
    if (run.length > 0) items.push({ text: tok.decode(run) });
    run = [];
  };
  for (const id of ids) {
    const c = ctl.get(id);
    if (c === undefined) {
      if (tok.isSpecial(id)) throw new Error(`special id ${id} in the reply`);
      run.push(id);
    } else {
      flush();
      items.push({ ctl: c });
    }
  }
  flush();
  let i = 0;
  const text = (): string => {
    const it = items[i];
    if (it && 'text' in it) {
      i++;
      return it.text;
    }
    return '';
  };
  const expect = (c: number, tag?: string): void => {
    const it = items[i++];
    if (!it || !('ctl' in it) || it.ctl !== c) throw new Error(`expected control ${c} at item ${i - 1}: ${JSON.stringify(items.slice(i - 1, i + 3))}`);
    if (tag !== undefined) {
      const t = text();
      if (t !== tag) throw new Error(`expected ${JSON.stringify(tag)}, got ${JSON.stringify(t)}`);
    }
  };
  const peek = (c: number): boolean => {
    const it = items[i];
    return !!it && 'ctl' in it && it.ctl === c;
  };
  let reasoning: string | null = null;
  if (thinking) {
    reasoning = text();
    expect(CLOSE, 'think');
    expect(SEP);
    expect(OPEN, 'response');
    expect(SEP);
  }
  const content = text();
  expect(CLOSE, 'response');
  expect(SEP);
  let calls: ParsedCall[] | null = null;
  if (peek(OPEN)) {
    expect(OPEN, 'tools');
    expect(SEP);
    calls = [];
    while (peek(OPEN)) {
      expect(OPEN);
      const head = /^call tool="([^"]*)" index="(\d+)"$/.exec(text());
      if (!head) throw new Error('bad call head');
      expect(SEP);
      const call: ParsedCall = { name: unescape(head[1]!), index: head[2]!, args: [] };
      while (peek(OPEN)) {
        expect(OPEN);
        const a = /^argument key="([^"]*)" type="([a-z]+)"$/.exec(text());
        if (!a) throw new Error('bad argument head');
        expect(SEP);
        call.args.push({ key: unescape(a[1]!), type: a[2]!, value: text() });
        expect(CLOSE, 'argument');
        expect(SEP);
      }
      expect(CLOSE, 'call');
      expect(SEP);
      calls.push(call);
    }
    expect(CLOSE, 'tools');
    expect(SEP);
  }
  expect(CLOSE, 'message');
  expect(SEP);
  expect(END);
  if (i !== items.length) throw new Error('items after the end');
  return { reasoning, content, calls };
}

const unescape = (s: string): string => s.replace(/&quot;/g, '"').replace(/&amp;/g, '&');

/** A call's arguments as an object; throws when a value does not match its type attribute. */
export function callArguments(c: ParsedCall): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const a of c.args) {
    if (Object.hasOwn(out, a.key)) throw new Error(`argument ${a.key} repeated`);
    const v = a.type === 'string' ? a.value : JSON.parse(a.value);
    const t = v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
    if (t !== a.type) throw new Error(`argument ${a.key}: type ${a.type} but value ${a.value}`);
    out[a.key] = v;
  }
  return out;
}
