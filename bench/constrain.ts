// Constrained decoding's cost per decode step (issue: structured output): the same prompt decoded
// without and with a constraint (response_format json_schema, thinking off, so every step is
// inside the JSON document), greedy, untruncated temperature sampling and top-p sampling (which
// builds the whole mask every step). A K3 with the real 163840-id vocabulary: k3-medium's sizes
// with that vocabulary (synthesized into models/bench/k3-medium-vocab163840 when missing, about
// 2.6 GB), the real tiktoken.model for the tokenizer. Reports seconds per token of each run, the
// constrained / unconstrained ratio, and the constraint's own time per token (timed around its
// calls, so the forward's noise does not hide it; the first request with a schema apart), and
// sampling alone on one logits vector with and without the constraint (what it adds to a step
// once the forward is done), with the CPU model.
//
//   npm run build && node dist/bench/constrain.js [--dir DIR] [--gen 32] [--threads 2] [--json]
//
// Benchmarks are not tests: nothing here gates CI.

import * as os from 'node:os';
import * as path from 'node:path';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { loadModel } from '../src/api/index.js';
import { k3ReplyConstraint, sampleConstrained, type GrammarConstraint, type TokenConstraint } from '../src/generate/constrain/index.js';
import { Sampler, type SamplingOptions } from '../src/generate/sampling.js';
import { synthCheckpoint } from '../src/synth/synth.js';
import { Tokenizer } from '../src/tokenizer/index.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 40 },
    age: { type: 'integer' },
    role: { enum: ['admin', 'user', 'guest'] },
    tags: { type: 'array', items: { type: 'string' }, maxItems: 4 },
    address: { type: 'object', properties: { city: { type: 'string' }, geo: { type: 'array', items: { type: 'number' } } }, required: ['city'] },
  },
  required: ['name', 'age', 'role', 'address'],
};

/** The real K3 vocabulary with its control tokens (the shared folder has no tokenizer_config.json). */
function realTokenizer(): Tokenizer {
  const text = readFileSync(path.join(ROOT, '..', 'shared', 'realdata', 'k3-tokenizer', 'tiktoken.model'), 'utf8');
  const names: Array<[number, string]> = [[163584, '[BOS]'], [163585, '[EOS]'], [163586, '<|end_of_msg|>'], [163587, '<|open|>'], [163588, '<|close|>'], [163589, '<|sep|>']];
  return new Tokenizer(text, { added_tokens_decoder: Object.fromEntries(names.map(([id, content]) => [id, { content, special: true }])) });
}

