// The suffix-automaton drafter: its proposals are those of a brute-force longest-match search on
// random sequences (built at once and token by token), its confidence rule drafts nothing on weak
// matches, it drafts at least as well as the n-gram lookup on repeated tool-call JSON, and with it
// `--spec 4` emits the ids of greedy decoding on the golden K3 and the shipped demo model.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';
import { NgramDrafter, type Drafter } from '../../src/generate/draft.js';
import { SuffixDrafter, suffixDraftReference } from '../../src/generate/suffix-draft.js';
import { speculative } from '../../src/generate/spec.js';
import { RunRecorder } from '../../src/generate/report.js';
import { TRAINED_DEMO_DIR } from '../../src/cli/demo-sums.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { ChatSession } from '../../src/generate/session.js';

/** Deterministic xorshift32 in [0, n). */
function rng(seed: number): (n: number) => number {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % n;
  };
}

/** Random text with repeats: fresh tokens from a small alphabet, or a copy of an earlier stretch. */
function randomText(r: (n: number) => number, n: number, alphabet: number): number[] {
  const t: number[] = [];
  while (t.length < n) {
    if (t.length > 4 && r(3) === 0) {
      const from = r(t.length - 2), k = 2 + r(8);
      for (let i = 0; i < k && t.length < n; i++) t.push(t[from + i]!);
    } else t.push(r(alphabet));
  }
  return t;
}

test('suffix drafter == brute-force longest match on random sequences, fed at once and token by token', () => {
  const r = rng(46);
  let nonEmpty = 0;
  for (let trial = 0; trial < 60; trial++) {
    const alphabet = [2, 3, 5, 40][trial % 4]!;
    const text = randomText(r, 20 + r(120), alphabet);
    for (const [minMatch, minShare] of [[1, 0.01], [2, 0.5], [3, 0.75], [1, 1]] as const) {
      const incremental = new SuffixDrafter(minMatch, minShare);
      for (let L = 1; L <= text.length; L++) {
        const ctx = text.slice(0, L);
        const want = suffixDraftReference(ctx, 6, minMatch, minShare);
        assert.deepEqual(incremental.draft(ctx, 6), want, `trial ${trial}, L ${L}, minMatch ${minMatch}, minShare ${minShare} (incremental)`);
        if (L % 17 === 0) assert.deepEqual(new SuffixDrafter(minMatch, minShare).draft(ctx, 6), want, `trial ${trial}, L ${L} (fresh)`);
        if (want.length) nonEmpty++;
      }
      assert.equal(incremental.length, text.length);
    }
  }
  assert.ok(nonEmpty > 1000, `only ${nonEmpty} non-empty proposals: the check saw too few drafts`);
});

test('suffix drafter: a context that does not extend the indexed text rebuilds; bytes grow linearly', () => {
  const d = new SuffixDrafter();
  const a = [1, 2, 3, 4, 1, 2, 3];
  assert.deepEqual(d.draft(a, 4), [4, 1, 2, 3]);
  const b = [9, 8, 7, 9, 8];
  assert.deepEqual(d.draft(b, 4), [7, 9, 8]); // no trace of `a`
  assert.equal(d.length, b.length);
  const big = new SuffixDrafter();
  const text = randomText(rng(7), 20000, 50);
  big.draft(text.slice(0, 10000), 1);
  const half = big.bytes;
  big.draft(text, 1);
  // O(tokens): at most 2n states and 3n edges; the arrays grow by doubling
  assert.ok(big.bytes < 2.5 * half + 65536 && big.bytes < 20000 * 200, `${half} -> ${big.bytes} bytes`);
});

test('suffix drafter: a long run of one token indexes in linear time', () => {
  const run = new Array<number>(50000).fill(5);
  const t0 = performance.now();
  const d = new SuffixDrafter();
  // (the longest match ends one token before the text: its continuation is that one token)
  assert.deepEqual(d.draft(run, 4), [5]);
  const ms = performance.now() - t0;
  assert.ok(ms < 5000, `${ms} ms to index 50000 tokens`);
});

test('suffix drafter confidence: short matches and split continuations draft nothing', () => {
  // the only earlier match is 1 token long: below minMatch 2
  assert.deepEqual(new SuffixDrafter(2).draft([5, 6, 7, 5], 4), []);
  assert.deepEqual(new SuffixDrafter(1).draft([5, 6, 7, 5], 4), [6, 7, 5]);
  // the longest earlier match is [1, 2], after which came 3 twice and 4 once: 3 is drafted at
  // share 0.5 but not at 0.75
  const ctx = [7, 1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 4, 6, 1, 2];
  assert.deepEqual(new SuffixDrafter(2, 0.5).draft(ctx, 1), [3]);
  assert.deepEqual(new SuffixDrafter(2, 0.75).draft(ctx, 1), []);
  // the latest continuation wins a tie
  assert.deepEqual(new SuffixDrafter(2, 0.5).draft([7, 1, 2, 3, 8, 1, 2, 4, 6, 1, 2], 1), [4]);
  // nothing follows an unseen suffix; max 0 drafts nothing
  assert.deepEqual(new SuffixDrafter().draft([1, 2, 3, 4], 4), []);
  assert.deepEqual(new SuffixDrafter().draft([1, 2, 1, 2], 0), []);
  assert.throws(() => new SuffixDrafter(0), /minMatch/);
  assert.throws(() => new SuffixDrafter(2, 0), /minShare/);
});

