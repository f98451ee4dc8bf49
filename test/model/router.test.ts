// The router's top-K selection (src/model/router.ts selectTopK, one pass by insertion) against the
// definition it replaced: all allowed experts sorted by score, descending, ties to the lower index.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { selectTopK } from '../../src/model/router.js';
import { xorshift } from '../helpers.js';

/** The definition: sort every allowed expert (group limiting as selectTopK does it). */
function bySort(cfg: { experts: number; topK: number; groups: number; topkGroup: number }, c: Float32Array): number[] {
  const E = cfg.experts, per = E / cfg.groups;
  let allowed: boolean[] | null = null;
  if (cfg.groups > 1 && cfg.topkGroup < cfg.groups) {
    const gs = Array.from({ length: cfg.groups }, (_, g) => {
      const v = Array.from(c.subarray(g * per, (g + 1) * per)).sort((a, b) => b - a);
      return per > 1 ? v[0]! + v[1]! : v[0]!;
    });
    const keep = new Set([...gs.keys()].sort((a, b) => gs[b]! - gs[a]! || a - b).slice(0, cfg.topkGroup));
    allowed = Array.from({ length: E }, (_, e) => keep.has(Math.floor(e / per)));
  }
  const idx = [...Array(E).keys()].filter((e) => !allowed || allowed[e]);
  idx.sort((a, b) => c[b]! - c[a]! || a - b);
  return idx.slice(0, cfg.topK);
}

test('selectTopK == sorting every allowed expert (descending, ties to the lower index): K3, Kimi Linear, K2 shapes, many ties', () => {
  const rnd = xorshift(0x70b1c);
  const shapes = [
    { experts: 896, topK: 16, groups: 1, topkGroup: 1 },
    { experts: 256, topK: 8, groups: 1, topkGroup: 1 },
    { experts: 256, topK: 8, groups: 8, topkGroup: 4 },
    { experts: 64, topK: 8, groups: 1, topkGroup: 1 },
    { experts: 8, topK: 2, groups: 2, topkGroup: 1 },
    { experts: 5, topK: 5, groups: 1, topkGroup: 1 },
  ];
  for (const cfg of shapes) {
    for (let r = 0; r < 200; r++) {
      // few distinct values (ties everywhere), or continuous ones, with signed zeros
      const levels = r % 2 ? 4 : 0;
      const c = new Float32Array(cfg.experts).map(() => {
        const v = levels ? Math.floor(rnd() * levels) / levels : rnd() - 0.5;
        return v === 0 && rnd() < 0.5 ? -0 : v;
      });
      assert.deepEqual(Array.from(selectTopK(cfg, c)), bySort(cfg, c), `${JSON.stringify(cfg)} run ${r}`);
    }
  }
});
