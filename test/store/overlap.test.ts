// Overlap and lookahead (issue 9): a recorded trace shows layer l's expert reads issued before
// layer l's compute finishes (before its shared expert, even), lookahead guesses for layer l read
// before layer l's router runs, and guesses never change a byte of the logits, even when every
// one of them is wrong.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { namesOf } from '../../src/checkpoint/names.js';
import type { StoreEvent } from '../../src/store/store.js';

const DIR = path.join(GOLDEN, 'k3');
const IDS = (JSON.parse(fs.readFileSync(path.join(DIR, 'tokens.json'), 'utf8')).short as number[]).slice(0, 5);
const DECODE = 4;

/** A budget with the whole trunk pinned and room for a few experts more than a layer's top-k, not all. */
function pinnedTrunkBudget(): number {
  const p = Model.plan(DIR, { budget: 0, ctx: 64, chunk: 8 });
  return p.floorBytes + p.trunkBytes + 8 * p.expertBytes;
}

interface Run {
  logits: Float32Array[];
  model: Model;
  /** Per forward call, the store's events. */
  events: StoreEvent[][];
}

/** Prefill IDS then DECODE greedy tokens, one forward each; `setup` may install store hooks. */
async function run(lookahead: boolean, setup?: (m: Model, events: () => StoreEvent[][]) => void): Promise<Run> {
  const model = Model.open(DIR, { budget: pinnedTrunkBudget(), ctx: 64, chunk: 8, lookahead });
  const events: StoreEvent[][] = [];
  model.store.trace = (e) => events[events.length - 1]!.push(e);
  setup?.(model, () => events);
  const st = model.newState();
  const logits: Float32Array[] = [];
  let next = IDS;
  for (let i = 0; i <= DECODE; i++) {
    events.push([]);
    const l = await model.forward(st, next, 'last', 8);
    logits.push(l);
    let best = 0;
    for (let v = 1; v < l.length; v++) if (l[v]! > l[best]!) best = v;
    next = [best];
  }
  await model.close();
  return { logits, model, events };
}

test('plan for the overlap tests: trunk pinned, expert cache above top-k and below all experts', () => {
  const p = Model.plan(DIR, { budget: pinnedTrunkBudget(), ctx: 64, chunk: 8 });
  assert.equal(p.streamedBytes, 0);
  assert.ok(p.expertSlots > 2 && p.expertSlots < p.expertsTotal, `slots ${p.expertSlots} of ${p.expertsTotal}`);
});

test('trace: expert reads of layer l start before its shared expert and latent up; guesses before its router', async () => {
  const r = await run(true);
  const cfg = r.model.config;
  const names = namesOf(cfg);
  let demandChecked = 0;
  let guessChecked = 0;
  for (const ev of r.events.slice(1)) {
    // decode forwards (one token): one visit per layer
    const at = (pred: (e: StoreEvent) => boolean) => ev.findIndex(pred);
    for (let l = 0; l < cfg.numLayers; l++) {
      if (cfg.layers[l]!.ffn !== 'moe') continue;
      const n = names.moe(l);
      const router = at((e) => e.kind === 'routed' && e.layer === l);
      const shared = at((e) => e.kind === 'use-matrix' && e.name === n.shared.gate);
      const up = at((e) => e.kind === 'use-matrix' && e.name === n.latentUp);
      assert.ok(router >= 0 && shared > router && up > shared, `layer ${l}: routed, then shared expert, then latent up`);
      ev.forEach((e, i) => {
        if (e.kind !== 'read-expert' || e.layer !== l) return;
        if (e.guess) {
          assert.ok(i < router, `layer ${l}: guessed expert ${e.expert} read after the layer's router ran`);
          guessChecked++;
        } else {
          assert.ok(i > router && i < shared, `layer ${l}: expert ${e.expert} read at event ${i}, not between its router (${router}) and its shared expert (${shared})`);
          demandChecked++;
        }
      });
      ev.forEach((e, i) => assert.ok(!(e.kind === 'use-expert' && e.layer === l) || i < up, `layer ${l}: routed expert used after the latent up`));
    }
  }
  assert.ok(demandChecked > 0, 'some experts were read on demand');
  assert.ok(guessChecked > 0, 'some guesses were read ahead');
  const s = r.model.store.stats;
  assert.ok(s.guesses > 0 && s.guessHits <= s.guesses);
});

test('lookahead never changes the logits, even when every guess is wrong', async () => {
  const off = await run(false);
  assert.equal(off.model.store.stats.guesses, 0);
  const on = await run(true);
  const cfg = off.model.config;
  // What each visit of each layer chose, from the run without guesses (same routing: same numbers).
  const visits: Set<number>[][] = Array.from({ length: cfg.numLayers }, () => []);
  for (const ev of off.events) for (const e of ev) if (e.kind === 'routed') visits[e.layer]!.push(new Set(e.experts));
  const wrong = await run(true, (m) => {
    const seen = new Array<number>(cfg.numLayers).fill(0);
    const prev = m.store.trace!;
    m.store.trace = (e) => {
      if (e.kind === 'routed') seen[e.layer]!++;
      prev(e);
    };
    m.store.guessOverride = (l, g) => {
      const actual = visits[l]![seen[l]!]!; // the visit the guess is for: the next one
      const out: number[] = [];
      for (let e = 0; e < cfg.moe.experts && out.length < g.length; e++) if (!actual.has(e)) out.push(e);
      return out;
    };
  });
  const s = wrong.model.store.stats;
  assert.ok(s.guesses > 0 && s.guessReads > 0, 'guesses were read');
  assert.equal(s.guessHits, 0, 'every guess was wrong');
  assert.ok(on.model.store.stats.guessHits > 0, 'the real guesses hit sometimes');
  for (let i = 0; i < off.logits.length; i++) {
    assert.ok(sameBytes(on.logits[i]!, off.logits[i]!), `forward ${i}: lookahead changed the logits`);
    assert.ok(sameBytes(wrong.logits[i]!, off.logits[i]!), `forward ${i}: wrong guesses changed the logits`);
  }
});
