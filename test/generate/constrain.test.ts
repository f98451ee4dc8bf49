// Constrained decoding (src/generate/constrain): the JSON Schema matcher byte by byte (valid
// documents accepted, invalid ones refused, the fewest bytes to finish exact), random walks under
// a budget that always end in a document ajv accepts, token walks at the tightest budgets (literals
// counted in tokens) that always finish, constrained sampling giving the ids sampling the masked
// logits gives, and on a random-weight K3 (the demo vocabulary, 512 ids with merges) replies that
// always parse and validate: response_format json_schema over 50 seeds, tool_choice required /
// named / parallel_tool_calls false, thinking on and off, greedy and sampled. The real
// 163840-id vocabulary's masks are checked and timed at the end.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModel, type KimiModel } from '../../src/api/index.js';
import { DEAD, k3ReplyConstraint, Matcher, replyGrammar, sampleConstrained, TokenGrammar, GrammarConstraint, vocabIndex, NEVER } from '../../src/generate/constrain/index.js';
import { Sampler, type SamplingOptions } from '../../src/generate/sampling.js';
import { CLOSE, END, OPEN, SEP, syms } from '../../src/generate/constrain/symbols.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { Tokenizer, demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { accepts, callArguments, docMatcher, feedText, parseReply, randomWalk, validator, walkDown } from '../constrain-helpers.js';
import { ROOT, xorshift } from '../helpers.js';

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 20 },
    age: { type: 'integer' },
    score: { type: 'number' },
    role: { enum: ['admin', 'user', 'guest'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 },
    address: {
      type: 'object',
      properties: { city: { type: 'string' }, zip: { type: ['string', 'null'] }, geo: { type: 'array', prefixItems: [{ type: 'number' }, { type: 'number' }], items: false, minItems: 2 } },
      required: ['city', 'geo'],
      additionalProperties: false,
    },
    active: { type: 'boolean' },
  },
  required: ['name', 'age', 'role', 'address'],
  additionalProperties: false,
};

const TREE = {
  $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['v'], additionalProperties: false } },
  $ref: '#/$defs/node',
};

test('schema matcher: valid documents are accepted byte by byte, invalid ones refused', () => {
  const { m } = docMatcher(PERSON);
  const good = [
    '{"name":"Ann","age":30,"role":"admin","address":{"city":"Oslo","geo":[59.9,10.7]}}',
    ' { "age" : -0 , "role":"guest", "name":"\\u00e9t\\u00E9","address":{"geo":[1e5,-2.5E-3],"city":"","zip":null} , "tags":[],"active":false} ',
    '{"role":"user","address":{"city":"Zürich","zip":"8000","geo":[0,1]},"name":"日本","age":7,"score":1.5,"tags":["a","b","c"]}',
  ];
  for (const d of good) {
    assert.ok(accepts(m, d), d);
    assert.doesNotThrow(() => JSON.parse(d));
  }
  const bad = [
    '{"name":"Ann","age":30,"role":"admin","address":{"city":"Oslo","geo":[1,2]}}\n', // no newlines or tabs (one space at most)
    '{"name":"Ann",  "age":30,"role":"admin","address":{"city":"Oslo","geo":[1,2]}}',
    '{"name":"Ann","age":30,"role":"admin"}', // address missing
    '{"name":"","age":30,"role":"admin","address":{"city":"Oslo","geo":[1,2]}}', // minLength
    '{"name":"Ann","age":3.5,"role":"admin","address":{"city":"Oslo","geo":[1,2]}}', // integer
    '{"name":"Ann","age":3,"role":"root","address":{"city":"Oslo","geo":[1,2]}}', // enum
    '{"name":"Ann","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2,3]}}', // items false
    '{"name":"Ann","age":3,"role":"user","address":{"city":"Oslo","geo":[1]}}', // minItems
    '{"name":"Ann","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2]},"x":1}', // additionalProperties
    '{"name":"Ann","name":"Bo","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2]}}', // repeated key
    '{"name":"Ann","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2]},"tags":["123456789"]}', // maxLength
    '{"name":"A\x01","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2]}}', // raw control char
    '{"name":"\\ud800","age":3,"role":"user","address":{"city":"Oslo","geo":[1,2]}}', // lone surrogate escape
    '{"name":"Ann","age":01,"role":"user","address":{"city":"Oslo","geo":[1,2]}}', // leading zero
    '[1]',
  ];
  for (const d of bad) assert.ok(!accepts(m, d), d);
  // invalid UTF-8 inside a string
  const st = feedText(m, '{"name":"');
  assert.equal(m.feed(st, [0xc0, 0x80]), DEAD);
  assert.equal(m.feed(st, [0xed, 0xa0, 0x80]), DEAD);
  assert.notEqual(m.feed(st, [0xe2, 0x82, 0xac]), DEAD);
});

