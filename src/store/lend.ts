// A trunk matrix lent as a Mat: resident (one view) or in resident blocks once its pinned pieces
// are read, else streamed, its pieces acquired and released around each visit.

import type { Piece, TrunkMatrixLayout } from './layout.js';
import type { Block, Lease, Mat } from './mat.js';
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
  const streamed: Lease = {
    kind: 'streamed',
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
  // A pinned single-piece matrix stays put for the store's life: its view may be batched.
  const resident = m.pieces.length === 1 && trunk.isPinned(m.pieces[0]!.seq);
  // Its one view once read: a pinned single piece, or a split matrix pinned in one buffer (Trunk.pinBuffer).
  const one = resident ? held(s, () => trunk.pinnedView(m.pieces[0]!, base)) : trunk.togetherEligible(m) ? held(s, () => trunk.wholeView(m, base)) : null;
  // Every piece of a split matrix pinned: its blocks may be batched too (one dispatch, not one each).
  const blocks = trunk.splitPinned(m) ? heldBlocks(s, trunk, m, base) : null;
  return {
    name: base,
    rows: m.rows,
    cols: m.cols,
    format: m.format,
    resident,
    lease: () => one?.() ?? blocks?.() ?? streamed,
  };
}

/** A resident lease of the view `get` finds, kept once found; none while the store is traced
 *  (a traced store lends through acquire, so that every use is traced). */
function held(s: StoreParts, get: () => Block['view'] | null): () => Lease | null {
  let lease: Lease | null = null;
  return () => {
    if (s.trace()) return null;
    if (!lease) {
      const view = get();
      if (view) lease = { kind: 'resident', view };
    }
    return lease;
  };
}

/** The blocks lease of a split matrix whose every piece is pinned, once all are read. */
function heldBlocks(s: StoreParts, trunk: Trunk, m: TrunkMatrixLayout, base: string): () => Lease | null {
  let lease: Lease | null = null;
  return () => {
    if (s.trace()) return null;
    if (lease) return lease;
    const out: Block[] = [];
    for (const p of m.pieces) {
      const v = trunk.pinnedView(p, base);
      if (!v) return null;
      out.push({ view: v, r0: p.r0 });
    }
    lease = { kind: 'blocks', blocks: out };
    return lease;
  };
}
