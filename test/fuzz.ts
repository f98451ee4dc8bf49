// Shared pieces of the property-based fuzz tests (fuzz-*.test.ts): fixed seeds so every run
// repeats, case counts scaled by FUZZ_RUNS (`npm run fuzz`), and the one property every case must
// have: it ends in a result, or in a UserError (one line for the CLI); anything else is a crash.

import assert from 'node:assert/strict';
import * as fc from 'fast-check';
import { UserError } from '../src/util/errors.js';

/** Cases of all fuzz tests together at the default scale (the test suite's share). */
export const BASE_TOTAL = 12_246; // 11,500 in-process (fuzz-parse) + 300 (verified-reader) + 40 spawned (fuzz-cli) + 400 HTTP bodies (fuzz-http) + 6 server batches (fuzz-serve)

/** The runs of one property: its default count, times FUZZ_RUNS / BASE_TOTAL when set (at most `maxScale` times, for properties that spawn processes). */
export function runs(base: number, maxScale = Infinity): number {
  const want = Number(process.env.FUZZ_RUNS ?? '');
  return Number.isFinite(want) && want > 0 ? Math.max(1, Math.round(base * Math.min(maxScale, want / BASE_TOTAL))) : base;
}

/** Fixed seed per property (FUZZ_SEED shifts them all, to explore other cases on purpose). */
export function seed(n: number): number {
  return n + Number(process.env.FUZZ_SEED ?? 0);
}

/** Counts by outcome, printed by the tests (they go into the note). */
export class Tally {
  readonly counts = new Map<string, number>();
  add(outcome: string): void {
    this.counts.set(outcome, (this.counts.get(outcome) ?? 0) + 1);
  }
  toString(): string {
    return [...this.counts].map(([k, v]) => `${k} ${v}`).join(', ');
  }
}

/** Run `fn`; a UserError is an accepted outcome (returns its message), anything else fails the case. */
export function userErrorOr<T>(fn: () => T): { ok: true; value: T } | { ok: false; message: string } {
  try {
    return { ok: true, value: fn() };
  } catch (e) {
    if (e instanceof UserError) {
      assert.ok(!e.message.includes('\n'), `one line: ${e.message}`);
      return { ok: false, message: e.message };
    }
    throw e;
  }
}

export async function userErrorOrAsync<T>(fn: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false; message: string }> {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    if (e instanceof UserError) {
      assert.ok(!e.message.includes('\n'), `one line: ${e.message}`);
      return { ok: false, message: e.message };
    }
    throw e;
  }
}

/** JSON values a hostile edit might put in a field. */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(0, -1, 1, 2, -0.5, 1e-30, 1e9, 1e300, -1e300, 0.5, 3, 7, 64, 4096, 65536, 2 ** 53, null, true, false, '', '1', 'yarn', [], {}),
  fc.integer({ min: -5, max: 300 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.jsonValue({ maxDepth: 3 }),
);

/** Every path (list of keys) to a leaf or object of a JSON value, objects only (not into arrays). */
export function jsonPaths(v: unknown, prefix: string[] = [], out: string[][] = []): string[][] {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) {
      out.push([...prefix, k]);
      jsonPaths(x, [...prefix, k], out);
    }
  }
  return out;
}

/** A deep copy of `v` with the value at `p` set (undefined: deleted). */
export function setPath(v: unknown, p: string[], value: unknown): unknown {
  const copy = structuredClone(v) as Record<string, unknown>;
  let o: Record<string, unknown> = copy;
  for (const k of p.slice(0, -1)) {
    const next = o[k];
    if (!next || typeof next !== 'object') return copy;
    o = next as Record<string, unknown>;
  }
  if (value === undefined) delete o[p[p.length - 1]!];
  else o[p[p.length - 1]!] = value;
  return copy;
}

/** A mutation of a JSON document: 1..3 fields set to hostile values or deleted. */
export function jsonMutation(doc: unknown): fc.Arbitrary<unknown> {
  const paths = jsonPaths(doc);
  const edit = fc.tuple(fc.constantFrom(...paths), fc.option(hostileValue, { freq: 8, nil: undefined }));
  return fc.array(edit, { minLength: 1, maxLength: 3 }).map((edits) => edits.reduce((d, [p, v]) => setPath(d, p, v), doc));
}