test('schema matcher: recursion, unions, allOf, const, nullable, json_object and any value', () => {
  const { m } = docMatcher(TREE);
  assert.ok(accepts(m, '{"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]}'));
  assert.ok(!accepts(m, '{"v":1,"kids":[{"v":2},{"v":3},{"v":4}]}'));
  assert.ok(!accepts(m, '{"kids":[]}'));
  const u = docMatcher({ anyOf: [{ type: 'object', properties: { a: { const: 1 } }, required: ['a'] }, { type: 'object', properties: { a: { type: 'string' }, b: { type: 'boolean' } }, required: ['a', 'b'] }] }).m;
  assert.ok(accepts(u, '{"a":1}'));
  assert.ok(accepts(u, '{"a":"x","b":true}'));
  assert.ok(!accepts(u, '{"a":"x"}'));
  assert.ok(!accepts(u, '{"a":2}'));
  // allOf: each part's additionalProperties applies to the keys the part does not declare (as ajv sees it)
  const ALL = { allOf: [{ type: 'object', properties: { a: { type: 'integer' }, c: {} }, required: ['a'] }, { properties: { a: {}, b: { type: 'string' } }, required: ['b'], additionalProperties: false }] };
  const all = docMatcher(ALL).m;
  const allOk = validator(ALL);
  for (const d of ['{"a":1,"b":"x"}', '{"a":1,"b":"x","c":1}', '{"b":"x"}', '{"a":"1","b":"x"}', '{"b":"x","a":2}']) assert.equal(accepts(all, d), allOk(JSON.parse(d)), d);
  assert.ok(accepts(all, '{"a":1,"b":"x"}'));
  const n = docMatcher({ type: 'string', nullable: true }).m;
  assert.ok(accepts(n, 'null') && accepts(n, '"x"') && !accepts(n, '1'));
  const obj = docMatcher({ type: 'object' }).m;
  assert.ok(accepts(obj, '{"a":[1,{"b":null}],"":"x"}') && !accepts(obj, '[]') && !accepts(obj, '"x"'));
  const anyv = docMatcher(true).m;
  for (const d of ['1', '"x"', 'null', '[true,false]', '{"k":{}}', '-1.5e+10']) assert.ok(accepts(anyv, d), d);
  const py = docMatcher({ type: 'object', properties: { a: { type: 'array' } } }, 'py').m;
  assert.ok(accepts(py, '{"a": [1, "two", false]}'));
  assert.ok(!accepts(py, '{"a":[1]}'));
  assert.ok(!accepts(py, '{"a": [1,2]}'));
  const { unsupported } = docMatcher({ type: 'integer', minimum: 0, format: 'x', description: 'y' });
  assert.deepEqual(unsupported.sort(), ['format x']);
});

