// Property-based fuzzing of everything the engine parses, in-process (fast-check, fixed seeds):
// safetensors headers, configs, packed manifests, state files, tokenizer inputs and CLI flags.
// Every case ends in a result that keeps the format's invariants, or in a UserError (one line);
// any other exception, a hang (the suite's timeout) or a silently wrong result fails the test.
// `npm run fuzz` runs 200k cases (FUZZ_RUNS); FUZZ_SEED explores other cases.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fc from 'fast-check';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createHash } from 'node:crypto';
import { GOLDEN, TOKENIZER, readFixture } from '../helpers.js';
import { Tally, jsonMutation, runs, seed, userErrorOr } from '../fuzz.js';
import { parseSafetensorsHeader, readSafetensorsHeader } from '../../src/checkpoint/safetensors.js';
import { parseConfig, loadConfig } from '../../src/checkpoint/config.js';
import { checkTensorsMatchConfig } from '../../src/checkpoint/expect.js';
import { indexCheckpointDir } from '../../src/checkpoint/dir.js';
import { manifestDigest, readPackedDir, type PackManifest } from '../../src/checkpoint/packed.js';
import { DTYPE_BYTES, isDType } from '../../src/formats/dtypes.js';
import { buildLayout } from '../../src/store/layout.js';
import { packCheckpoint } from '../../src/store/pack.js';
import { parseSize } from '../../src/store/plan.js';
import { selectTopK } from '../../src/model/router.js';
import { Model } from '../../src/model/model.js';
import { loadState, saveState } from '../../src/generate/state-file.js';
import { Sampler } from '../../src/generate/sampling.js';
import { Tokenizer } from '../../src/tokenizer/index.js';
import { parse, parseIds, parseIntFlag } from '../../src/cli/args.js';
import { SAMPLING_OPTIONS, samplingFromFlags } from '../../src/cli/run.js';
import { MODEL_OPTIONS } from '../../src/cli/common.js';

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-fuzz-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

// ---- safetensors headers ------------------------------------------------------------------

const ST_FILE = path.join(GOLDEN, 'k2-yarn', 'model.safetensors');
const stBytes = fs.readFileSync(ST_FILE);
const stN = Number(stBytes.readBigUInt64LE(0));
const stHeader = JSON.parse(stBytes.subarray(8, 8 + stN).toString('utf8')) as Record<string, unknown>;

function encodeHeader(h: unknown): Buffer {
  return Buffer.from(JSON.stringify(h), 'utf8');
}

/** Check what a header parse returned: known dtypes, byte lengths = shape, an exact tiling of the data section. */
function checkTiling(entries: ReturnType<typeof parseSafetensorsHeader>, headerLen: number, size: number): void {
  const sorted = [...entries].sort((a, b) => a.offset - b.offset);
  let at = 8 + headerLen;
  for (const e of sorted) {
    assert.ok(isDType(e.dtype));
    assert.equal(e.nbytes, e.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[e.dtype]);
    assert.equal(e.offset, at, `tensor ${e.name} starts where the previous one ends`);
    at += e.nbytes;
  }
  assert.equal(at, size, 'tensors end at the end of the file');
}

const headerCase = fc.oneof(
  // the real header with fields changed
  jsonMutation(stHeader).map((h) => ({ kind: 'fields', bytes: encodeHeader(h), size: 8 + encodeHeader(h).length + (stBytes.length - 8 - stN) })),
  // the real header bytes with the header length off by a few bytes (the file unchanged)
  fc.integer({ min: -64, max: 64 }).filter((d) => d !== 0).map((d) => ({ kind: 'length', bytes: stBytes.subarray(8, 8 + stN + d), size: stBytes.length })),
  // a byte of the header changed
  fc.tuple(fc.nat(stN - 1), fc.integer({ min: 1, max: 255 })).map(([i, x]) => {
    const b = Buffer.from(stBytes.subarray(8, 8 + stN));
    b[i]! ^= x;
    return { kind: 'byte', bytes: b, size: stBytes.length };
  }),
  // deep nesting, and arbitrary JSON
  fc.tuple(fc.integer({ min: 1, max: 200_000 }), fc.constantFrom('[', '{"a":')).map(([n, open]) => ({ kind: 'nesting', bytes: Buffer.from(open.repeat(n) + '1' + (open === '[' ? ']' : '}').repeat(n)), size: 1 << 20 })),
  fc.json({ maxDepth: 6 }).map((j) => ({ kind: 'json', bytes: Buffer.from(j), size: 8 + Buffer.byteLength(j) + fc.sample(fc.nat(4096), { seed: j.length, numRuns: 1 })[0]! })),
);

test('fuzz: safetensors headers parse to an exact tiling, or one UserError line', () => {
  const tally = new Tally();
  fc.assert(
    fc.property(headerCase, (c) => {
      const r = userErrorOr(() => parseSafetensorsHeader('f.safetensors', c.bytes, c.size));
      tally.add(`${c.kind}:${r.ok ? 'ok' : 'refused'}`);
      if (r.ok) {
        checkTiling(r.value, c.bytes.length, c.size);
        assert.notEqual(c.kind, 'length', 'a header length that is off is never accepted');
      }
    }),
    { seed: seed(1001), numRuns: runs(3000), includeErrorInReport: true },
  );
  console.log(`safetensors headers: ${tally}`);
});

