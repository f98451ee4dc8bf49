// Each byte once per sweep (issue 9): in a multi-token forward (a prefill chunk, a speculative
// sweep) every trunk piece and every distinct expert is read at most once, and all the sweep's
// tokens share it. The reads are counted, at the floor (everything streamed, one expert slot, tiny
// pieces) and with the trunk pinned and lookahead guesses in flight.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { FsReader, type ByteReader } from '../../src/store/store.js';

const CASES = ['k3', 'kimi-linear', 'k2-yarn', 'k2-thinking-int4'];
const SMALL_PIECE = 8 * 1024;
const SWEEP = 7;
const SWEEPS = 3;

type Ev = { kind: 'read' | 'use'; key: string };

async function countedRun(dir: string, budget: number): Promise<{ events: Ev[][]; model: Model }> {
  const events: Ev[][] = [];
  const inner = new FsReader();
  const reader: ByteReader = {
    async read(file, offset, into) {
      events[events.length - 1]!.push({ kind: 'read', key: `${file}:${offset}` });
      await inner.read(file, offset, into);
    },
    close: () => inner.close(),
  };
  const model = Model.open(dir, { budget, ctx: 64, chunk: SWEEP, maxPiece: SMALL_PIECE, reader });
  events.push([]);
  model.store.trace = (e) => {
    if (e.kind === 'use-matrix') events[events.length - 1]!.push({ kind: 'use', key: `${e.name}[${e.row}]` });
  };
  const ids = (JSON.parse(fs.readFileSync(path.join(dir, 'tokens.json'), 'utf8')).short as number[]).slice(0, SWEEP * SWEEPS);
  const st = model.newState();
  for (let s = 0; s < SWEEPS; s++) {
    events.push([]);
    await model.forward(st, ids.slice(s * SWEEP, (s + 1) * SWEEP), 'last', SWEEP);
  }
  await model.close();
  return { events: events.slice(1), model };
}

for (const name of CASES) {
  test(`${name}: a ${SWEEP}-token sweep reads each trunk piece and each distinct expert at most once`, async () => {
    const dir = path.join(GOLDEN, name);
    const p = Model.plan(dir, { budget: 0, ctx: 64, chunk: SWEEP, maxPiece: SMALL_PIECE });
    for (const budget of [p.floorBytes, p.floorBytes + p.trunkBytes + 8 * p.expertBytes]) {
      const { events, model } = await countedRun(dir, budget);
      const { layout, cfg } = model.store;
      const pieceOf = new Map<string, (typeof layout.sequence)[number]>();
      for (const pc of layout.sequence) {
        pieceOf.set(`${pc.data.file}:${pc.data.offset}`, pc);
        if (pc.scale) pieceOf.set(`${pc.scale.file}:${pc.scale.offset}`, pc);
      }
      const expertRange = new Set<string>();
      for (let l = 0; l < cfg.numLayers; l++) {
        if (cfg.layers[l]!.ffn !== 'moe') continue;
        for (let e = 0; e < cfg.moe.experts; e++) {
          for (const part of layout.experts(l, e)) for (const r of part.scale ? [part.data, part.scale] : [part.data]) expertRange.add(`${r.file}:${r.offset}`);
        }
      }
      const pieceKey = (pc: (typeof layout.sequence)[number]) => `${pc.base}[${pc.r0}]`;
      const streamed = new Set(layout.sequence.filter((pc) => pc.seq >= model.store.plan.pinnedPieces).map(pieceKey));
      // Per piece: its reads (R) and uses (U) in order. Two reads with no use between: a byte read twice.
      const timeline = new Map<string, string>();
      let expertReads = 0;
      events.forEach((ev, s) => {
        const uses = new Map<string, number>();
        const experts = new Map<string, number>();
        for (const e of ev) {
          if (e.kind === 'use') {
            uses.set(e.key, (uses.get(e.key) ?? 0) + 1);
            timeline.set(e.key, (timeline.get(e.key) ?? '') + 'U');
          } else if (pieceOf.has(e.key)) {
            const pc = pieceOf.get(e.key)!;
            if (e.key === `${pc.data.file}:${pc.data.offset}`) timeline.set(pieceKey(pc), (timeline.get(pieceKey(pc)) ?? '') + 'R');
          } else if (expertRange.has(e.key)) {
            experts.set(e.key, (experts.get(e.key) ?? 0) + 1);
            expertReads++;
          }
        }
        // A streamed piece is used once per sweep, however many tokens the sweep has.
        for (const k of streamed) assert.equal(uses.get(k), 1, `budget ${budget}, sweep ${s}: streamed piece ${k} used ${uses.get(k)} times`);
        for (const [k, n] of experts) assert.equal(n, 1, `budget ${budget}, sweep ${s}: expert range ${k} read ${n} times`);
      });
      assert.ok(expertReads > 0, 'experts were read');
      for (const [k, tl] of timeline) assert.doesNotMatch(tl, /RR/, `budget ${budget}: piece ${k} read twice between uses (${tl})`);
      if (budget !== p.floorBytes) {
        assert.equal(model.store.plan.streamedBytes, 0, 'trunk pinned');
        assert.ok(model.store.stats.guessReads > 0, 'lookahead guesses were read in the sweeps');
      }
      if (budget === p.floorBytes) {
        const streamed = model.store.plan.streamedBytes;
        // every trunk byte once per sweep (plus the read-ahead into the next), never once per token
        assert.ok(model.store.stats.trunkBytesRead <= (SWEEPS + 1) * streamed, `${model.store.stats.trunkBytesRead} trunk bytes read for ${SWEEPS} sweeps of ${streamed}`);
      }
    }
  });
}
