// Sampling: determinism by seed, each step of the chain on hand-made logits, stop strings across
// token boundaries, and `k3 run` with the sampling flags end to end.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Rng, Sampler, applyPenalties, candidates, deriveSeed, minP, resolveSampling, tokenCounts, topK, topP, type SamplingOptions } from '../../src/generate/sampling.js';
import { TextStopper } from '../../src/generate/stop.js';
import { argmax } from '../../src/generate/greedy.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { Tokenizer, demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { UserError } from '../../src/util/errors.js';
import { xorshift } from '../helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));

/** Logits whose softmax is exactly `probs` (up to rounding). */
const fromProbs = (probs: number[]): Float32Array => Float32Array.from(probs.map((p) => Math.log(p)));

/** Draw n ids with a fresh sampler; frequency of each id. */
function frequencies(opts: SamplingOptions, logits: Float32Array, n: number, history: number[] = []): number[] {
  const s = new Sampler(opts);
  const f = new Array<number>(logits.length).fill(0);
  for (let i = 0; i < n; i++) f[s.sample(logits, history)]!++;
  return f.map((c) => c / n);
}

test('Rng: same seed same stream, different seed different stream, uniform in [0,1)', () => {
  const a = new Rng(42);
  const b = new Rng(42);
  const c = new Rng(43);
  const xa = Array.from({ length: 1000 }, () => a.nextFloat());
  const xb = Array.from({ length: 1000 }, () => b.nextFloat());
  const xc = Array.from({ length: 1000 }, () => c.nextFloat());
  assert.deepEqual(xa, xb);
  assert.notDeepEqual(xa, xc);
  assert.ok(xa.every((x) => x >= 0 && x < 1));
  const mean = xa.reduce((s, x) => s + x, 0) / xa.length;
  assert.ok(Math.abs(mean - 0.5) < 0.03, `mean ${mean}`);
  assert.notEqual(deriveSeed(1, 10), deriveSeed(1, 11));
  assert.notEqual(deriveSeed(1, 10), deriveSeed(2, 10));
});

test('same seed and options: identical draws; another seed: different draws', () => {
  const logits = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i * 1.7) * 3);
  const opts: SamplingOptions = { temperature: 0.9, topK: 40, topP: 0.95, minP: 0.02, repetitionPenalty: 1.1, presencePenalty: 0.2, frequencyPenalty: 0.1, seed: 1234 };
  const run = (o: SamplingOptions): number[] => {
    const s = new Sampler(o);
    const hist: number[] = [1, 2, 3];
    for (let i = 0; i < 200; i++) hist.push(s.sample(logits, hist));
    return hist;
  };
  assert.deepEqual(run(opts), run(opts));
  assert.notDeepEqual(run(opts), run({ ...opts, seed: 1235 }));
});

test('temperature 0 is greedy: argmax, first maximum wins (as greedy.ts)', () => {
  const l = Float32Array.from([0.5, 3, -1, 3, 2]);
  const s = new Sampler({ temperature: 0, topK: 2, topP: 0.1, seed: 9 });
  assert.equal(s.greedy, true);
  assert.equal(s.sample(l), 1);
  assert.equal(s.sample(l), argmax(l));
  assert.deepEqual(s.distribution(l), { ids: [1], probs: [1] });
  // Default options are greedy too.
  const rnd = Float32Array.from({ length: 300 }, (_, i) => Math.cos(i * 0.37) * 5);
  assert.equal(new Sampler().sample(rnd), argmax(rnd));
});

