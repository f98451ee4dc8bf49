// PlanEnv.pinFirst: the plan pins the named trunk matrices before the forward order (a drafter that
// reads K3's lm_head again would read a streamed one twice a sweep). Where the bytes live changes,
// the numbers do not: logits and ids are the bytes of the forward-order plan, and a sweep reads
// none of a pinned lm_head.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import { greedy } from '../../src/generate/greedy.js';
import { pinOrder, pinnedMask } from '../../src/store/plan.js';

const DIR = path.join(GOLDEN, 'k3');
const SMALL_PIECE = 8 * 1024;

test('pinFirst: the lm_head pinned ahead of the forward order, the same bytes, none of it read again', async () => {
  const ids = (JSON.parse(fs.readFileSync(path.join(DIR, 'tokens.json'), 'utf8')).short as number[]).slice(0, 12);
  const p = Model.plan(DIR, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE });
  const open = (pinFirst?: string[]) => Model.open(DIR, { budget: p.floorBytes + Math.floor(p.trunkBytes / 3), ctx: 64, maxPiece: SMALL_PIECE, pinFirst });
  const plain = open();
  const head = [...plain.store.layout.matrices.keys()].filter((b) => /(^|\.)lm_head$/.test(b));
  assert.equal(head.length, 1);
  const first = open(head);
  try {
    const { layout } = first.store;
    const headPieces = layout.matrices.get(head[0]!)!.pieces;
    assert.ok(headPieces.length > 1, 'the lm_head is split into pieces');
    // the forward-order plan leaves the lm_head (the last matrix) streamed; pinFirst pins it, and as much trunk in all
    const plainMask = pinnedMask(plain.store.plan, layout);
    const mask = pinnedMask(first.store.plan, layout);
    assert.ok(headPieces.every((pc) => !plainMask[pc.seq]) && headPieces.every((pc) => mask[pc.seq]));
    assert.ok(Math.abs(first.store.plan.pinnedBytes - plain.store.plan.pinnedBytes) <= layout.maxPieceBytes);
    assert.deepEqual(pinOrder(layout, head).slice(0, headPieces.length), headPieces);
    const run = async (m: Model) => {
      const logits = await m.forward(m.newState(), ids, 'all', 64);
      const before = m.store.stats.trunkBytesRead;
      const r = await greedy(m, m.newState(), ids.slice(0, 4), 6, {});
      return { logits, gen: r.generated, read: m.store.stats.trunkBytesRead - before };
    };
    const a = await run(plain);
    const b = await run(first);
    assert.ok(sameBytes(a.logits, b.logits), 'logits differ');
    assert.deepEqual(b.gen, a.gen);
    // once read, lent from memory (every piece pinned, in one buffer), where the forward-order plan streams it
    const { vocabSize, hiddenSize } = first.config;
    assert.equal(first.store.mat(head[0]!, vocabSize, hiddenSize).lease().kind, 'resident');
    assert.equal(plain.store.mat(head[0]!, vocabSize, hiddenSize).lease().kind, 'streamed');
    // every token streams what is not pinned: as many trunk bytes, up to a piece a token
    assert.ok(b.read > 0 && Math.abs(b.read - a.read) <= 6 * layout.maxPieceBytes, `${b.read} against ${a.read}`);
  } finally {
    await plain.close();
    await first.close();
  }
});