test('schema matcher: the fewest bytes to finish are exact from every prefix of valid documents', () => {
  const cases: Array<[unknown, string]> = [
    [PERSON, '{"name":"Ann","age":30,"role":"admin","address":{"city":"Oslo","geo":[59.9,10.7]},"tags":["x"]}'],
    [TREE, '{"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]}'],
    [{ type: 'string', minLength: 3 }, '"a\\u00e9b"'],
  ];
  for (const [schema, d] of cases) {
    const { m } = docMatcher(schema);
    assert.equal(m.min(m.start) - 1, schema === PERSON ? '{"name":"a","age":0,"role":"user","address":{"city":"","geo":[0,0]}}'.length : schema === TREE ? '{"v":0}'.length : 5);
    const b = Buffer.from(d);
    let st = m.start;
    for (let i = 0; i <= b.length; i++) {
      const steps = walkDown(m, st);
      assert.equal(steps, m.min(st), `${d.slice(0, i)}: minimum ${m.min(st)} but walked ${steps}`);
      assert.ok(m.min(st) - 1 <= b.length - i, 'the rest of a valid document is at least the minimum');
      if (i < b.length) st = m.next(st, b[i]!);
    }
  }
});

test('random walks under a budget always end in a document that validates', () => {
  const schemas = [PERSON, TREE, { type: 'array', items: { anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 2 }, { type: 'object', additionalProperties: { type: 'boolean' } }] }, minItems: 1 }, { type: 'object' }, true];
  for (const [si, schema] of schemas.entries()) {
    const ok = validator(schema);
    for (const layout of ['json', 'py'] as const) {
      const { m } = docMatcher(schema, layout);
      for (let seed = 1; seed <= 60; seed++) {
        const budget = m.min(m.start) + (seed % 7) * 15;
        const s = randomWalk(m, budget, seed * 7919 + si);
        assert.ok(s.length <= budget);
        assert.equal(s.at(-1), END);
        const text = Buffer.from(s.slice(0, -1)).toString('utf8');
        let v: unknown;
        assert.doesNotThrow(() => (v = JSON.parse(text)), text);
        assert.ok(ok(v), `schema ${si} ${layout}: ${text}`);
      }
    }
  }
});

test('tool grammar: required keys, no repeats, typed values; lazy mode holds calls once tools open', () => {
  const tools = [{ name: 'add', parameters: { type: 'object', properties: { a: { type: 'number' }, s: { type: 'string', maxLength: 3 } }, required: ['a'] } }];
  const m = new Matcher(replyGrammar({ thinking: false, tools, toolMode: 'required', parallel: false }).root);
  const call = (body: string): number[] => syms(CLOSE, 'response', SEP, OPEN, 'tools', SEP, OPEN, 'call tool="add" index="1"', SEP, ...body.split('|').flatMap((p) => (p === 'O' ? [OPEN] : p === 'C' ? [CLOSE] : p === 'S' ? [SEP] : syms(p))), CLOSE, 'call', SEP, CLOSE, 'tools', SEP, CLOSE, 'message', SEP, END);
  const ok = (body: string): boolean => {
    const st = m.feed(m.start, syms('hi', ...call(body)));
    return st !== DEAD && m.info(st).accepting;
  };
  assert.ok(ok('O|argument key="a" type="number"|S|1.5|C|argument|S'));
  assert.ok(ok('O|argument key="s" type="string"|S|a"<|C|argument|S|O|argument key="a" type="number"|S|-2|C|argument|S'));
  assert.ok(!ok(''), 'a required');
  assert.ok(!ok('O|argument key="a" type="string"|S|1|C|argument|S'), 'type must match the schema');
  assert.ok(!ok('O|argument key="a" type="number"|S|1|C|argument|S|O|argument key="a" type="number"|S|2|C|argument|S'), 'no repeats');
  assert.ok(!ok('O|argument key="a" type="number"|S|1|C|argument|S|O|argument key="s" type="string"|S|abcd|C|argument|S'), 'maxLength');
  assert.ok(!ok('O|argument key="b" type="number"|S|1|C|argument|S'), 'undeclared key');
  // lazy: anything (other specials too) until <|open|>tools<|sep|>, then only valid calls
  const lz = new Matcher(replyGrammar({ thinking: true, tools, toolMode: 'lazy' }).root);
  let st = lz.feed(lz.start, syms('x', OPEN, 'tool', CLOSE, 'y', OPEN, 'toolsy', SEP, OPEN));
  assert.notEqual(st, DEAD);
  assert.equal(lz.info(lz.feed(lz.start, syms('free'))).free, 'lazy');
  st = lz.feed(st, syms('tools', SEP));
  assert.equal(lz.info(st).free, null);
  assert.equal(lz.feed(st, syms('free text')), DEAD);
  const end = lz.feed(st, syms(OPEN, 'call tool="add" index="1"', SEP, OPEN, 'argument key="a" type="number"', SEP, '7', CLOSE, 'argument', SEP, CLOSE, 'call', SEP, CLOSE, 'tools', SEP, CLOSE, 'message', SEP, END));
  assert.ok(end !== DEAD && lz.info(end).accepting);
});