test('top-k keeps the k most likely ids', () => {
  const l = Float32Array.from([1, 5, 2, 4, 3]);
  const d = new Sampler({ temperature: 1, topK: 2 }).distribution(l);
  assert.deepEqual(d.ids, [1, 3]);
  assert.ok(Math.abs(d.probs[0]! - 1 / (1 + Math.exp(-1))) < 1e-12);
  const f = frequencies({ temperature: 1, topK: 2, seed: 5 }, l, 20000);
  assert.equal(f[0]! + f[2]! + f[4]!, 0);
  assert.ok(Math.abs(f[1]! - 0.731) < 0.015, `p(1) ${f[1]}`);
  // Without top-k every id can come out.
  const all = frequencies({ temperature: 1, seed: 5 }, l, 20000);
  assert.ok(all.every((x) => x > 0));
  // The step alone: k >= n or 0 is a no-op; ties by id.
  const c = candidates([2, 2, 1]);
  topK(c, 1);
  assert.deepEqual(Array.from(c.ids.subarray(0, c.n)), [0]);
  const c0 = candidates([2, 2, 1]);
  topK(c0, 0);
  assert.equal(c0.n, 3);
});

test('top-p keeps the nucleus: the smallest prefix reaching p', () => {
  const l = fromProbs([0.05, 0.5, 0.15, 0.3]);
  const ids = (p: number): number[] => new Sampler({ temperature: 1, topP: p }).distribution(l).ids;
  assert.deepEqual(ids(0.45), [1]);
  assert.deepEqual(ids(0.75), [1, 3]);
  assert.deepEqual(ids(0.9), [1, 3, 2]);
  assert.deepEqual(ids(1), [0, 1, 2, 3]);
  const d = new Sampler({ temperature: 1, topP: 0.75 }).distribution(l);
  assert.ok(Math.abs(d.probs[0]! - 0.5 / 0.8) < 1e-6);
  const f = frequencies({ temperature: 1, topP: 0.75, seed: 11 }, l, 20000);
  assert.equal(f[0]! + f[2]!, 0);
  assert.ok(Math.abs(f[1]! - 0.625) < 0.015, `p(1) ${f[1]}`);
  const c = candidates(l);
  topP(c, 0.9);
  assert.equal(c.n, 3);
});

test('min-p drops ids below p times the top probability', () => {
  const l = fromProbs([0.05, 0.5, 0.15, 0.3]);
  const ids = (p: number): number[] => new Sampler({ temperature: 1, minP: p }).distribution(l).ids.sort();
  assert.deepEqual(ids(0.25), [1, 2, 3]); // 0.15 >= 0.125 kept, 0.05 dropped
  assert.deepEqual(ids(0.5), [1, 3]); // 0.3 >= 0.25, 0.15 < 0.25
  assert.deepEqual(ids(0.7), [1]); // 0.3 < 0.35
  assert.deepEqual(ids(0), [0, 1, 2, 3]);
  const f = frequencies({ temperature: 1, minP: 0.5, seed: 3 }, l, 20000);
  assert.equal(f[0]! + f[2]!, 0);
  assert.ok(Math.abs(f[3]! - 0.375) < 0.015, `p(3) ${f[3]}`);
  const c = candidates(l);
  minP(c, 0.25);
  assert.equal(c.n, 3);
});

test('temperature sharpens (< 1) and flattens (> 1) the distribution', () => {
  const l = Float32Array.from([0, 1]);
  const expect = (t: number): number => 1 / (1 + Math.exp(-1 / t));
  for (const t of [0.5, 1, 2]) {
    const d = new Sampler({ temperature: t }).distribution(l);
    const p1 = d.probs[d.ids.indexOf(1)]!;
    assert.ok(Math.abs(p1 - expect(t)) < 1e-12, `T=${t}: ${p1}`);
    const f = frequencies({ temperature: t, seed: 77 }, l, 20000);
    assert.ok(Math.abs(f[1]! - expect(t)) < 0.015, `T=${t}: frequency ${f[1]} vs ${expect(t)}`);
  }
  const f05 = frequencies({ temperature: 0.5, seed: 1 }, l, 20000)[1]!;
  const f2 = frequencies({ temperature: 2, seed: 1 }, l, 20000)[1]!;
  assert.ok(f05 > 0.85 && f2 < 0.65 && f2 > 0.55, `${f05} ${f2}`);
});