/**
 * Greedy verification against known text (a model whose next token is `truth`'s): each sweep
 * drafts up to `spec` ids, accepts the matching prefix and emits one more id, as a sweep does.
 */
function simulate(drafter: Drafter, truth: readonly number[], promptLen: number, spec: number): { sweeps: number; drafted: number; accepted: number; emitted: number } {
  let L = promptLen + 1; // prefill emitted the first id
  let sweeps = 0, drafted = 0, accepted = 0;
  while (L < truth.length) {
    const room = Math.min(spec, truth.length - L - 1);
    const d = room > 0 ? drafter.draft(truth.slice(0, L), room) : [];
    let a = 0;
    while (a < d.length && d[a] === truth[L + a]) a++;
    sweeps++;
    drafted += d.length;
    accepted += a;
    L += a + 1;
  }
  return { sweeps, drafted, accepted, emitted: L - promptLen - 1 };
}

test('suffix drafter accepts at least as many tokens per sweep as the n-gram lookup on repeated tool calls', async () => {
  const tok = await loadTokenizer(TRAINED_DEMO_DIR);
  const r = rng(3);
  const tools = ['read_file', 'list_dir', 'grep', 'run_tests'];
  const calls: string[] = [];
  for (let i = 0; i < 24; i++) {
    const name = tools[r(tools.length)]!;
    calls.push(`{"type": "tool_call", "id": "call_${100 + i}", "function": {"name": "${name}", "arguments": {"path": "src/${['api', 'model', 'generate'][r(3)]}/file${r(9)}.ts", "limit": ${10 * (1 + r(5))}}}}\n` + `{"type": "tool_result", "call_id": "call_${100 + i}", "ok": ${r(4) ? 'true' : 'false'}}\n`);
  }
  const promptText = calls.slice(0, 8).join('');
  const prompt = tok.encode(promptText);
  const truth = tok.encode(calls.join(''));
  assert.deepEqual(truth.slice(0, prompt.length), prompt, 'the prompt tokenizes as a prefix of the whole');
  const lines: string[] = [];
  for (const spec of [4, 8]) {
    const ng = simulate(new NgramDrafter(), truth, prompt.length, spec);
    const sx = simulate(new SuffixDrafter(), truth, prompt.length, spec);
    assert.equal(ng.emitted, sx.emitted);
    const per = (s: typeof ng) => `${s.drafted} drafted, ${s.accepted} accepted, ${s.sweeps} sweeps, ${(s.accepted / s.sweeps).toFixed(2)} accepted and ${(s.emitted / s.sweeps).toFixed(2)} emitted per sweep`;
    lines.push(`spec ${spec}: n-gram ${per(ng)}; suffix ${per(sx)}`);
    assert.ok(sx.accepted / sx.sweeps >= ng.accepted / ng.sweeps, lines.at(-1));
  }
  console.log(lines.join('\n'));
});

for (const [name, dir] of [['golden k3', path.join(GOLDEN, 'k3')], ['demo-k3-trained', TRAINED_DEMO_DIR]] as const) {
  test(`${name}: --spec 4 with the suffix drafter emits the greedy ids, threads 1 and 2`, async () => {
    const tokens = path.join(dir, 'tokens.json');
    // an eager drafter (any 1-token match), so that drafts are made, taken and refused
    const base = fs.existsSync(tokens) ? (JSON.parse(fs.readFileSync(tokens, 'utf8')).short as number[]).slice(0, 6) : [...(await loadTokenizer(dir)).encode('12+34=46\n12+34=')];
    for (const threads of [1, 2]) {
      const model = await Model.load(dir, { ctx: 128, threads });
      try {
        // the prompt, its greedy continuation, the prompt again: the drafts replay the continuation
        const ids = [...base, ...(await greedy(model, model.newState(), base, 12, {})).generated, ...base];
        const ref = await greedy(model, model.newState(), ids, 16, {});
        const recorder = new RunRecorder(model.store);
        const r = await speculative(model, model.newState(), ids, 16, { spec: 4, drafter: new SuffixDrafter(1, 0.01), recorder });
        assert.deepEqual(r.generated, ref.generated, `threads ${threads}`);
        const sp = recorder.summary().spec!;
        assert.ok(sp.drafted > 0, `threads ${threads}: something was drafted`);
        console.log(`${name}, threads ${threads}: ${sp.accepted} of ${sp.drafted} drafts accepted in ${sp.sweeps} sweeps`);
      } finally {
        await model.close();
      }
    }
  });
}

test('demo-k3-trained chat: --spec 4 replies == --spec 0 over turns that repeat; sampled, the same text for a seed', async () => {
  const model = Model.open(TRAINED_DEMO_DIR, { ctx: 512 });
  try {
    const tok = await loadTokenizer(TRAINED_DEMO_DIR);
    const turns = ['What is 12+34?', 'And 27+58?', 'What is 12+34?'];
    const replies = async (spec: number, sampling?: { temperature: number; seed: number }): Promise<string[]> => {
      const s = new ChatSession(model, tok, { maxTokens: 16, spec, sampling, thinking: false });
      const out: string[] = [];
      for (const t of turns) out.push((await s.turn(t)).text);
      return out;
    };
    const ref = await replies(0);
    assert.deepEqual(await replies(4), ref, 'greedy');
    const hot = { temperature: 0.8, seed: 11 };
    assert.deepEqual(await replies(4, hot), await replies(4, hot), 'sampled, seed 11');
  } finally {
    await model.close();
  }
});