/** A constraint that adds the time spent in it to `spent.ms`. */
function timed(c: TokenConstraint, spent: { ms: number }): TokenConstraint {
  const time = <T>(f: () => T): T => {
    const t = performance.now();
    try {
      return f();
    } finally {
      spent.ms += performance.now() - t;
    }
  };
  return {
    minTokens: c.minTokens,
    stopIds: c.stopIds,
    allows: (id, left) => time(() => c.allows(id, left)),
    mask: (l, left) => time(() => c.mask(l, left)),
    accept: (id) => time(() => c.accept(id)),
    ...(c.allowed ? { allowed: (left: number) => time(() => c.allowed!(left)) } : {}),
    ...(c.best ? { best: (l: Float32Array, left: number) => time(() => c.best!(l, left)) } : {}),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      dir: { type: 'string', default: path.join(ROOT, 'models', 'bench', 'k3-medium-vocab163840') },
      gen: { type: 'string', default: '32' },
      threads: { type: 'string', default: '2' },
      json: { type: 'boolean', default: false },
    },
  });
  const log = (s: string): void => void (values.json ? process.stderr : process.stdout).write(s + '\n');
  const gen = Number(values.gen);
  const dir = values.dir!;
  log(`checkpoint ${dir} (k3-medium sizes, vocabulary 163840) …`);
  await synthCheckpoint({ arch: 'k3', preset: 'k3-medium', vocab: 163840, out: dir });
  const tok = realTokenizer();
  const model = await loadModel(dir, { threads: Number(values.threads), ctx: 1024, parallel: 1 });
  const prompt = tok.encode('<|open|>message role="user"<|sep|>Describe a person as JSON.<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>response<|sep|>');
  const make = () => k3ReplyConstraint(tok, { thinking: false, responseFormat: { type: 'json_schema', json_schema: { schema: SCHEMA } }, vocabSize: model.vocabSize })!;
  const t = performance.now();
  make().mask(new Float32Array(model.vocabSize), 1000);
  log(`vocabulary index and first mask: ${(performance.now() - t).toFixed(0)} ms`);
  const maxTokens = Math.max(gen, make().minTokens);
  const chains: Array<[string, SamplingOptions]> = [['greedy', { temperature: 0 }], ['temperature 1', { temperature: 1, seed: 7 }], ['top-p 0.95, t 0.8', { temperature: 0.8, topP: 0.95, seed: 7 }]];
  const rows: Array<Record<string, unknown>> = [];
  // one warm-up run so the first measured one does not pay for page faults
  await model.generate(prompt, { maxTokens: 4, ignoreEos: true }).result;
  for (const [name, sampling] of chains) {
    const per = async (c?: TokenConstraint): Promise<{ s: number; n: number }> => {
      const r = await model.generate(prompt, { ...sampling, maxTokens, constraint: c, ignoreEos: c === undefined }).result;
      const n = r.ids.length;
      return { s: r.timings.decodeSeconds / Math.max(1, n - 1), n };
    };
    const plain = await per();
    // a first request with this schema pays for compiling it and for its first masks; the
    // grammar is kept for the next ones (k3.ts), which is what a server sees in steady state
    const first = { ms: 0 };
    await per(timed(make(), first));
    const spent = { ms: 0 };
    const c = make();
    const built = (c as unknown as GrammarConstraint).g.stats.built;
    const con = await per(timed(c, spent));
    const tables = (c as unknown as GrammarConstraint).g.stats.built - built;
    const row = {
      sampling: name,
      tokens: con.n,
      plain_s_per_token: +plain.s.toFixed(4),
      constrained_s_per_token: +con.s.toFixed(4),
      ratio: +(con.s / plain.s).toFixed(3),
      constraint_ms_per_token: +(spent.ms / con.n).toFixed(3),
      tables_built: tables,
      first_request_constraint_ms_per_token: +(first.ms / con.n).toFixed(3),
      constraint_share: +(spent.ms / 1000 / con.n / plain.s).toFixed(4),
    };
    rows.push(row);
    log(`${name.padEnd(18)} plain ${row.plain_s_per_token} s/token, constrained ${row.constrained_s_per_token} s/token (x${row.ratio}); the constraint itself ${row.constraint_ms_per_token} ms/token = ${(row.constraint_share * 100).toFixed(2)}% of a step (${row.tables_built} masks built; first request with the schema: ${row.first_request_constraint_ms_per_token} ms/token)`);
  }
  // Sampling alone on one real logits vector, step by step along a constrained reply: what a
  // constraint adds to a step once the forward is done (its calls, the copies, the redraws).
  const m = model.model;
  const st = m.newState();
  const logits = await m.forward(st, prompt, 'last');
  m.release(st);
  const V = model.vocabSize;
  for (const [name, sampling] of chains) {
    const plainSampler = new Sampler(sampling);
    let t0 = performance.now();
    const steps = 64;
    for (let i = 0; i < steps; i++) plainSampler.sample(logits, [], V);
    const plainMs = (performance.now() - t0) / steps;
    const sampler = new Sampler(sampling);
    let n = 0;
    t0 = performance.now();
    for (let r = 0; n < steps; r++) {
      const c = make();
      for (let left = maxTokens; left > 0; left--) {
        const id = sampleConstrained(sampler, logits, [], V, c, left);
        c.accept(id);
        n++;
        if (c.stopIds.includes(id)) break;
      }
    }
    const conMs = (performance.now() - t0) / n;
    const row = rows.find((x) => x.sampling === name)!;
    Object.assign(row, { sampling_ms_plain: +plainMs.toFixed(3), sampling_ms_constrained: +conMs.toFixed(3), step_overhead: +((conMs - plainMs) / 1000 / (row.plain_s_per_token as number)).toFixed(4) });
    log(`${name.padEnd(18)} sampling alone: ${plainMs.toFixed(2)} ms plain, ${conMs.toFixed(2)} ms constrained (warm, ${n} steps): +${(((conMs - plainMs) / 1000 / (row.plain_s_per_token as number)) * 100).toFixed(2)}% of a step`);
  }
  await model.close();
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  log(`CPU: ${cpu}, ${values.threads} threads`);
  if (values.json) process.stdout.write(JSON.stringify({ cpu, threads: Number(values.threads), rows }, null, 1) + '\n');
}

await main();