// ---- configs ------------------------------------------------------------------------------

const ARCHS = ['k2-yarn', 'kimi-linear', 'k3'] as const;
const configs = ARCHS.map((a) => ({ arch: a, json: JSON.parse(fs.readFileSync(path.join(GOLDEN, a, 'config.json'), 'utf8')) as Record<string, unknown>, entries: indexCheckpointDir(path.join(GOLDEN, a)) }));

test('fuzz: configs give a config within the architecture\'s bounds, or one UserError line', () => {
  const tally = new Tally();
  const cfgCase = fc.constantFrom(...configs).chain((c) => fc.tuple(fc.constant(c), jsonMutation(c.json), fc.array(fc.float({ noNaN: true, min: -10, max: 10 }), { minLength: 1, maxLength: 1 })));
  fc.assert(
    fc.property(cfgCase, ([c, json]) => {
      const r = userErrorOr(() => parseConfig(json as Record<string, unknown>, 'config.json'));
      if (!r.ok) return tally.add(`${c.arch}:refused`);
      const cfg = r.value;
      assert.ok(cfg.rmsNormEps > 0 && cfg.rmsNormEps <= 0.1);
      assert.ok(cfg.numLayers >= 1 && cfg.numLayers <= 1024 && cfg.layers.length === cfg.numLayers);
      assert.ok(cfg.moe.topK >= 1 && cfg.moe.topK <= cfg.moe.experts);
      assert.ok(cfg.moe.experts % cfg.moe.groups === 0 && cfg.moe.topkGroup <= cfg.moe.groups);
      assert.ok(cfg.moe.scaling > 0 && cfg.moe.scaling <= 1000);
      if (cfg.mla.rope) assert.ok(cfg.mla.rope.theta > 0 && (!cfg.mla.rope.yarn || cfg.mla.rope.yarn.factor > 0));
      // An accepted config routes without a crash: top-k distinct experts, from random scores.
      const scores = Float32Array.from({ length: cfg.moe.experts }, (_, i) => Math.sin(i * 12.9898 + cfg.moe.topK) * 3);
      const ids = selectTopK(cfg.moe, scores);
      assert.equal(new Set(ids).size, cfg.moe.topK);
      // ... and is checked against the tensors present like `k3 run` / `k3 info` do.
      const v = userErrorOr(() => {
        buildLayout(cfg, c.entries);
        checkTensorsMatchConfig(cfg, c.entries);
      });
      tally.add(`${c.arch}:${v.ok ? 'ok' : 'tensors-refused'}`);
    }),
    { seed: seed(1002), numRuns: runs(3000), includeErrorInReport: true },
  );
  console.log(`configs: ${tally}`);
});

// ---- packed manifests ---------------------------------------------------------------------

test('fuzz: packed manifests index tensors inside their files, or one UserError line', async () => {
  const out = path.join(TMP, 'pack');
  await packCheckpoint({ model: path.join(GOLDEN, 'k2-yarn'), out });
  const file = path.join(out, 'packed.json');
  const intact = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
  const size = (f: string): number => fs.statSync(f).size;
  // Mutate the parts that say where bytes are: files, records, tensors (not the long tensor list's names).
  const small = { ...intact, tensors: Object.fromEntries(Object.entries(intact.tensors as object).slice(0, 6)) };
  const tally = new Tally();
  fc.assert(
    fc.property(jsonMutation(small), (m) => {
      const doc = { ...(m as Record<string, unknown>), tensors: { ...(intact.tensors as object), ...((m as Record<string, unknown>).tensors as object) } };
      // With its digest redone, so that the mutation reaches the structural checks past it.
      fs.writeFileSync(file, JSON.stringify({ ...doc, manifest_sha256: manifestDigest(doc as unknown as PackManifest) }));
      const r = userErrorOr(() => readPackedDir(out));
      tally.add(r.ok ? 'ok' : 'refused');
      if (r.ok) for (const e of r.value.values()) assert.ok(e.offset >= 0 && e.offset + e.nbytes <= size(e.file), `${e.name} inside ${e.file}`);
    }),
    { seed: seed(1003), numRuns: runs(1000), includeErrorInReport: true },
  );
  fs.writeFileSync(file, JSON.stringify(intact));
  console.log(`packed manifests: ${tally}`);
});

// ---- state files --------------------------------------------------------------------------