test('temperature applies after top-p / min-p (llama.cpp order)', () => {
  // With T = 10 first, top-p 0.75 would keep everything; applied before, it keeps 2 ids.
  const l = fromProbs([0.05, 0.5, 0.15, 0.3]);
  assert.deepEqual(new Sampler({ temperature: 10, topP: 0.75 }).distribution(l).ids, [1, 3]);
  assert.deepEqual(new Sampler({ temperature: 10, minP: 0.5 }).distribution(l).ids.sort(), [1, 3]);
});

test('repetition penalty divides positive and multiplies negative logits of seen ids', () => {
  const o = { repetitionPenalty: 2, presencePenalty: 0, frequencyPenalty: 0 };
  const l = Float64Array.from([2, -2, 1, 0]);
  applyPenalties(l, tokenCounts([0, 1, 1, 3]), o);
  assert.deepEqual(Array.from(l), [1, -4, 1, 0]);
  // It changes the greedy choice: 0 was the argmax, after the penalty 2 is.
  const logits = Float32Array.from([2, -2, 1.5]);
  assert.equal(new Sampler().sample(logits, [0]), 0);
  assert.equal(new Sampler({ repetitionPenalty: 2 }).sample(logits, [0]), 2);
  // And the sampled distribution.
  const before = frequencies({ temperature: 1, seed: 8 }, logits, 20000)[0]!;
  const after = frequencies({ temperature: 1, seed: 8, repetitionPenalty: 2 }, logits, 20000, [0])[0]!;
  assert.ok(after < before - 0.2, `${before} -> ${after}`);
});

test('presence penalty subtracts a constant, frequency penalty count times a value', () => {
  const l = Float64Array.from([1, 1, 1]);
  applyPenalties(l, tokenCounts([0, 0, 0, 1]), { repetitionPenalty: 1, presencePenalty: 0.5, frequencyPenalty: 0 });
  assert.deepEqual(Array.from(l), [0.5, 0.5, 1]);
  const m = Float64Array.from([1, 1, 1]);
  applyPenalties(m, tokenCounts([0, 0, 0, 1]), { repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0.25 });
  assert.deepEqual(Array.from(m), [0.25, 0.75, 1]);
  const both = Float64Array.from([1, 1, 1]);
  applyPenalties(both, tokenCounts([0, 0, 0, 1]), { repetitionPenalty: 2, presencePenalty: 0.5, frequencyPenalty: 0.25 });
  assert.deepEqual(Array.from(both), [1 / 2 - 0.75 - 0.5, 1 / 2 - 0.25 - 0.5, 1]);
  // Distribution: seen ids lose probability exactly as the shifted logits say.
  const logits = Float32Array.from([0, 0]);
  const d = new Sampler({ temperature: 1, presencePenalty: 1 }).distribution(logits, [0]);
  assert.ok(Math.abs(d.probs[d.ids.indexOf(0)]! - 1 / (1 + Math.E)) < 1e-12);
  const g = new Sampler({ temperature: 1, frequencyPenalty: 0.5 }).distribution(logits, [0, 0, 0, 0]);
  assert.ok(Math.abs(g.probs[g.ids.indexOf(0)]! - 1 / (1 + Math.E ** 2)) < 1e-12);
  // Only the last N ids count with penaltyLastN.
  assert.deepEqual([...tokenCounts([5, 5, 6, 7], 2)].sort(), [[6, 1], [7, 1]]);
  const w = new Sampler({ temperature: 1, presencePenalty: 1, penaltyLastN: 1 }).distribution(logits, [0, 1]);
  assert.ok(Math.abs(w.probs[w.ids.indexOf(1)]! - 1 / (1 + Math.E)) < 1e-12);
});

