// A trunk matrix lent as a Mat: its pieces acquired and released around each visit (the ring's
// pieces are streamed), or, once read, its resident views without waiting.

import type { WeightView } from '../formats/weight.js';
import type { Piece, TrunkMatrixLayout } from './layout.js';
import type { Mat } from './mat.js';
import type { StoreParts } from './parts.js';
import type { Trunk } from './trunk.js';

/** Trunk matrix m (named `base`) as a Mat. */
export function lendMatrix(s: StoreParts, trunk: Trunk, m: TrunkMatrixLayout, base: string): Mat {
  const acquire = async (p: Piece) => {
    const buf = await trunk.acquire(p);
    s.trace()?.({ kind: 'use-matrix', name: base, row: p.r0 });
    return buf;
  };
  const view = (p: Piece, buf: Uint8Array) => trunk.viewOf(p, buf, base);
  // A pinned single-piece matrix stays put for the store's life: its view may be batched.
  const resident = m.pieces.length === 1 && m.pieces[0]!.seq < s.plan.pinnedPieces;
  // a traced store lends through acquire, so that every use is traced
  const held = <T>(get: () => T | null): (() => T | null) => {
    let v: T | null = null;
    return () => (s.trace() ? null : (v ??= get()));
  };
  const now = held(() => trunk.pinnedView(m.pieces[0]!, base));
  // A split matrix pinned in one buffer (Trunk.pinBuffer): one view once every piece is read.
  const wholeNow = held(() => trunk.wholeView(m, base));
  // Every piece of a split matrix pinned: its blocks may be batched too (one dispatch, not one each).
  const partsNow = held(() => {
    const out: { view: WeightView; r0: number }[] = [];
    for (const p of m.pieces) {
      const v = trunk.pinnedView(p, base);
      if (!v) return null;
      out.push({ view: v, r0: p.r0 });
    }
    return out;
  });
  return {
    name: base,
    rows: m.rows,
    cols: m.cols,
    format: m.format,
    resident,
    ...(resident ? { now } : trunk.togetherEligible(m) ? { now: wholeNow } : {}),
    ...(trunk.splitPinned(m) ? { partsNow } : {}),
    async parts(fn) {
      for (const p of m.pieces) {
        const buf = await acquire(p);
        try {
          fn(view(p, buf), p.r0);
        } finally {
          trunk.release(p);
        }
      }
    },
    async whole(fn) {
      if (m.pieces.length !== 1) throw new Error(`${base}: whole() on a matrix split into ${m.pieces.length} pieces`);
      const p = m.pieces[0]!;
      const buf = await acquire(p);
      try {
        return fn(view(p, buf));
      } finally {
        trunk.release(p);
      }
    },
  };
}
