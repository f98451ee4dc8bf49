// Speculative decoding and batched forwards give the bytes of plain decoding: on every golden
// checkpoint, at the floor budget and all resident, on 1 and 2 threads, `--spec 4` emits the ids
// and sees the logits of `--spec 0`, and leaves the very same state behind (KDA S and conv tails,
// MLA caches), for drafts that are all accepted, partly and never; a sweep reads the trunk once;
// forwardBatch gives each sequence its solo bytes and reads the trunk once for all of them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { GOLDEN, sameBytes } from '../helpers.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { greedy } from '../../src/generate/greedy.js';
import { NgramDrafter, ReplayDrafter } from '../../src/generate/draft.js';
import { speculative } from '../../src/generate/spec.js';
import { acceptDraft } from '../../src/generate/spec-sample.js';
import { Sampler } from '../../src/generate/sampling.js';
import { RunRecorder } from '../../src/generate/report.js';
import { FsReader, type ByteReader } from '../../src/store/store.js';
import { ChatSession } from '../../src/generate/session.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles, loadTokenizer } from '../../src/tokenizer/index.js';

const CASES = ['k2-yarn', 'k2-thinking-int4', 'kimi-linear', 'k3'];
const SMALL_PIECE = 8 * 1024;
const GEN = 10;

function prompt(name: string, n = 8): number[] {
  return (JSON.parse(fs.readFileSync(path.join(GOLDEN, name, 'tokens.json'), 'utf8')).short as number[]).slice(0, n);
}

/** The state's bytes: every KDA S and conv tail, every MLA cache up to its length, the tokens. */
function stateBytes(s: SequenceState): Buffer {
  const parts: Buffer[] = [Buffer.from(JSON.stringify(s.tokens))];
  const f = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  for (const k of s.kda) if (k) parts.push(f(k.S), f(k.conv));
  for (const m of s.mla) if (m) parts.push(f(m.lat.subarray(0, m.length * m.Lk)), f(m.rope.subarray(0, m.length * m.dr)));
  return Buffer.concat(parts);
}

/** A pick that keeps a copy of every logits row it chose from: one per emitted id. */
function recordingPick(V: number): { rows: Float32Array[]; pick: (l: Float32Array) => number } {
  const rows: Float32Array[] = [];
  const pick = (l: Float32Array): number => {
    rows.push(l.slice(0, V));
    let best = 0;
    for (let i = 1; i < V; i++) if (l[i]! > l[best]!) best = i;
    return best;
  };
  return { rows, pick };
}

for (const name of CASES) {
  test(`${name}: --spec 4 == --spec 0 bytes (ids, logits, final state); floor and resident, threads 1 and 2`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = prompt(name);
    const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE, threads: 2 }).floorBytes; // (2 threads: the larger floor)
    for (const budget of [floor, Number.MAX_SAFE_INTEGER]) {
      for (const threads of [1, 2]) {
        const model = await Model.load(dir, { budget, ctx: 64, threads, maxPiece: SMALL_PIECE });
        try {
          const V = model.config.vocabSize;
          const base = recordingPick(V);
          const s0 = model.newState();
          const ref = await greedy(model, s0, ids, GEN, { pick: base.pick });
          const reference = [...ids, ...ref.generated];
          const drafters = [new ReplayDrafter(reference, 1), new ReplayDrafter(reference, 0.5), new ReplayDrafter(reference, 0), ...(threads === 1 ? [new NgramDrafter(2)] : [])];
          for (const [i, drafter] of drafters.entries()) {
            const rec = recordingPick(V);
            const s = model.newState();
            const recorder = new RunRecorder(model.store);
            // all accepted: every sweep verifies 4 (--spec-width); the others let the width model choose
            const r = await speculative(model, s, ids, GEN, { spec: 4, drafter, pick: rec.pick, recorder, fixedWidth: i === 0 });
            const what = `budget ${budget === floor ? 'floor' : 'resident'}, threads ${threads}, drafter ${i}`;
            assert.deepEqual(r.generated, ref.generated, `${what}: ids`);
            assert.equal(rec.rows.length, base.rows.length, `${what}: one logits row per emitted id`);
            rec.rows.forEach((row, t) => assert.ok(sameBytes(row, base.rows[t]!), `${what}: logits of token ${t}`));
            assert.ok(stateBytes(s).equals(stateBytes(s0)), `${what}: final state`);
            const sp = recorder.summary().spec!;
            if (i === 0) assert.ok(sp.tokens_per_sweep > 3, `${what}: all drafts accepted (${sp.tokens_per_sweep} tokens per sweep)`);
            if (i === 2) assert.equal(sp.accepted, 0, `${what}: no draft accepted`);
            model.release(s);
          }
        } finally {
          await model.close();
        }
      }
    }
  });
}