const TOOLS = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'integer' }, note: { type: 'string', maxLength: 6 }, mode: { enum: ['fast', 'exact', 1] }, opts: { type: 'object', properties: { deep: { type: 'boolean' }, list: { type: 'array', items: { type: 'integer' } } }, required: ['deep'] } }, required: ['a', 'b'] } } },
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', minLength: 2 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false } } },
];
const toolValidators = new Map(TOOLS.map((t) => [t.function.name, validator(t.function.parameters)]));

test('random walks through the tool grammar always end in calls that parse and validate', () => {
  const tok = new Tokenizer(demoTokenizerFiles()['tiktoken.model'] as string, demoTokenizerFiles()['tokenizer_config.json'] as string);
  const id = new Map([[OPEN, tok.specialId('<|open|>')!], [CLOSE, tok.specialId('<|close|>')!], [SEP, tok.specialId('<|sep|>')!], [END, tok.specialId('<|end_of_msg|>')!]]);
  const specs = TOOLS.map((t) => t.function);
  let multi = 0;
  for (const parallel of [true, false]) {
    for (const thinking of [true, false]) {
      const m = new Matcher(replyGrammar({ thinking, tools: specs, toolMode: 'required', parallel }).root);
      for (let seed = 1; seed <= 40; seed++) {
        const walk = randomWalk(m, m.min(m.start) + seed * 6, seed * 31 + (parallel ? 1 : 0));
        // the demo vocabulary's ids 0..255 are the single bytes
        const p = parseReply(tok, walk.map((s) => id.get(s) ?? s), thinking);
        assert.ok(p.calls && p.calls.length >= 1);
        if (!parallel) assert.equal(p.calls.length, 1);
        multi += p.calls.length > 1 ? 1 : 0;
        p.calls.forEach((call, k) => {
          assert.equal(call.index, String(k + 1));
          assert.ok(toolValidators.get(call.name)!(callArguments(call)), `${call.name} ${JSON.stringify(call.args)}`);
        });
      }
    }
  }
  assert.ok(multi > 0, 'some walks make several calls');
});

test('token walks at the tightest budgets always finish (literals counted in tokens), and parse', () => {
  const tok = new Tokenizer(demoTokenizerFiles()['tiktoken.model'], demoTokenizerFiles()['tokenizer_config.json']);
  const ok = validator(PERSON);
  const cases = [
    { thinking: true, responseFormat: { type: 'json_schema' as const, json_schema: { schema: PERSON } } },
    { thinking: false, tools: TOOLS, toolChoice: 'required' as const },
    { thinking: true, tools: TOOLS, toolChoice: 'required' as const, parallelToolCalls: false },
  ];
  for (const [ci, o] of cases.entries()) {
    for (let seed = 1; seed <= 30; seed++) {
      const c = k3ReplyConstraint(tok, o)!;
      const rnd = xorshift(seed * 977 + ci);
      const budget = c.minTokens + (seed % 4) * 3;
      const ids: number[] = [];
      const logits = new Float32Array(tok.vocabSize);
      while (ids.at(-1) !== c.stopIds[0]) {
        assert.ok(ids.length < budget, 'within the budget');
        logits.fill(0);
        c.mask(logits, budget - ids.length);
        const allowed = [...logits.keys()].filter((i) => logits[i] === 0);
        const id = allowed[Math.floor(rnd() * allowed.length)]!;
        assert.ok(c.allows(id, budget - ids.length));
        c.accept(id);
        ids.push(id);
      }
      const p = parseReply(tok, ids, o.thinking);
      if (ci === 0) assert.ok(ok(JSON.parse(p.content)), p.content);
      else for (const call of p.calls!) assert.ok(toolValidators.get(call.name)!(callArguments(call)));
    }
  }
  // a tool call's tags are a few tokens each, not a token per byte
  const c = k3ReplyConstraint(tok, { thinking: false, tools: [TOOLS[1]!], toolChoice: 'required' })!;
  const bytes = new Matcher(replyGrammar({ thinking: false, tools: [TOOLS[1]!.function], toolMode: 'required' }).root);
  assert.ok(c.minTokens < bytes.min(bytes.start), `${c.minTokens} tokens against ${bytes.min(bytes.start)} bytes`);
});

