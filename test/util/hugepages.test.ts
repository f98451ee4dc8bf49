// Transparent huge pages: the mode read from sysfs, and the hint k3 bench / k3 plan print.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { thpHint, thpMode } from '../../src/util/hugepages.js';

test('thpMode reads the bracketed mode of the sysfs file; thpHint speaks only when the kernels get 4 KiB pages', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-thp-'));
  try {
    const f = path.join(dir, 'enabled');
    for (const [text, mode] of [['always [madvise] never\n', 'madvise'], ['[always] madvise never\n', 'always'], ['always madvise [never]\n', 'never']] as const) {
      fs.writeFileSync(f, text);
      assert.equal(thpMode(f), mode);
    }
    fs.writeFileSync(f, 'garbage\n');
    assert.equal(thpMode(f), null);
    assert.equal(thpMode(path.join(dir, 'missing')), null);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(thpHint('always'), null);
  assert.equal(thpHint(null), null);
  assert.match(thpHint('madvise')!, /'madvise'.*4 KiB pages.*echo always/);
  assert.match(thpHint('never')!, /'never'/);
});
