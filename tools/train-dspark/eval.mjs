// Acceptance of the demo drafter, measured with the engine (dist/src/api loadModel, greedy): on
// prompts of the demo's held-out pairs (sums asked in chat, add-tool calls, answers from the tool's
// result; never trained on), each generated with the drafter (the full block every sweep, the
// engine's back-off included) and without (--spec 0): the ids must be the same, and the report's
// sweeps give tokens emitted per sweep (drafts accepted + 1) and the acceptance per draft position.
//
//   node tools/train-dspark/eval.mjs [--drafter models-shipped/demo-k3-dspark] [--pairs 20] [--threads 1] [--write]
//
// --write records the numbers (and the prompts the test runs) in the drafter's train.json.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { example, rng } from '../train-demo/conversations.mjs';
import { ROOT, engine, renderExample } from '../train-demo/make-data.mjs';

export const KINDS = ['chat', 'call', 'tool'];

/** Held-out prompts: for each of the first `pairs` held-out pairs, one conversation of each kind. */
export function heldOutPrompts(eng, tok, held, pairs, seed) {
  const r = rng(seed * 7919 + 3);
  const out = [];
  for (const [a, b] of held.slice(0, pairs)) {
    for (const kind of KINDS) {
      const p = eng.encodeK3Segments(tok, renderExample(eng, example(kind, r, a, b)).prompt);
      out.push({ kind, a, b, ids: p });
    }
  }
  return out;
}

/** Sweeps, drafted, accepted and per-position counts of one run's report steps. */
export function tally(steps, into) {
  for (const s of steps) {
    if (s.drafted === undefined) continue;
    into.sweeps++;
    into.emitted += s.emitted;
    for (let k = 0; k < s.drafted; k++) {
      into.draftedAt[k] = (into.draftedAt[k] ?? 0) + 1;
      if (k <= s.accepted) into.reachedAt[k] = (into.reachedAt[k] ?? 0) + 1;
      if (k < s.accepted) into.acceptedAt[k] = (into.acceptedAt[k] ?? 0) + 1;
    }
  }
  return into;
}

/** The test's prompts: per kind, the one at its kind's median tokens per sweep (representative, not
 *  the best), and the worst prompt of all (its sweeps reject drafts, so the test checks that path too). */
export function testPrompts(perPrompt) {
  const sorted = (xs) => [...xs].sort((x, y) => x.tokens_per_sweep - y.tokens_per_sweep);
  const medians = KINDS.map((k) => {
    const xs = sorted(perPrompt.filter((x) => x.kind === k));
    return xs[xs.length >> 1];
  });
  const worst = sorted(perPrompt)[0];
  return medians.includes(worst) ? medians : [...medians, worst];
}