test('constrained sampling picks what sampling the masked logits picks (greedy and truncated chains: the same ids)', () => {
  const tok = new Tokenizer(demoTokenizerFiles()['tiktoken.model'], demoTokenizerFiles()['tokenizer_config.json']);
  const V = tok.vocabSize;
  const chains: SamplingOptions[] = [{}, { repetitionPenalty: 1.3 }, { temperature: 0.7, topK: 5, seed: 3 }, { temperature: 1.2, topP: 0.9, seed: 4 }, { temperature: 0.9, minP: 0.05, seed: 5 }];
  for (const [ci, chain] of chains.entries()) {
    for (const o of [{ thinking: false, responseFormat: { type: 'json_schema' as const, json_schema: { schema: PERSON } } }, { thinking: false, tools: TOOLS, toolChoice: 'required' as const }]) {
      const c = k3ReplyConstraint(tok, o)!;
      const ref = k3ReplyConstraint(tok, o)!;
      const a = new Sampler(chain);
      const b = new Sampler(chain);
      const rnd = xorshift(ci + 11);
      const history: number[] = [];
      for (let left = c.minTokens + 40; left > 0; left--) {
        const logits = Float32Array.from({ length: V }, () => (rnd() - 0.5) * 8);
        const id = sampleConstrained(a, logits, history, V, c, left);
        const masked = logits.slice();
        ref.mask(masked, left);
        assert.equal(id, b.sample(masked, history, V), `chain ${ci}, ${left} left`);
        c.accept(id);
        ref.accept(id);
        history.push(id);
        if (c.stopIds.includes(id)) break;
      }
      assert.equal(history.at(-1), c.stopIds[0]);
    }
  }
});

// ------------------------------------------------------------------------------------------
// On a random-weight K3

const tmp = mkdtempSync(join(tmpdir(), 'k3-constrain-'));
const DEMO = join(tmp, 'demo-k3');
let model: KimiModel;

before(async () => {
  // the demo preset cut to 3 layers and 4 experts: random weights, the demo vocabulary, 3x faster
  await synthCheckpoint({ arch: 'k3', preset: 'demo', layers: 3, mlaLayers: [3], experts: 4, topK: 2, out: DEMO, extraFiles: demoTokenizerFiles() });
  model = await loadModel(DEMO, { threads: 1, ctx: 512, parallel: 10 });
});
after(async () => {
  await model?.close();
  rmSync(tmp, { recursive: true, force: true });
});

function prompt(user: string, thinking: boolean): number[] {
  const tok = model.tokenizer!;
  return tok.encode(`<|open|>message role="user"<|sep|>${user}<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>${thinking ? 'think' : 'response'}<|sep|>`);
}

const sampling = (seed: number) => (seed % 3 === 0 ? { temperature: 0 } : seed % 3 === 1 ? { temperature: 1, seed } : { temperature: 0.8, topP: 0.9, topK: 40, seed });