/** A ByteReader that records the offset of every read. */
function countingReader(): { reader: ByteReader; reads: number[] } {
  const inner = new FsReader();
  const reads: number[] = [];
  return {
    reads,
    reader: {
      async read(file, offset, into) {
        reads.push(offset);
        await inner.read(file, offset, into);
      },
      close: () => inner.close(),
    },
  };
}

test('a speculative sweep and a batched forward read each trunk piece at most once, as much as one decode step', async () => {
  for (const name of ['k3', 'k2-yarn']) {
    const dir = path.join(GOLDEN, name);
    const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE }).floorBytes;
    const { reader, reads } = countingReader();
    const model = Model.open(dir, { budget: floor, reader, ctx: 64, maxPiece: SMALL_PIECE });
    const trunk = new Set(model.store.layout.sequence.map((p) => p.data.offset));
    const trunkReads = (from: number): Map<number, number> => {
      const m = new Map<number, number>();
      for (const o of reads.slice(from)) if (trunk.has(o)) m.set(o, (m.get(o) ?? 0) + 1);
      return m;
    };
    const s = model.newState();
    await model.forward(s, prompt(name), 'last');
    let bytes = model.store.stats.trunkBytesRead;
    await model.forward(s, [5], 'last');
    const oneStep = model.store.stats.trunkBytesRead - bytes;
    // The ring reads ahead across calls, and how far depends on which reads have landed, so a
    // call's byte count can differ from the next by up to the ring's size; the exact claim is the
    // per-piece count below (each trunk piece read at most once).
    const slack = model.store.plan.ringBytes;
    const aboutOneStep = (got: number, what: string) => assert.ok(Math.abs(got - oneStep) <= slack, `${name}: ${what} reads ${got} trunk bytes, one decode step ${oneStep} (± ${slack})`);

    bytes = model.store.stats.trunkBytesRead;
    let from = reads.length;
    model.startSweep(s);
    await model.forward(s, [7, 8, 9, 10, 11], 'all', 5);
    model.endSweep(s, 2);
    aboutOneStep(model.store.stats.trunkBytesRead - bytes, 'a 5-token sweep');
    for (const [o, n] of trunkReads(from)) assert.ok(n <= 1, `${name}: sweep read trunk piece at ${o} ${n} times`);

    const others = [model.newState(), model.newState()];
    await model.forward(others[0]!, [3, 4], 'last');
    await model.forward(others[1]!, [6], 'last');
    bytes = model.store.stats.trunkBytesRead;
    from = reads.length;
    await model.forwardBatch([s, ...others], [[1], [2, 3], [4]]);
    aboutOneStep(model.store.stats.trunkBytesRead - bytes, 'a batch of 3');
    for (const [o, n] of trunkReads(from)) assert.ok(n <= 1, `${name}: batch read trunk piece at ${o} ${n} times`);
    await model.close();
  }
});

for (const name of CASES) {
  test(`${name}: forwardBatch gives each sequence its solo bytes (logits and state), floor and 2 threads`, async () => {
    const dir = path.join(GOLDEN, name);
    const ids = prompt(name, 12);
    const floor = Model.plan(dir, { budget: 0, ctx: 64, maxPiece: SMALL_PIECE, threads: 2 }).floorBytes;
    const model = await Model.load(dir, { budget: floor, ctx: 64, threads: 2, maxPiece: SMALL_PIECE });
    try {
      // three sequences at different positions, each given a different number of new tokens
      const starts = [ids.slice(0, 5), ids.slice(3, 4), []];
      const next = [[ids[6]!], ids.slice(7, 10), ids.slice(0, 4)];
      const solo: { logits: Float32Array; state: Buffer }[] = [];
      for (let i = 0; i < 3; i++) {
        const s = model.newState();
        if (starts[i]!.length) await model.forward(s, starts[i]!, 'none');
        const logits = await model.forward(s, next[i]!, 'all');
        solo.push({ logits, state: stateBytes(s) });
        model.release(s);
      }
      const states: SequenceState[] = [];
      for (let i = 0; i < 3; i++) {
        const s = model.newState();
        if (starts[i]!.length) await model.forward(s, starts[i]!, 'none');
        states.push(s);
      }
      const out = await model.forwardBatch(states, next, 'all');
      for (let i = 0; i < 3; i++) {
        assert.ok(sameBytes(out[i]!, solo[i]!.logits), `sequence ${i}: logits`);
        assert.ok(stateBytes(states[i]!).equals(solo[i]!.state), `sequence ${i}: state`);
      }
      const last = await model.forwardBatch(states, [[1], [2], [3]], 'last');
      assert.deepEqual(last.map((l) => l.length), [1, 1, 1].map(() => model.config.vocabSize));
    } finally {
      await model.close();
    }
  });
}

