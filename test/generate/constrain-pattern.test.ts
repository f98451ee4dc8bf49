// Constrained decoding of `pattern`, `format`, numeric bounds and min/maxProperties
// (src/generate/constrain: regex.ts, dfa.ts, strlang.ts, numrange.ts, formats.ts, minlen.ts): the pattern automaton agrees with JS RegExp,
// bounded numbers with the comparisons, random walks (symbols and tokens) always finish in
// documents and tool calls that ajv (and independent format checks) accept, the fewest bytes to
// finish are exact, what cannot be held is refused naming the schema path; and the mask cost on
// the real 163840-id vocabulary inside a pattern string.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { join } from 'node:path';
import { k3ReplyConstraint, Matcher, replyGrammar, SchemaCompiler, type GrammarConstraint } from '../../src/generate/constrain/index.js';
import { dfaOf, searchOf } from '../../src/generate/constrain/dfa.js';
import { numberRegexes } from '../../src/generate/constrain/numrange.js';
import { parseRegex } from '../../src/generate/constrain/regex.js';
import { CLOSE, END, OPEN, SEP } from '../../src/generate/constrain/symbols.js';
import { Tokenizer, demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { UserError } from '../../src/util/errors.js';
import { accepts, callArguments, docMatcher, parseReply, randomWalk, validator, walkDown } from '../constrain-helpers.js';
import { ROOT, xorshift } from '../helpers.js';

const dfas = new Map<string, ReturnType<typeof dfaOf>>();
const dfaAccepts = (src: string, s: string): boolean => {
  let d = dfas.get(src);
  if (!d) dfas.set(src, (d = dfaOf([searchOf(parseRegex(src))])));
  let q = 0;
  for (const b of Buffer.from(s, 'utf8')) {
    q = d.next(q, b);
    if (q < 0) return false;
  }
  return d.accept[q] === 1;
};

const PATTERNS = ['^[A-Z]{2}-\\d{3}$', 'ab+c', '^(foo|bar)?baz$', '^\\w+@\\w+\\.com$', 'x$', '^a|b$', '^[^aeiou\\s]{2,4}$', '^\\S*$', '^(?:[a-c]|é){1,3}\\.?$', '^\\D\\W$', '^$', '^[\\u00e0-\\u00ff]+[.]\\x41$', '^.{3}$', '^(a|ab)(c|bcd)(d*)$'];

test('pattern automaton: strings it accepts match JS RegExp; on ASCII the two agree', () => {
  const rnd = xorshift(7);
  const alphabet = ['a', 'b', 'c', 'd', 'A', 'Z', '1', '9', '-', '@', '.', ' ', '\n', 'é', 'ÿ', '٣', 'foo', 'bar', 'baz', '.com', 'x', '_', 'B', '\u2028', '😀'];
  for (const src of PATTERNS) {
    const re = new RegExp(src, 'u');
    let hits = 0;
    for (let k = 0; k < 400; k++) {
      let s = '';
      const n = Math.floor(rnd() * 7);
      for (let j = 0; j < n; j++) s += alphabet[Math.floor(rnd() * alphabet.length)];
      const d = dfaAccepts(src, s);
      if (d) assert.ok(re.test(s), `/${src}/ accepted ${JSON.stringify(s)}`);
      // eslint-disable-next-line no-control-regex
      if (/^[\x00-\x7f]*$/.test(s)) assert.equal(d, re.test(s), `/${src}/ on ${JSON.stringify(s)}`);
      hits += d ? 1 : 0;
    }
    for (const s of ['AB-123', 'xabbbcx', 'baz', 'foobaz', 'me@x.com', 'x', 'ab', 'b', 'xyz', '', 'ü.A', 'abc', 'àé.A', 'bb', 'abcdd']) if (re.test(s) && /^[\x20-\x7e]*$/.test(s)) assert.ok(dfaAccepts(src, s), `/${src}/ on ${s}`);
    void hits;
  }
  // \d \w \s keep to what both ECMA-262 and Python's re match
  assert.ok(!dfaAccepts('^\\d$', '٣'));
  assert.ok(!dfaAccepts('^\\D$', '٣'), 'Python counts it a digit');
  assert.ok(!dfaAccepts('^\\W$', 'é'));
  assert.ok(dfaAccepts('^\\S$', 'é'));
  assert.ok(!dfaAccepts('^\\S$', '\u0085'));
});

test('numeric bounds: the automaton of a bounded number accepts exactly the numbers in range', () => {
  const rnd = xorshift(11);
  const bounds = [[3, false, 117, false], [-2.5, true, 0.75, false], [0, false, null, null], [null, null, 0, true], [-10, false, -3, true], [0.1, true, 0.1999, false], [1e-7, false, 12.5, true], [-0.05, false, 1e3, false]] as const;
  for (const [lo, ls, hi, hs] of bounds) {
    for (const intOnly of [true, false]) {
      const d = dfaOf(numberRegexes(lo === null ? null : { value: lo, strict: ls! }, hi === null ? null : { value: hi, strict: hs! }, intOnly).map(parseRegex));
      const ok = (s: string): boolean => {
        let q = 0;
        for (const b of Buffer.from(s)) if ((q = d.next(q, b)) < 0) return false;
        return d.accept[q] === 1;
      };
      for (let k = 0; k < 1500; k++) {
        const mag = [1, 10, 1000, 1e-3][k % 4]!;
        let s = ((rnd() - 0.5) * 2 * mag * (lo !== null && Math.abs(lo) > 1 ? Math.abs(lo) * 2 : 1)).toFixed(Math.floor(rnd() * 6));
        if (k % 5 === 0) s = String(Math.round(Number(s)));
        if (k % 17 === 0) s = String([lo, hi][k % 2] ?? 0);
        const v = Number(s);
        const inRange = (lo === null || (ls ? v > lo : v >= lo)) && (hi === null || (hs ? v < hi : v <= hi)) && (!intOnly || !s.includes('.'));
        if (s.includes('e')) continue; // bounded numbers are written without an exponent
        if (s === '-0' || /^-0(\.0*)?$/.test(s)) continue; // negative zero: refused or not, either is valid
        assert.equal(ok(s), inRange, `${s} in ${lo}${ls ? '<' : '<='}x${hs ? '<' : '<='}${hi} int ${intOnly}`);
      }
    }
  }
});

const SCHEMAS: unknown[] = [
  { type: 'string', pattern: '^[A-Z]{2}-\\d{3}$' },
  { type: 'string', pattern: 'foo', maxLength: 9 },
  { type: 'string', pattern: '^\\S+@\\S+$', minLength: 5, maxLength: 12 },
  { type: 'object', properties: { id: { type: 'string', pattern: '^[a-f0-9]{8}$' }, n: { type: 'integer', minimum: 10, maximum: 20 }, p: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 } }, required: ['id', 'n', 'p'], additionalProperties: false },
  { type: 'array', items: { type: 'string', pattern: '^(yes|no|"x\\\\y")$' }, minItems: 2, maxItems: 3 },
  { anyOf: [{ type: 'string', pattern: '^a+$' }, { type: 'integer', maximum: -5 }, { type: 'number', minimum: 1000.5 }] },
  { type: 'string', pattern: '^[\\t\\n ]+\\.$' },
  { enum: ['ab', 'cd', 'abc'], pattern: '^a' },
  { type: 'integer', minimum: 0, maximum: 0 },
  { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string' }, c: { type: 'boolean' } }, minProperties: 2, maxProperties: 2 },
  { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string' }, c: { type: 'boolean' } }, required: ['c'], minProperties: 2, additionalProperties: false },
  { type: 'array', items: { type: 'object', additionalProperties: { type: 'integer', minimum: 5 }, maxProperties: 1 }, minItems: 1 },
  { type: 'object', patternProperties: { '^x_': { type: 'integer' }, 'num$': { type: 'number', minimum: 0 } }, additionalProperties: { type: 'string', maxLength: 2 } },
  { type: 'object', properties: { id: { type: 'integer' }, Big: { type: 'string' } }, required: ['id'], patternProperties: { '^[a-h]+$': { type: 'boolean' } }, additionalProperties: false },
  { type: 'object', properties: { a: false, b: { type: 'integer' } }, maxProperties: 4 },
  { type: 'object', properties: { a: { type: 'string', maxLength: 1 }, e: { type: 'integer', maximum: -2 } } },
  { type: 'object', propertyNames: { pattern: '^[A-Z][a-z]*$' }, additionalProperties: { type: 'integer' }, maxProperties: 3 },
  { type: 'array', items: { anyOf: [{ type: 'integer', multipleOf: 7, minimum: -30, maximum: 100 }, { type: 'number', multipleOf: 25, exclusiveMinimum: 1000 }, { enum: [14, 15, 21.5] }] } },
];

test('random walks with patterns and bounds always end in documents that validate; the fewest bytes are exact', () => {
  for (const [si, schema] of SCHEMAS.entries()) {
    const ok = validator(schema);
    for (const layout of ['json', 'py'] as const) {
      const { m, unsupported } = docMatcher(schema, layout);
      assert.deepEqual(unsupported, []);
      for (let seed = 1; seed <= 60; seed++) {
        const budget = m.min(m.start) + (seed % 6) * 6;
        const s = randomWalk(m, budget, seed * 131 + si);
        assert.ok(s.length <= budget);
        assert.equal(s.at(-1), END);
        const text = Buffer.from(s.slice(0, -1)).toString('utf8');
        let v: unknown;
        assert.doesNotThrow(() => (v = JSON.parse(text)), text);
        assert.ok(ok(v), `schema ${si} ${layout}: ${text}`);
        // exact minimum from every prefix of the walk
        if (seed <= 6) {
          let st = m.start;
          for (const sym of s) {
            assert.equal(walkDown(m, st), m.min(st), `schema ${si}: after ${text}`);
            st = m.next(st, sym);
          }
        }
      }
    }
  }
  const { m } = docMatcher(SCHEMAS[3]);
  assert.ok(accepts(m, '{"id": "0123abcd", "n": 20, "p": 0.5}'));
  assert.ok(!accepts(m, '{"id": "0123abcd", "n": 21, "p": 0.5}'));
  assert.ok(!accepts(m, '{"id": "0123abcd", "n": 10, "p": 1}'));
  assert.ok(!accepts(m, '{"id": "0123abcD", "n": 10, "p": 0.5}'));
  const banned = docMatcher({ type: 'object', properties: { a: false, b: { type: 'integer', maximum: 3 } }, patternProperties: { '^c': false } }).m;
  assert.ok(!accepts(banned, '{"a": 1}'), 'a declared key with a false schema is no free key either');
  assert.ok(!accepts(banned, '{"b": 4}') && !accepts(banned, '{"cx": 1}'));
  assert.ok(accepts(banned, '{"b": 3, "ab": 1, "xc": null}'));
  // a declared key is never written as a free key (which would skip its schema)
  const open = docMatcher({ type: 'object', properties: { b: { type: 'string', maxLength: 1 } } }).m;
  assert.ok(!accepts(open, '{"b": "xx"}') && accepts(open, '{"b": "x", "bb": "xx"}'));
  const mult = docMatcher({ type: 'integer', multipleOf: 7, maximum: 100 }).m;
  for (let v = -50; v <= 120; v++) assert.equal(accepts(mult, String(v)), v % 7 === 0 && v <= 100, String(v));
  assert.ok(!accepts(mult, '7.0'));
  const esc = docMatcher({ type: 'string', pattern: '^a\\nb"$' }).m;
  assert.ok(accepts(esc, '"a\\nb\\""'));
  assert.ok(!accepts(esc, '"a\\u000ab\\""'), 'no \\u escapes inside a pattern string');
  assert.equal(esc.min(esc.start) - 1, 8);
});

const FORMAT_CHECKS: Record<string, (s: string) => boolean> = {
  date: (s) => /^\d{4}-\d{2}-\d{2}$/.test(s) && new Date(`${s}T00:00:00Z`).toISOString().slice(0, 10) === s,
  'date-time': (s) => !Number.isNaN(Date.parse(s)) && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(s) && new Date(`${s.slice(0, 10)}T00:00:00Z`).toISOString().slice(0, 10) === s.slice(0, 10),
  time: (s) => /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(s),
  uuid: (s) => /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/i.test(s),
  ipv4: (s) => isIPv4(s),
  email: (s) => /^[^@\s]+@[^@\s]+\.[a-z]{2,}$/i.test(s) && !s.includes('..'),
  uri: (s) => {
    try {
      return new URL(s).href.length > 0 && /^https?:\/\//.test(s);
    } catch {
      return false;
    }
  },
  hostname: (s) => s.length <= 253 && s.split('.').every((l) => /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i.test(l)),
};

test('formats: random walks give strings the format accepts (independent checks)', () => {
  for (const [format, check] of Object.entries(FORMAT_CHECKS)) {
    const { m, unsupported } = docMatcher({ type: 'string', format });
    assert.deepEqual(unsupported, []);
    for (let seed = 1; seed <= 40; seed++) {
      const s = randomWalk(m, m.min(m.start) + (seed % 5) * 8, seed);
      const v = JSON.parse(Buffer.from(s.slice(0, -1)).toString('utf8')) as string;
      assert.ok(check(v), `${format}: ${v}`);
    }
  }
  assert.deepEqual(docMatcher({ type: 'string', format: 'json-pointer' }).unsupported, ['format json-pointer']);
});

test('what cannot be held is refused, naming the schema path', () => {
  const refuse = (schema: unknown, re: RegExp): void => {
    assert.throws(() => docMatcher(schema), (e: unknown) => e instanceof UserError && re.test(e.message), JSON.stringify(schema));
  };
  refuse({ type: 'object', properties: { a: { type: 'string', pattern: '(?=x)y' } } }, /schema: \/properties\/a\/pattern: cannot hold lookaround/);
  refuse({ type: 'string', pattern: '(a)\\1' }, /\/pattern: cannot hold a back reference/);
  refuse({ type: 'string', pattern: '\\bword' }, /word boundary/);
  refuse({ type: 'string', pattern: 'a{2000}' }, /repeat count/);
  refuse({ type: 'string', pattern: '[a' }, /unterminated/);
  refuse({ $defs: { x: { type: 'string', pattern: '^[a-z]{1,40}[0-9]{1,40}$', maxLength: 60000 } }, $ref: '#/$defs/x' }, /\/\$defs\/x\/pattern: cannot hold the pattern .* too large/);
  assert.throws(() => replyGrammar({ thinking: false, json: { type: 'string', pattern: 'a)' } }), /response_format schema: \/pattern: cannot hold unexpected \)/);
  // a pattern no string satisfies with the length: no value
  assert.throws(() => replyGrammar({ thinking: false, json: { type: 'string', pattern: '^abc$', maxLength: 2 } }), /no JSON value/);
  const comp = new SchemaCompiler({ type: 'number', minimum: 0, multipleOf: 0.01 });
  comp.node(comp.root);
  assert.deepEqual([...comp.unsupported], ['multipleOf (past integers up to 1000)']);
  assert.deepEqual(docMatcher({ type: 'object', properties: { a: {} }, minProperties: 2 }).unsupported, ['minProperties (past the declared keys)']);
  assert.throws(() => replyGrammar({ thinking: false, json: { type: 'object', properties: { a: {} }, minProperties: 2, additionalProperties: false } }), /no JSON value/);
  assert.throws(() => replyGrammar({ thinking: false, json: { type: 'object', properties: { a: {}, b: {} }, required: ['a', 'b'], maxProperties: 1 } }), /no JSON value/);
});

const TOOLS = [
  { name: 'book', parameters: { type: 'object', properties: { date: { type: 'string', format: 'date' }, code: { type: 'string', pattern: '^[A-Z]{3}$' }, seats: { type: 'integer', minimum: 1, maximum: 9 }, note: { type: 'string', pattern: 'ok', maxLength: 6 }, ids: { type: 'array', items: { type: 'string', pattern: '^#\\d+$' }, maxItems: 2 } }, required: ['date', 'code', 'seats'] } },
  { name: 'pick', parameters: { type: 'object', properties: { x: { type: 'integer', exclusiveMaximum: 0 }, y: { type: 'string', format: 'uuid' }, z: { type: 'number', minimum: 0.25, maximum: 0.5 } }, minProperties: 2, maxProperties: 2 } },
];

test('tool arguments: raw string patterns, formats, bounds, min/maxProperties; every call parses and validates', () => {
  const tok = new Tokenizer(demoTokenizerFiles()['tiktoken.model'] as string, demoTokenizerFiles()['tokenizer_config.json'] as string);
  const id = new Map([[OPEN, tok.specialId('<|open|>')!], [CLOSE, tok.specialId('<|close|>')!], [SEP, tok.specialId('<|sep|>')!], [END, tok.specialId('<|end_of_msg|>')!]]);
  const oks = new Map(TOOLS.map((t) => [t.name, validator(t.parameters)]));
  const names = new Set<string>();
  for (const tool of TOOLS) {
    const { root, unsupported } = replyGrammar({ thinking: false, tools: [tool], toolMode: 'required' });
    assert.deepEqual(unsupported, []);
    const m = new Matcher(root);
    for (let seed = 1; seed <= 30; seed++) {
      const walk = randomWalk(m, m.min(m.start) + (seed % 5) * 10, seed * 17);
      const p = parseReply(tok, walk.map((s) => id.get(s) ?? s), false);
      for (const call of p.calls!) {
        assert.ok(oks.get(call.name)!(callArguments(call)), `${call.name} ${JSON.stringify(call.args)}`);
        names.add(call.name);
      }
    }
  }
  assert.deepEqual([...names].sort(), ['book', 'pick']);
});

test('token walks (demo vocabulary) with patterns and bounds never dead-end and always validate', () => {
  const tok = new Tokenizer(demoTokenizerFiles()['tiktoken.model'], demoTokenizerFiles()['tokenizer_config.json']);
  const schema = SCHEMAS[3]!;
  const ok = validator(schema);
  const tools = [{ type: 'function' as const, function: TOOLS[0]! }];
  const okTool = validator(TOOLS[0]!.parameters);
  for (let seed = 1; seed <= 24; seed++) {
    const opts = seed % 2 === 0 ? { thinking: false, responseFormat: { type: 'json_schema' as const, json_schema: { schema } } } : { thinking: false, tools, toolChoice: 'required' as const };
    const c = k3ReplyConstraint(tok, opts)!;
    const rnd = xorshift(seed * 4391);
    const budget = c.minTokens + (seed % 4) * 4;
    const ids: number[] = [];
    const logits = new Float32Array(tok.vocabSize);
    while (ids.at(-1) !== c.stopIds[0]) {
      assert.ok(ids.length < budget);
      logits.fill(0);
      c.mask(logits, budget - ids.length);
      const allowed = [...logits.keys()].filter((i) => logits[i] === 0);
      assert.ok(allowed.length > 0, 'the mask never empties');
      const pick = allowed[Math.floor(rnd() * allowed.length)]!;
      c.accept(pick);
      ids.push(pick);
    }
    const p = parseReply(tok, ids, false);
    if (seed % 2 === 0) assert.ok(ok(JSON.parse(p.content)), p.content);
    else for (const call of p.calls!) assert.ok(okTool(callArguments(call)), JSON.stringify(call.args));
  }
});

test('real K3 vocabulary: masks inside pattern strings, cost measured', () => {
  const text = readFileSync(join(ROOT, '..', 'shared', 'realdata', 'k3-tokenizer', 'tiktoken.model'), 'utf8');
  const added: Record<string, { content: string; special: boolean }> = {};
  for (const [i, name] of [[163584, '[BOS]'], [163585, '[EOS]'], [163586, '<|end_of_msg|>'], [163587, '<|open|>'], [163588, '<|close|>'], [163589, '<|sep|>']] as const) added[i] = { content: name, special: true };
  const tok = new Tokenizer(text, { added_tokens_decoder: added });
  const schema = { type: 'object', properties: { when: { type: 'string', format: 'date-time' }, code: { type: 'string', pattern: '^[a-z_][a-z0-9_]{0,30}$' }, mail: { type: 'string', format: 'email' }, n: { type: 'integer', minimum: 1, maximum: 500 } }, required: ['when', 'code', 'mail', 'n'], additionalProperties: false };
  const ok = validator(schema);
  const reply = '{"when": "2024-05-17T10:30:00Z", "code": "load_user_2", "mail": "ann.lee@example.com", "n": 42}';
  for (const round of [0, 1]) {
    const c = k3ReplyConstraint(tok, { thinking: false, responseFormat: { type: 'json_schema', json_schema: { schema } } })! as unknown as GrammarConstraint;
    const ids = [...tok.encodeOrdinary(reply), ...tok.encode('<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>')];
    const logits = new Float32Array(163840);
    const times: number[] = [];
    let left = 200;
    for (const i of ids) {
      const t = performance.now();
      logits.fill(0);
      c.mask(logits, left);
      times.push(performance.now() - t);
      assert.notEqual(logits[i], -Infinity, `id ${i} (${JSON.stringify(tok.decode([i]))}) masked`);
      for (let k = 0; k < 163840; k += 1999) assert.equal(logits[k] !== -Infinity, c.allows(k, left), `id ${k}`);
      c.accept(i);
      left--;
    }
    const sorted = [...times].sort((a, b) => a - b);
    const total = times.reduce((a, b) => a + b, 0);
    console.log(`# real vocabulary, pattern / format / bounds schema (${round === 0 ? 'first request' : 'warm'}): mask per step median ${sorted[sorted.length >> 1]!.toFixed(2)} ms, max ${sorted.at(-1)!.toFixed(1)} ms, total ${total.toFixed(0)} ms over ${ids.length} steps`);
  }
  assert.ok(ok(JSON.parse(reply)));
});
