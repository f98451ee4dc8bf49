// Held-out accuracy of the demo model, measured with the engine (dist/src/api loadModel, greedy):
// for every held-out pair of train.json, the raw sum, a sum asked in chat, the add-tool call and the
// answer from the tool's result (conversations drawn as in training, from another seed), each right
// only when the whole reply is the expected ids; and random other conversations, which must end
// their turn (<|close|>message<|sep|><|end_of_msg|>) within 24 tokens.
//
//   node tools/train-demo/eval.mjs [--model models-shipped/demo-k3-trained] [--other 400] [--pairs N] [--write]
//
// --write records the accuracies in the model's train.json (held_out_accuracy = the raw sums', what
// `k3 demo` prints).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { example, rawAnswer, rawPrompt, rng } from './conversations.mjs';
import { ROOT, engine, renderExample } from './make-data.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: path.join(ROOT, 'models-shipped', 'demo-k3-trained') },
    seed: { type: 'string', default: '2' },
    other: { type: 'string', default: '400' },
    pairs: { type: 'string' }, // only the first N held-out pairs (a quick look)
    'max-len': { type: 'string', default: '320' },
    threads: { type: 'string', default: '1' },
    write: { type: 'boolean', default: false },
  },
});
const eng = await engine();
const { loadModel } = await import(path.join(ROOT, 'dist', 'src', 'api', 'index.js'));
const infoPath = path.join(values.model, 'train.json');
const info = JSON.parse(fs.readFileSync(infoPath, 'utf8'));
const model = await loadModel(values.model, { threads: Number(values.threads), ctx: 512 });
const tok = new eng.Tokenizer(fs.readFileSync(path.join(values.model, 'tiktoken.model'), 'utf8'), fs.readFileSync(path.join(values.model, 'tokenizer_config.json'), 'utf8'));
const eos = tok.specialId('<|end_of_msg|>');
const maxLen = Number(values['max-len']);
const r = rng(Number(values.seed) * 7919 + 2);

/** A conversation of `kind` for a+b, redrawn until it fits the training length cap. */
function draw(kind, a, b) {
  for (;;) {
    const ex = example(kind, r, a, b);
    const { prompt, target } = renderExample(eng, ex);
    const p = eng.encodeK3Segments(tok, prompt);
    const t = eng.encodeK3Segments(tok, target);
    if (p.length + t.length <= maxLen) return { p, t, ex, sum: a + b };
  }
}

async function run(cases, maxTokens) {
  const out = [];
  for (let i = 0; i < cases.length; i += 16) {
    const part = cases.slice(i, i + 16);
    out.push(...(await Promise.all(part.map((c) => model.generate(c.p, { maxTokens: maxTokens(c), ignoreEos: false }).result))));
  }
  return out.map((x) => x.ids);
}

const same = (x, y) => x.length === y.length && x.every((v, i) => v === y[i]);
const pct = (n, d) => Math.round((10000 * n) / d) / 100;
const acc = {};
const held = values.pairs ? info.held_out.slice(0, Number(values.pairs)) : info.held_out;
const t0 = Date.now();

const raw = held.map(([a, b]) => ({ p: tok.encode(rawPrompt(a, b)), t: [...tok.encode(rawAnswer(a, b)), eos] }));
const rawGot = await run(raw, (c) => c.t.length + 2);
acc.raw = pct(raw.filter((c, i) => same(rawGot[i], c.t)).length, raw.length);

const examples = {};
for (const kind of ['chat', 'call', 'tool']) {
  const cases = held.map(([a, b]) => draw(kind, a, b));
  const got = await run(cases, (c) => c.t.length + 4);
  const ok = cases.map((c, i) => same(got[i], c.t));
  acc[kind] = pct(ok.filter(Boolean).length, cases.length);
  if (kind === 'tool') {
    const differs = cases.map((c, i) => [c, i]).filter(([c]) => c.ex.result !== c.sum);
    acc.tool_result_not_the_sum = pct(differs.filter(([, i]) => ok[i]).length, differs.length);
  }
  const bad = cases.findIndex((_, i) => !ok[i]);
  if (bad >= 0) examples[kind] = { want: tok.decode(cases[bad].t), got: tok.decode(got[bad]) };
}

const end = [tok.specialId('<|close|>'), ...tok.encode('message'), tok.specialId('<|sep|>'), eos];
const other = [];
while (other.length < Number(values.other)) other.push(draw('other', 0, 0));
const otherGot = await run(other, () => 24);
const ends = (ids) => ids.length >= end.length && same(ids.slice(-end.length), end);
acc.other_ends_turn = pct(otherGot.filter(ends).length, other.length);
acc.other_exact = pct(other.filter((c, i) => same(otherGot[i], c.t)).length, other.length);
const badOther = other.findIndex((_, i) => !ends(otherGot[i]));
if (badOther >= 0) examples.other = { got: tok.decode(otherGot[badOther]) };
await model.close();

const seconds = Math.round((Date.now() - t0) / 1000);
process.stdout.write(`${JSON.stringify(acc)}\n${held.length} held-out pairs, ${other.length} other conversations, ${seconds} s\n`);
for (const [k, v] of Object.entries(examples)) process.stdout.write(`first miss (${k}): ${JSON.stringify(v)}\n`);
if (values.write) {
  info.held_out_accuracy = acc.raw;
  info.accuracy = acc;
  info.eval = { command: `node tools/train-demo/eval.mjs ${process.argv.slice(2).join(' ')}`.trim(), seed: Number(values.seed), engine: 'dist/src/api loadModel, greedy', other_conversations: other.length, max_len: maxLen };
  fs.writeFileSync(infoPath, JSON.stringify(info, null, 1) + '\n');
}
