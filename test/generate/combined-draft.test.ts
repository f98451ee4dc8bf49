// Suffix drafts combined with a model drafter (CombinedDrafter in src/generate/suffix-draft.ts), and the suffix
// drafter keeping a session's earlier turns (SuffixDrafter.observe).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { xorshift } from '../helpers.js';
import type { Drafter } from '../../src/generate/draft.js';
import { CombinedDrafter, SuffixDrafter, suffixDraftReference } from '../../src/generate/suffix-draft.js';
import type { Taps } from '../../src/model/taps.js';

/** Stands in for DSpark: a fixed block with a confidence, and taps. */
class FakeModelDrafter implements Drafter {
  readonly taps: Taps = { layers: [1], stream: 'prefix', take: () => {} };
  lastConfidence: number[] | null = null;
  calls = 0;
  draft(_context: readonly number[], max: number): number[] {
    this.calls++;
    this.lastConfidence = [0.9, 0.8, 0.7, 0.6].slice(0, max);
    return [7, 7, 7, 7].slice(0, max);
  }
}

test('suffix drafter: observe() keeps earlier turns in front of every later context', () => {
  const turn1 = [1, 2, 3, 4, 5, 6];
  const d = new SuffixDrafter();
  assert.deepEqual(d.draft([9, 2, 3], 3), []);
  d.observe(turn1);
  assert.deepEqual(d.draft([9, 2, 3], 3), [4, 5, 6], 'the earlier turn drafts the new one');
  assert.equal(d.lastMatch, 2);
  assert.deepEqual(d.lastConfidence, [0.5, 0.5, 0.5], 'one earlier occurrence: 1 / (1 + 1)');
  // what it drafts is the reference rule over kept text + context, context after context
  const rnd = xorshift(11);
  const s = new SuffixDrafter();
  const kept: number[] = [];
  for (let turn = 0; turn < 4; turn++) {
    const ctx = Array.from({ length: 60 }, () => 1 + Math.floor(rnd() * 6));
    for (let L = 1; L <= ctx.length; L += 7) assert.deepEqual(s.draft(ctx.slice(0, L), 4), suffixDraftReference([...kept, ...ctx.slice(0, L)], 4, 2, 0.5), `turn ${turn}, ${L} tokens`);
    s.observe(ctx);
    kept.push(...ctx);
  }
  // the last draft of the last turn indexed 57 of its 60 tokens; then only the kept text is asked
  assert.equal(s.length, kept.length - 3);
  s.draft([], 1);
  assert.equal(s.length, kept.length);
  const small = new SuffixDrafter(2, 0.5, 1024, 8);
  small.observe(Array.from({ length: 9 }, (_, i) => i));
  small.draft([1, 2], 1);
  assert.equal(small.length, 4 + 2, 'past maxKept the older half is dropped');
});

test('combined drafter: the suffix draft when its match is long and confident, the model drafter otherwise; taps flow', () => {
  const model = new FakeModelDrafter();
  const c = new CombinedDrafter(new SuffixDrafter(), model, { minMatch: 4 });
  assert.equal(c.taps, model.taps);
  const call = [40, 41, 42, 43, 44, 45, 46, 47];
  // no repeat: the model drafts
  assert.deepEqual(c.draft([1, 2, 3, 5, 8], 3), [7, 7, 7]);
  assert.equal(c.lastSource, 'model');
  assert.deepEqual(c.lastConfidence, [0.9, 0.8, 0.7]);
  // a repeated tool call seen once: long match, but 1 of 1 earlier occurrences is not confident (0.5 < 0.6)
  assert.deepEqual(c.draft([...call, 9, ...call.slice(0, 4)], 3), [7, 7, 7]);
  // seen twice: the suffix drafts the rest of it
  const ctx = [...call, 9, ...call, 10, ...call.slice(0, 5)];
  assert.deepEqual(c.draft(ctx, 3), [45, 46, 47]);
  assert.equal(c.lastSource, 'suffix');
  assert.ok(c.lastConfidence!.every((x) => Math.abs(x - 2 / 3) < 1e-12));
  // a short match (2 tokens), however confident: the model
  const short = new CombinedDrafter(new SuffixDrafter(), new FakeModelDrafter(), { minMatch: 4 });
  assert.deepEqual(short.draft([5, 6, 1, 5, 6, 1, 9, 5, 6], 2), [7, 7]);
  // earlier turns count: observed once, the call is seen twice with the new turn's own copy
  const s = new CombinedDrafter(new SuffixDrafter(), new FakeModelDrafter(), { minMatch: 4 });
  s.observe([...call, 9]);
  assert.deepEqual(s.draft([...call, 11, ...call.slice(0, 5)], 3), [45, 46, 47]);
  assert.equal(s.lastSource, 'suffix');
  assert.throws(() => new CombinedDrafter(new SuffixDrafter(), model, { minMatch: 0 }), /minMatch/);
});