test('bad sampling options are UserErrors naming the option', () => {
  assert.throws(() => resolveSampling({ temperature: -1 }), (e: unknown) => e instanceof UserError && /temperature/.test(e.message));
  assert.throws(() => new Sampler({ topP: 0 }), (e: unknown) => e instanceof UserError && /top-p/.test(e.message));
  assert.throws(() => new Sampler({ minP: 2 }), (e: unknown) => e instanceof UserError && /min-p/.test(e.message));
  assert.throws(() => new Sampler({ seed: 1.5 }), (e: unknown) => e instanceof UserError && /seed/.test(e.message));
});

// ---------------------------------------------------------------------------------------------

const files = demoTokenizerFiles();
const tok = new Tokenizer(files['tiktoken.model'], files['tokenizer_config.json']);
/** One id per character (single-byte tokens), so every string spans token boundaries. */
const byteIds = (s: string): number[] => [...Buffer.from(s, 'utf8')];

function drive(st: TextStopper, ids: number[]): { pieces: string[]; stopAt: number } {
  const pieces: string[] = [];
  for (let i = 0; i < ids.length; i++) {
    const r = st.push(ids[i]!);
    pieces.push(r.text);
    if (r.stop) return { pieces, stopAt: i };
  }
  pieces.push(st.finish());
  return { pieces, stopAt: -1 };
}

test('stop strings are matched across token boundaries and never printed', () => {
  const st = new TextStopper(tok, { stopStrings: ['STOP'] });
  const { pieces, stopAt } = drive(st, byteIds('abc STOx STOP tail'));
  assert.equal(st.reason, 'stop_string');
  assert.equal(st.text, 'abc STOx ');
  assert.equal(pieces.join(''), 'abc STOx ');
  assert.equal(stopAt, 'abc STOx STOP'.length - 1);
  // Output is held back only while it could be the start of the stop string.
  assert.equal(pieces[4], ''); // 'S' held
  assert.equal(pieces[6], ''); // 'STO' held
  assert.equal(pieces[7], 'STOx'); // released once it cannot match
  // Several stop strings: the first occurrence wins; multi-token merged ids work the same.
  const ids = tok.encode('The model reads the text one token at a time');
  assert.ok(ids.length < 'The model reads the text one token at a time'.length);
  const s2 = new TextStopper(tok, { stopStrings: ['one tok', 'reads t'] });
  drive(s2, ids);
  assert.equal(s2.text, 'The model ');
  // Multi-byte characters split over tokens: é is two single-byte tokens.
  const s3 = new TextStopper(tok, { stopStrings: ['é!'] });
  drive(s3, byteIds('café! more'));
  assert.equal(s3.text, 'caf');
});

test('stop ids, max tokens, and held-back text at the end', () => {
  const eos = tok.specialId('<|end_of_msg|>')!;
  const st = new TextStopper(tok, { stopIds: [eos] });
  const { pieces } = drive(st, [...byteIds('hi'), eos, ...byteIds('never')]);
  assert.equal(st.reason, 'stop_token');
  assert.equal(pieces.join(''), 'hi');
  assert.deepEqual(st.ids, [...byteIds('hi'), eos]);
  const m = new TextStopper(tok, { stopStrings: ['STOP'], maxTokens: 4 });
  const r = drive(m, byteIds('abSTxyz'));
  assert.equal(m.reason, 'max_tokens');
  assert.equal(r.pieces.join(''), 'abST'); // the held 'ST' comes out at the end
  const i = new TextStopper(tok, { stopStrings: ['STOP'] });
  assert.equal(byteIds('xST').map((id) => i.push(id).text).join(''), 'x');
  assert.equal(i.finish('interrupted'), 'ST');
  assert.equal(i.text, 'xST');
  assert.equal(i.reason, 'interrupted');
  // Without stop rules the text equals decode().
  const ids = tok.encode('Here are some numbers: 1, 2, 3, 10, 20, 100, 2025.');
  const plain = new TextStopper(tok);
  assert.equal(drive(plain, ids).pieces.join(''), tok.decode(ids));
});

