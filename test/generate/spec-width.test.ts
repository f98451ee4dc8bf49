// The width model (src/generate/spec-width.ts) with a fake drafter and a fake machine: it verifies
// everything while drafts are accepted, backs off to no drafts when acceptance collapses, probes
// periodically to recover, prices widths by the bytes and seconds measured; and in speculative()
// the width it picks never changes the ids greedy emits.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, xorshift } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';
import type { Drafter } from '../../src/generate/draft.js';
import { speculative } from '../../src/generate/spec.js';
import { expectedEmitted, WidthModel, type SweepCost } from '../../src/generate/spec-width.js';
import { RunRecorder } from '../../src/generate/report.js';
import { expertUnion } from '../../src/store/drafter-plan.js';

const FIXED = 1000;
const EXPERT = 200;

/** A disk-bound sweep of width w on the fake machine: trunk once, the experts of w + 1 positions, seconds = bytes / 1000. */
function cost(w: number, accepted: number): SweepCost {
  const expertBytes = EXPERT * expertUnion(w + 1);
  const bytes = FIXED + expertBytes;
  return { width: w, accepted, seconds: bytes / 1000, bytes, expertBytes, ioWaitSeconds: (0.9 * bytes) / 1000 };
}

/** One sweep: begin, choose among `offered` drafts with `confidence`, accept `acceptedOf(width)`, record; returns the width (-1: no draft). */
function step(m: WidthModel, offered: number, acceptedOf: (w: number) => number, confidence?: number[]): number {
  if (!m.begin()) {
    m.record(cost(0, 0));
    return -1;
  }
  const w = m.choose(offered, confidence).width;
  m.record(cost(w, Math.min(w, acceptedOf(w))));
  return w;
}

test('expected emitted ids: 1 + the sum of the products of conditional acceptance', () => {
  assert.equal(expectedEmitted([0.5, 0.5], 0), 1);
  assert.equal(expectedEmitted([0.5, 0.5], 2), 1.75);
  assert.equal(expectedEmitted([1, 1, 1], 3), 4);
  assert.equal(expectedEmitted([0.9], 3), 1.9, 'positions past the estimates are never accepted');
});

test('width model: high confidence verifies the whole block; low confidence none', () => {
  const m = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT });
  assert.equal(m.choose(5, [0.95, 0.95, 0.95, 0.95, 0.95]).width, 5);
  const low = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT });
  assert.equal(low.choose(5, [0.05, 0.05, 0.05, 0.05, 0.05]).width, 0);
  // falling confidence: stop where the next position's odds no longer pay for its experts
  const mid = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT });
  const w = mid.choose(5, [0.95, 0.9, 0.2, 0.05, 0.05]).width;
  assert.ok(w === 2, `width ${w}`);
  // even odds: worth verifying when the trunk dominates a sweep's bytes, not when its experts do
  const half = [0.5, 0.5, 0.5, 0.5, 0.5];
  assert.equal(new WidthModel({ fixedBytes: FIXED, expertBytes: 1 }).choose(5, half).width, 5);
  assert.equal(new WidthModel({ fixedBytes: 1, expertBytes: 100 * FIXED }).choose(5, half).width, 0);
});

test('width model: every draft accepted keeps the width full, from the running rates alone', () => {
  const m = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT });
  const widths = Array.from({ length: 30 }, () => step(m, 5, (w) => w));
  assert.deepEqual(widths.slice(5), Array(25).fill(5), widths.join(','));
});

test('width model: collapsing acceptance goes to no drafts, and the pause doubles between cheap probes', () => {
  const m = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT, pause: 4, maxPause: 16 });
  for (let i = 0; i < 10; i++) step(m, 5, (w) => w); // a good start: full width
  assert.equal(m.choose(5).width, 5);
  m.record(cost(5, 5));
  const widths = Array.from({ length: 90 }, () => step(m, 5, () => 0)); // then nothing is accepted
  const firstZero = widths.findIndex((w) => w <= 0);
  assert.ok(firstZero >= 0 && firstZero <= 16, `backs off after ${firstZero} missed sweeps: ${widths.join(',')}`);
  const late = widths.slice(firstZero);
  const probes = late.filter((w) => w > 0);
  assert.ok(probes.every((w) => w === 1), `probes verify one draft: ${late.join(',')}`);
  // pauses between probes: 4, then 8, 16, 16 (capped)
  const gaps: number[] = [];
  let run = 0;
  for (const w of late) {
    if (w === -1) run++;
    else if (w > 0) {
      gaps.push(run);
      run = 0;
    }
  }
  assert.deepEqual(gaps.slice(0, 4), [4, 8, 16, 16], late.join(','));
  // the drafter comes back: a probe hits and the width grows back to full within a few sweeps
  const back: number[] = [];
  for (let i = 0; i < 40; i++) back.push(step(m, 5, (w) => w));
  assert.ok(back.slice(-10).every((w) => w === 5), back.join(','));
});

test('width model: a drafter that reads much is probed seldom (probes cost at most 3% of the plain sweeps between them)', () => {
  const m = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT, draftBytes: FIXED });
  const widths = Array.from({ length: 120 }, () => step(m, 5, () => 0));
  assert.equal(widths[0], 1, 'no evidence and no confidence: the first sweep verifies one draft');
  // the probe's extra bytes (the drafter's 1000 and 0.66 of a position's experts) over 3% of a plain sweep's 1200: 32 sweeps
  const first = Math.ceil((FIXED + EXPERT * (expertUnion(2) - 1)) / (0.03 * (FIXED + EXPERT)));
  assert.equal(first, 32);
  assert.equal(widths.indexOf(1, 1), first + 1, widths.join(','));
  assert.equal(widths.indexOf(1, first + 2), first + 1 + 64 + 1, 'then doubled, up to 64');
});

