// util/format.ts and util/progress.ts: the strings the CLI prints for sizes, ETAs and progress.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatBytes, formatDecimalBytes, formatEta, formatGB, formatMiB } from '../../src/util/format.js';
import { progressBar, progressLine } from '../../src/util/progress.js';

test('formatBytes: GiB with 2 decimals, MiB with 1, below 1 MiB KiB', () => {
  assert.equal(formatBytes(3 * 2 ** 30), '3.00 GiB');
  assert.equal(formatBytes(512 * 2 ** 20), '512.0 MiB');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(512), '0.5 KiB');
});

test('formatMiB, formatGB, formatDecimalBytes', () => {
  assert.equal(formatMiB(300 * 2 ** 20), '300 MiB');
  assert.equal(formatGB(1.5e9), '1.50 GB');
  assert.equal(formatDecimalBytes(2.345e9), '2.35 GB');
  assert.equal(formatDecimalBytes(4.5e6), '4.50 MB');
  assert.equal(formatDecimalBytes(780), '0.8 kB');
});

test('formatEta', () => {
  assert.equal(formatEta(Infinity), '?');
  assert.equal(formatEta(12.4), '12s');
  assert.equal(formatEta(185), '3m05s');
  assert.equal(formatEta(3720), '1h02m');
});

function fakeStream(isTTY: boolean): NodeJS.WriteStream & { out: string } {
  const s = { isTTY, out: '', write(chunk: string) { s.out += chunk; return true; } };
  return s as unknown as NodeJS.WriteStream & { out: string };
}

test('progressBar: redraws in place on a TTY, newline at the end; silent when piped', () => {
  const tty = fakeStream(true);
  const bar = progressBar('pack', tty);
  bar.update(0, 4 * 2 ** 20);
  bar.update(4 * 2 ** 20, 4 * 2 ** 20);
  bar.end();
  const draws = tty.out.split('\r').slice(1);
  /* eslint-disable no-control-regex -- the bar ends each draw with ESC [K */
  assert.equal(draws.length, 2);
  assert.match(draws[0]!, /^pack \[\.{24}\] {3}0% {2}0\.0 KiB \/ 4\.0 MiB {2}0\.0 KiB\/s {2}ETA \?\x1b\[K$/);
  assert.match(draws[1]!, /^pack \[#{24}\] 100% {2}4\.0 MiB \/ 4\.0 MiB {2}.*\/s {2}ETA 0s\x1b\[K\n$/);
  /* eslint-enable no-control-regex */

  const pipe = fakeStream(false);
  const quiet = progressBar('pack', pipe);
  quiet.update(1, 2);
  quiet.update(2, 2);
  quiet.end();
  assert.equal(pipe.out, '');
});

test('progressLine: plain lines when piped if asked, throttled but always the last', () => {
  const pipe = fakeStream(false);
  const line = progressLine((d, t) => `${d}/${t}`, { stream: pipe, pipeIntervalMs: 60_000 });
  line.update(1, 3);
  line.update(2, 3);
  line.update(3, 3);
  line.end();
  assert.equal(pipe.out, '1/3\n3/3\n');
});