test('k3 run: same seed and flags give byte-identical output; text and stop_reason in --json', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'k3-sampling-'));
  try {
    const out = join(dir, 'demo');
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out, extraFiles: demoTokenizerFiles() });
    const run = (...extra: string[]): { ids: number[]; text: string; reason: string; stdout: string } => {
      const r = spawnSync(process.execPath, [MAIN, 'run', out, '--prompt', 'Kimi is a family of models', '--max-tokens', '24', '--json', ...extra], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      const j = JSON.parse(r.stdout) as { generated_ids: number[]; text: string; stop_reason: string };
      return { ids: j.generated_ids, text: j.text, reason: j.stop_reason, stdout: r.stdout };
    };
    const flags = ['--temperature', '1.3', '--top-k', '200', '--top-p', '0.97', '--min-p', '0.01', '--repeat-penalty', '1.1', '--seed', '31'];
    const a = run(...flags);
    const b = run(...flags);
    assert.deepEqual(a.ids, b.ids);
    assert.equal(a.text, b.text);
    assert.equal(Buffer.compare(Buffer.from(a.text), Buffer.from(b.text)), 0);
    assert.equal(a.reason, 'max_tokens');
    assert.equal(a.ids.length, 24);
    const c = run(...flags.slice(0, -1), '32');
    assert.notDeepEqual(c.ids, a.ids);
    const g = run();
    assert.equal(typeof g.text, 'string');
    // Printed text (not --json) is the same text.
    const p = spawnSync(process.execPath, [MAIN, 'run', out, '--prompt', 'Kimi is a family of models', '--max-tokens', '24', ...flags], { encoding: 'utf8' });
    assert.equal(p.status, 0, p.stderr);
    assert.equal(p.stdout, a.text + '\n');
    // Bad flag values: one line, exit 2.
    const bad = spawnSync(process.execPath, [MAIN, 'run', out, '--prompt', 'x', '--top-p', '1.5'], { encoding: 'utf8' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /top-p/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('logit bias: added after the penalties, before the chain; checked; ids past the vocabulary ignored', () => {
  const logits = [1, 3, 2, 0];
  assert.equal(new Sampler({ logitBias: new Map([[1, -100]]) }).sample(logits), 2);
  assert.equal(new Sampler({ logitBias: new Map([[3, 3.5]]) }).sample(logits), 3);
  assert.equal(new Sampler({ logitBias: new Map([[9, 100]]) }).sample(logits), 1);
  assert.ok(new Sampler({ temperature: 1, logitBias: new Map([[0, -100]]) }).distribution(logits).probs[0]! < 1e-40, 'id 0 all but banned');
  assert.throws(() => new Sampler({ logitBias: new Map([[-1, 1]]) }), /logit bias ids/);
  assert.throws(() => new Sampler({ logitBias: new Map([[0, NaN]]) }), /finite/);
});

test('greedy without penalties or bias reads the argmax off the logits: the id the full chain picks', () => {
  const rnd = xorshift(7);
  const plain = new Sampler({ temperature: 0 });
  // a bias of 0 on one id keeps the sampler off the shortcut, through the whole chain, same numbers
  const chain = new Sampler({ temperature: 0, logitBias: new Map([[0, 0]]) });
  for (let k = 0; k < 200; k++) {
    const V = 1 + (k % 37);
    const l = Float32Array.from({ length: V }, () => Math.floor(rnd() * 5) - 2); // many ties
    if (k % 5 === 0) l[Math.floor(rnd() * V)] = NaN;
    if (k % 7 === 0) l.fill(-Infinity);
    if (k % 11 === 0) l.fill(NaN);
    assert.equal(plain.sample(l, []), chain.sample(l, []), `case ${k}: ${Array.from(l).join(',')}`);
  }
});