test('width model: confidence that overpromises is calibrated down by what the sweeps deliver', () => {
  const m = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT });
  const conf = [0.9, 0.9, 0.9, 0.9, 0.9];
  const widths = Array.from({ length: 24 }, () => step(m, 5, () => 0, conf));
  assert.equal(widths[0], 5, 'believed at first');
  assert.ok(widths.slice(12).every((w) => w <= 1), widths.join(','));
});

test('width model: bytes measured replace the priors; seconds are fitted by width when the run is compute-bound', () => {
  const m = new WidthModel({ fixedBytes: 1, expertBytes: 1, objective: 'auto' });
  assert.equal(m.objective, 'bytes', 'nothing measured yet: bytes');
  m.record(cost(0, 0));
  assert.equal(m.bytesAt(0), FIXED + EXPERT);
  assert.ok(Math.abs(m.bytesAt(3) - (FIXED + EXPERT * expertUnion(4))) < 1e-6, 'union from the trace where not measured');
  m.record({ ...cost(3, 0), expertBytes: 3 * EXPERT, bytes: FIXED + 3 * EXPERT });
  assert.ok(Math.abs(m.bytesAt(3) - (FIXED + 3 * EXPERT)) < 1e-6, 'the union measured at a width wins');
  // compute-bound: seconds grow by 1 per position whatever the bytes
  const c = new WidthModel({ fixedBytes: FIXED, expertBytes: EXPERT, decay: 1 });
  for (let i = 0; i < 4; i++) for (const w of [0, 2]) c.record({ width: w, accepted: 0, seconds: 1 + w, bytes: FIXED, expertBytes: 0, ioWaitSeconds: 0 });
  assert.equal(c.objective, 'seconds');
  assert.ok(Math.abs(c.secondsAt(4) - 5) < 1e-9, `fitted ${c.secondsAt(4)}`);
  // 1 + 0.6 + 0.36 ids for 3 s: worse than 1 id for 1 s
  assert.equal(c.choose(4, [0.6, 0.6, 0.6, 0.6]).width, 0);
  assert.throws(() => new WidthModel({ prior: [1.5] }), /prior/);
});

test('width model: a run that reads nothing (all resident) prices widths by seconds, each draft a quarter sweep until timed', () => {
  const m = new WidthModel();
  assert.equal(m.objective, 'seconds');
  assert.equal(m.secondsAt(4), 2);
  // a confident drafter is believed from the first sweep, and a weak one is not drafted for
  assert.equal(m.choose(7, [0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95]).width, 7);
  assert.equal(new WidthModel().choose(7, [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]).width, 0);
  // one width timed: the others scale from it by the same shape
  m.record({ width: 7, accepted: 7, seconds: 2.75, bytes: 0, expertBytes: 0, ioWaitSeconds: 0 });
  assert.ok(Math.abs(m.secondsAt(0) - 1) < 1e-9, `${m.secondsAt(0)}`);
  assert.equal(m.choose(7, [0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95]).width, 7);
});

/** Drafts the true continuation with a random spoiled position, and says how sure it is (seeded). */
class FakeDrafter implements Drafter {
  lastConfidence: number[] | null = null;
  private readonly rnd: () => number;
  constructor(
    private readonly truth: readonly number[],
    private readonly good: number,
    seed: number,
  ) {
    this.rnd = xorshift(seed);
  }
  draft(context: readonly number[], max: number): number[] {
    const out = this.truth.slice(context.length, context.length + max).map((id) => (this.rnd() < this.good ? id : id + 1));
    this.lastConfidence = out.map(() => this.good);
    return out;
  }
}

test('speculative() with the width model: the ids of greedy at any acceptance; the report has widths and bytes per emitted token', async () => {
  const dir = path.join(GOLDEN, 'k3');
  const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, 8);
  const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: 8192, threads: 1 }).floorBytes;
  const model = await Model.load(dir, { budget: floor, ctx: 64, maxPiece: 8192, threads: 1 });
  const N = 24;
  const base = (await greedy(model, model.newState(), ids, N)).generated;
  for (const good of [1, 0.7, 0]) {
    const rec = new RunRecorder(model.store);
    const r = await speculative(model, model.newState(), ids, N, { spec: 4, drafter: new FakeDrafter([...ids, ...base], good, 5), recorder: rec, width: { draftBytes: 1000 } });
    assert.deepEqual(r.generated, base, `acceptance ${good}`);
    const s = rec.summary().spec!;
    assert.equal(s.width_histogram.reduce((a, b) => a + b, 0), s.sweeps);
    assert.equal(s.width_histogram.reduce((a, n, w) => a + n * w, 0), s.drafted);
    assert.ok(s.bytes_per_emitted_token > 0 && s.drafter_bytes_per_emitted_token > 0);
    if (good === 1) assert.ok(s.tokens_per_sweep > 3, `all accepted: ${s.tokens_per_sweep} per sweep`);
    if (good === 0) assert.ok(s.width_histogram[0]! > s.sweeps / 2, `none accepted: mostly plain steps ${s.width_histogram.join(',')}`);
  }
  await model.close();
});