async function main() {
  const { values } = parseArgs({
    options: {
      model: { type: 'string', default: path.join(ROOT, 'models-shipped', 'demo-k3-trained') },
      drafter: { type: 'string', default: path.join(ROOT, 'models-shipped', 'demo-k3-dspark') },
      pairs: { type: 'string', default: '20' },
      seed: { type: 'string', default: '3' },
      threads: { type: 'string', default: '1' },
      'max-tokens': { type: 'string', default: '128' },
      'spec-width': { type: 'string' }, // verify exactly N drafts every sweep (default: the engine's width model, timed)
      write: { type: 'boolean', default: false },
    },
  });
  const eng = await engine();
  const { loadModel } = await import(path.join(ROOT, 'dist', 'src', 'api', 'index.js'));
  const read = (f) => fs.readFileSync(path.join(values.model, f), 'utf8');
  const tok = new eng.Tokenizer(read('tiktoken.model'), read('tokenizer_config.json'));
  const held = JSON.parse(read('train.json')).held_out;
  const prompts = heldOutPrompts(eng, tok, held, Number(values.pairs), Number(values.seed));
  const model = await loadModel(values.model, { threads: Number(values.threads), ctx: 512 });
  const total = { sweeps: 0, emitted: 0, draftedAt: [], acceptedAt: [], reachedAt: [] };
  const byKind = {};
  const perPrompt = [];
  let mismatches = 0;
  const t0 = Date.now();
  for (const p of prompts) {
    const opts = { maxTokens: Number(values['max-tokens']), ignoreEos: false };
    const plain = await model.generate(p.ids, opts).result;
    const spec = await model.generate(p.ids, { ...opts, drafter: values.drafter, report: true, ...(values['spec-width'] ? { specWidth: Number(values['spec-width']) } : {}) }).result;
    const same = plain.ids.length === spec.ids.length && plain.ids.every((v, i) => v === spec.ids[i]);
    if (!same) mismatches++;
    const one = tally(spec.report.steps, { sweeps: 0, emitted: 0, draftedAt: [], acceptedAt: [], reachedAt: [] });
    tally(spec.report.steps, total);
    tally(spec.report.steps, (byKind[p.kind] ??= { sweeps: 0, emitted: 0, draftedAt: [], acceptedAt: [], reachedAt: [] }));
    perPrompt.push({ kind: p.kind, a: p.a, b: p.b, tokens: spec.ids.length, sweeps: one.sweeps, tokens_per_sweep: one.emitted / one.sweeps, same, ids: p.ids });
  }
  await model.close();
  const r3 = (x) => Math.round(x * 1000) / 1000;
  const acceptance = total.draftedAt.map((n, k) => r3((total.acceptedAt[k] ?? 0) / n));
  const conditional = total.draftedAt.map((_, k) => r3(total.reachedAt[k] ? (total.acceptedAt[k] ?? 0) / total.reachedAt[k] : 0));
  const result = {
    prompts: prompts.length,
    tokens_per_sweep: r3(total.emitted / total.sweeps),
    by_kind: Object.fromEntries(Object.entries(byKind).map(([k, v]) => [k, r3(v.emitted / v.sweeps)])),
    sweeps: total.sweeps,
    emitted: total.emitted,
    acceptance_by_position: acceptance,
    acceptance_given_previous: conditional,
    ids_equal_spec0: mismatches === 0,
    mismatches,
    seconds: Math.round((Date.now() - t0) / 1000),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  const sorted = [...perPrompt].sort((x, y) => x.tokens_per_sweep - y.tokens_per_sweep);
  process.stdout.write(`per prompt tokens/sweep: min ${r3(sorted[0].tokens_per_sweep)}, median ${r3(sorted[sorted.length >> 1].tokens_per_sweep)}, max ${r3(sorted[sorted.length - 1].tokens_per_sweep)}\n`);
  if (values.write) {
    const infoPath = path.join(values.drafter, 'train.json');
    const info = JSON.parse(fs.readFileSync(infoPath, 'utf8'));
    info[values['spec-width'] ? `eval_spec_width_${values['spec-width']}` : 'eval'] = {
      command: `node tools/train-dspark/eval.mjs ${process.argv.slice(2).join(' ')}`.trim(),
      engine: values['spec-width'] ? `dist/src/api loadModel, greedy, --drafter, --spec-width ${values['spec-width']} (deterministic)` : 'dist/src/api loadModel, greedy, --drafter with the width model (src/generate/spec-width.ts; timed, so it varies with the machine)',
      held_out: `the first ${values.pairs} held-out pairs of ${path.relative(ROOT, values.model)}/train.json, one chat, call and tool prompt each (seed ${values.seed})`,
      threads: Number(values.threads),
      ...result,
      per_prompt: perPrompt.map(({ ids, ...x }) => ({ ...x, prompt_tokens: ids.length, tokens_per_sweep: r3(x.tokens_per_sweep) })),
      // the test's prompts come from the run at the engine's default width; it checks them at --spec-width 7, whose counts are deterministic
      ...(values['spec-width'] ? {} : { test_prompts: testPrompts(perPrompt).map((x) => ({ kind: x.kind, a: x.a, b: x.b, ids: x.ids, tokens_per_sweep: r3(x.tokens_per_sweep) })) }),
    };
    fs.writeFileSync(infoPath, JSON.stringify(info, null, 1) + '\n');
  }
  if (mismatches) process.exitCode = 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) await main();