test('fuzz: damaged state files are refused naming the file; intact ones load the same state', async () => {
  const model = Model.open(path.join(GOLDEN, 'kimi-linear'));
  try {
    const st = model.newState();
    await model.forward(st, [5, 6, 7, 8], 'none');
    const good = path.join(TMP, 'good.k3s');
    saveState(good, model, st, [9]);
    const bytes = fs.readFileSync(good);
    const hlen = bytes.readUInt32LE(12);
    const header = JSON.parse(bytes.subarray(16, 16 + hlen).toString('utf8')) as Record<string, unknown>;
    /** The file with a new header and a checksum that matches: reaches the checks past the checksum. */
    const withHeader = (h: unknown): Buffer => {
      const json = Buffer.from(JSON.stringify(h));
      const pre = Buffer.from(bytes.subarray(0, 16));
      pre.writeUInt32LE(json.length, 12);
      const padOld = (8 - ((16 + hlen) % 8)) % 8;
      const pad = Buffer.alloc((8 - ((16 + json.length) % 8)) % 8);
      const body = Buffer.concat([pre, json, pad, bytes.subarray(16 + hlen + padOld, bytes.length - 32)]);
      return Buffer.concat([body, createHash('sha256').update(body).digest()]);
    };
    const damage = fc.oneof(
      fc.tuple(fc.nat(bytes.length - 1), fc.integer({ min: 1, max: 255 })).map(([i, x]) => ({ kind: 'flip', b: Buffer.from(bytes).fill(bytes[i]! ^ x, i, i + 1) })),
      fc.nat(bytes.length - 1).map((n) => ({ kind: 'cut', b: bytes.subarray(0, n) })),
      fc.uint8Array({ minLength: 1, maxLength: 64 }).map((x) => ({ kind: 'extend', b: Buffer.concat([bytes, x]) })),
      jsonMutation(header).map((h) => ({ kind: 'header', b: withHeader(h) })),
    );
    const tally = new Tally();
    const file = path.join(TMP, 'case.k3s');
    fc.assert(
      fc.property(damage, (c) => {
        fs.writeFileSync(file, c.b);
        const r = userErrorOr(() => loadState(file, model));
        tally.add(`${c.kind}:${r.ok ? 'ok' : 'refused'}`);
        if (!r.ok) return assert.ok(r.message.includes(file), r.message);
        assert.ok(c.kind === 'header', `a ${c.kind} file is never accepted`);
        assert.deepEqual(r.value.state.tokens.slice(0, 4), [5, 6, 7, 8]);
      }),
      { seed: seed(1004), numRuns: runs(1000), includeErrorInReport: true },
    );
    console.log(`state files: ${tally}`);
  } finally {
    await model.close();
  }
});

// ---- tokenizer inputs ---------------------------------------------------------------------

test('fuzz: any text encodes and decodes back to itself (Kimi tokenizer)', () => {
  const tok = new Tokenizer(readFixture(TOKENIZER, 'tiktoken.model'), readFixture(TOKENIZER, 'k3/tokenizer_config.json'));
  const text = fc.oneof(fc.string({ unit: 'grapheme', maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ unit: fc.constantFrom(' ', '\n', '\t', 'a', '1', "'s", '<|', '|>', '<|im_end|>', '中', '🙂'), maxLength: 30 }));
  let n = 0;
  fc.assert(
    fc.property(text, (s) => {
      const ids = tok.encodeOrdinary(s);
      assert.ok(ids.every((i) => Number.isInteger(i) && i >= 0));
      // Lone surrogates are not UTF-8: they come back as U+FFFD, as from any UTF-8 round trip.
      assert.equal(tok.decode(ids), Buffer.from(s, 'utf8').toString('utf8'));
      n++;
    }),
    { seed: seed(1005), numRuns: runs(2000), includeErrorInReport: true },
  );
  console.log(`tokenizer inputs: ${n} round trips`);
});

// ---- CLI flags ----------------------------------------------------------------------------

test('fuzz: CLI flags parse to values in range, or one UserError line', () => {
  const options = { ids: { type: 'string' }, gen: { type: 'string' }, json: { type: 'boolean' }, ...SAMPLING_OPTIONS, ...MODEL_OPTIONS } as const;
  const names = Object.keys(options);
  const value = fc.oneof(fc.constantFrom('0', '1', '-1', '1.5', '1e3', 'NaN', 'inf', '', ' ', '2G', '512M', '1,2,3', '9'.repeat(30), '0x10', '--x'), fc.string({ maxLength: 8 }));
  const arg = fc.oneof(fc.constantFrom(...names).map((n) => `--${n}`), value, fc.constantFrom(...names).chain((n) => value.map((v) => `--${n}=${v}`)));
  const tally = new Tally();
  fc.assert(
    fc.property(fc.array(arg, { maxLength: 6 }), (args) => {
      const r = userErrorOr(() => {
        const { values } = parse('run', args, options);
        const v = values as Record<string, string | undefined>;
        if (v.ids !== undefined) parseIds('run', v.ids);
        for (const f of ['gen', 'chunk', 'ctx', 'threads'] as const) parseIntFlag('run', f, v[f], 1, 1);
        if (v.memory !== undefined) parseSize(v.memory);
        new Sampler(samplingFromFlags('run', v));
      });
      tally.add(r.ok ? 'ok' : 'refused');
    }),
    { seed: seed(1006), numRuns: runs(1500), includeErrorInReport: true },
  );
  console.log(`CLI flags: ${tally}`);
});

test('the fuzz inputs come from the real files', () => {
  assert.equal(readSafetensorsHeader(ST_FILE).length > 0, true);
  assert.equal(loadConfig(path.join(GOLDEN, 'k3')).arch, 'k3');
});