test('random K3, response_format json_schema: 50 seeds, every reply parses and validates', async () => {
  const tok = model.tokenizer!;
  const ok = validator(PERSON);
  const runs = Array.from({ length: 50 }, (_, seed) => {
    const thinking = seed % 2 === 0;
    const c = k3ReplyConstraint(tok, { thinking, responseFormat: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON } } })!;
    assert.deepEqual(c.unsupported, []);
    return model.generate(prompt('Who?', thinking), { maxTokens: c.minTokens + (seed % 5) * 15, ...sampling(seed), constraint: c, ignoreEos: false }).result.then((r) => ({ r, thinking, seed }));
  });
  for (const { r, thinking, seed } of await Promise.all(runs)) {
    assert.equal(r.stopReason, 'stop_token', `seed ${seed}`);
    const p = parseReply(tok, r.ids, thinking);
    const v = JSON.parse(p.content);
    assert.ok(ok(v), `seed ${seed}: ${p.content}`);
    assert.equal(p.calls, null);
  }
});

test('random K3, json_object and a max_tokens too small for the schema', async () => {
  const tok = model.tokenizer!;
  for (const seed of [0, 1]) {
    const c = k3ReplyConstraint(tok, { thinking: true, responseFormat: { type: 'json_object' } })!;
    const r = await model.generate(prompt('JSON', true), { maxTokens: 40, ...sampling(seed), constraint: c, ignoreEos: false }).result;
    const v = JSON.parse(parseReply(tok, r.ids, true).content);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v));
  }
  let c = k3ReplyConstraint(tok, { thinking: true, responseFormat: { type: 'json_schema', json_schema: { schema: PERSON } } })!;
  // too few tokens for the whole document: the shortest way towards its end, cut off there
  const cut = await model.generate(prompt('x', true), { maxTokens: 20, constraint: c, ignoreEos: false }).result;
  assert.equal(cut.stopReason, 'max_tokens');
  assert.equal(cut.ids.length, 20);
  c = k3ReplyConstraint(tok, { thinking: true, responseFormat: { type: 'json_schema', json_schema: { schema: PERSON } } })!;
  await assert.rejects(model.generate(prompt('x', true), { maxTokens: 200, spec: 2, constraint: c }).result, /speculative decoding/);
});

test('random K3, tool_choice required: 24 seeds, every reply has calls that parse and validate', async () => {
  const tok = model.tokenizer!;
  const runs = Array.from({ length: 24 }, (_, seed) => {
    const thinking = seed % 2 === 1;
    const parallel = seed % 4 < 2;
    const named = seed % 6 === 5;
    const c = k3ReplyConstraint(tok, { thinking, tools: TOOLS, toolChoice: named ? { type: 'function', function: { name: 'add' } } : 'required', parallelToolCalls: parallel })!;
    return model.generate(prompt('Add 2 and 3', thinking), { maxTokens: c.minTokens + (seed % 4) * 25, ...sampling(seed), constraint: c, ignoreEos: false }).result.then((r) => ({ r, thinking, seed, parallel, named }));
  });
  let multi = 0;
  for (const { r, thinking, seed, parallel, named } of await Promise.all(runs)) {
    assert.equal(r.stopReason, 'stop_token', `seed ${seed}`);
    const p = parseReply(tok, r.ids, thinking);
    assert.ok(p.calls && p.calls.length >= 1, `seed ${seed}`);
    if (!parallel) assert.equal(p.calls.length, 1);
    multi += p.calls.length > 1 ? 1 : 0;
    p.calls.forEach((call, k) => {
      assert.equal(call.index, String(k + 1));
      if (named) assert.equal(call.name, 'add');
      const args = callArguments(call);
      assert.ok(toolValidators.get(call.name)!(args), `seed ${seed}: ${call.name} ${JSON.stringify(args)}`);
    });
  }
  console.log(`# ${multi} of 24 replies made more than one call`);
});