test('sampled speculation: the same text for a seed, every run; the acceptance rule keeps the distribution', async () => {
  const dir = path.join(GOLDEN, 'kimi-linear');
  const ids = prompt('kimi-linear');
  const model = Model.open(dir, { ctx: 64 });
  const V = model.config.vocabSize;
  const run = async (seed: number): Promise<number[]> => {
    const sampler = new Sampler({ temperature: 0.9, topK: 20, seed });
    const reference = [...ids, ...(await greedy(model, model.newState(), ids, GEN)).generated];
    const r = await speculative(model, model.newState(), ids, GEN, {
      spec: 3,
      drafter: new ReplayDrafter(reference, 0.75),
      pick: (l) => sampler.sample(l, [], V),
      accept: (l, d) => acceptDraft(sampler, l, d, [], V),
    });
    return r.generated;
  };
  assert.deepEqual(await run(7), await run(7));
  await model.close();

  // p over 4 ids; draft id 1: every emitted id is distributed as p
  const logits = Float32Array.from([1, 0.5, 0, -1]);
  const s = new Sampler({ temperature: 1, seed: 3 });
  const { ids: order, probs } = s.distribution(logits);
  const p = new Map(order.map((id, i) => [id, probs[i]!]));
  const N = 40000;
  const counts = [0, 0, 0, 0];
  for (let i = 0; i < N; i++) counts[acceptDraft(s, logits, 1, [], 4).id]!++;
  counts.forEach((c, id) => assert.ok(Math.abs(c / N - p.get(id)!) < 0.01, `id ${id}: ${c / N} vs ${p.get(id)}`));
});

test('drafters: n-gram lookup, replay shares', () => {
  const ng = new NgramDrafter(3);
  assert.deepEqual(ng.draft([1, 2, 3, 4, 9, 2, 3], 3), [4, 9, 2]);
  assert.deepEqual(ng.draft([1, 2, 3], 2), []);
  assert.deepEqual(new ReplayDrafter([0, 1, 2, 3, 4, 5, 6], 0.5).draft([0, 1], 4), [2, 3, 3, 4]);
});

test('k3 chat with --spec 4: the same greedy replies and state as --spec 0, over several turns', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-spec-'));
  try {
    const dir = path.join(tmp, 'demo');
    await synthCheckpoint({ arch: 'k3', preset: 'demo', out: dir, extraFiles: demoTokenizerFiles() });
    const model = Model.open(dir, { ctx: 1024 }); // room for the long first turn (a full context ends a chat)
    const tok = await loadTokenizer(dir);
    const sessions = [0, 4].map((spec) => new ChatSession(model, tok, { maxTokens: 8, ignoreEos: true, spec }));
    let sweeps = 0;
    const forward = model.forward.bind(model);
    model.forward = async (state, ids, rows, chunk) => {
      if (state === sessions[1]!.state && rows === 'all') sweeps++;
      return forward(state, ids, rows, chunk);
    };
    // a long first message: many distinct ids in the history for the drafter to find
    const long = Array.from({ length: 30 }, (_, i) => `w${i * 7} ${String.fromCharCode(65 + (i % 26))}`).join(' ');
    for (const text of [long, 'Hello there']) {
      const a = await sessions[0]!.turn(text); // one forward at a time: a store serves one pass
      const b = await sessions[1]!.turn(text);
      assert.ok(a.ids.length > 0, `a reply to ${text}`);
      assert.deepEqual(b.ids, a.ids, `reply to ${text}`);
      assert.ok(stateBytes(sessions[1]!.state).equals(stateBytes(sessions[0]!.state)), `state after ${text}`);
      assert.equal(b.rebuilt, null);
    }
    assert.ok(sweeps > 0, 'the drafter found drafts in the conversation');
    await model.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