test('random K3, tool_choice auto is free until a tools section opens; same request and seed give the same ids', async () => {
  const tok = model.tokenizer!;
  const mk = () => k3ReplyConstraint(tok, { thinking: true, tools: TOOLS, toolChoice: 'auto' })!;
  const free = await model.generate(prompt('Hi', true), { maxTokens: 30, temperature: 1, seed: 3, ignoreEos: false }).result;
  const lazy = await model.generate(prompt('Hi', true), { maxTokens: 30, temperature: 1, seed: 3, constraint: mk(), ignoreEos: false }).result;
  assert.deepEqual(lazy.ids, free.ids, 'nothing forbidden before a tools section');
  const opts = (seed: number) => ({ maxTokens: 100, temperature: 0.9, topP: 0.95, seed, ignoreEos: false });
  const c1 = () => k3ReplyConstraint(tok, { thinking: true, responseFormat: { type: 'json_object' } })!;
  const solo = (await model.generate(prompt('a', true), { ...opts(5), constraint: c1() }).result).ids;
  const together = await Promise.all([model.generate(prompt('a', true), { ...opts(5), constraint: c1() }).result, model.generate(prompt('b', false), { ...opts(6) }).result]);
  assert.deepEqual(together[0].ids, solo);
  assert.equal(k3ReplyConstraint(tok, { thinking: true }), null);
  assert.equal(k3ReplyConstraint(tok, { thinking: true, tools: TOOLS, toolChoice: 'none' }), null);
});

// ------------------------------------------------------------------------------------------
// The real vocabulary

test('real K3 vocabulary (163840 ids): masks agree with allows(), a JSON reply tokenized by the real tokenizer passes, cost measured', () => {
  const text = readFileSync(join(ROOT, '..', 'shared', 'realdata', 'k3-tokenizer', 'tiktoken.model'), 'utf8');
  const added: Record<string, { content: string; special: boolean }> = {};
  for (const [id, name] of [[163584, '[BOS]'], [163585, '[EOS]'], [163586, '<|end_of_msg|>'], [163587, '<|open|>'], [163588, '<|close|>'], [163589, '<|sep|>']] as const) added[id] = { content: name, special: true };
  const tok = new Tokenizer(text, { added_tokens_decoder: added });
  assert.equal(tok.vocabSize, 163840);
  let t = performance.now();
  const vocab = vocabIndex(tok);
  const indexMs = performance.now() - t;
  const c = k3ReplyConstraint(tok, { thinking: true, responseFormat: { type: 'json_schema', json_schema: { schema: PERSON } } })! as unknown as GrammarConstraint;
  const g: TokenGrammar = c.g;
  const reply = '<|close|>think<|sep|><|open|>response<|sep|>{"name": "Ann Lee", "age": 30, "role": "admin", "address": {"city": "Oslo", "geo": [59.91, 10.75]}, "tags": ["a b", "c"]}<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>';
  const ids = [...tok.encodeOrdinary('I think so.'), ...tok.encode(reply)];
  const times: number[] = [];
  let left = 400;
  const logits = new Float32Array(163840);
  for (const id of ids) {
    t = performance.now();
    logits.fill(0);
    c.mask(logits, left);
    times.push(performance.now() - t);
    assert.notEqual(logits[id], -Infinity, `id ${id} (${JSON.stringify(tok.decode([id]))}) masked`);
    // the mask and allows() agree on a sample of ids
    for (let k = 0; k < 163840; k += 997) assert.equal(logits[k] !== -Infinity, c.allows(k, left), `id ${k}`);
    c.accept(id);
    left--;
  }
  const t0 = g.table(g.matcher.start);
  assert.equal(t0.get(163586), NEVER);
  assert.notEqual(t0.get(ids[0]!), NEVER);
  const sorted = [...times].sort((a, b) => a - b);
  console.log(`# real vocabulary: index ${indexMs.toFixed(0)} ms; mask per step median ${sorted[sorted.length >> 1]!.toFixed(2)} ms, max ${sorted.at(-1)!.toFixed(1)} ms over ${ids.length} steps (${g.stats.built} tables built, ${g.stats.hits} cache hits, ${g.matcher.size} states)`);
  void vocab;
});
