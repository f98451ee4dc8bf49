// Copying a sequence state, so that a prompt's state can be kept for later requests while its
// own request goes on decoding (prefix reuse, prefix-cache.ts). The copy is byte for byte the
// original: continuing either gives the same logits (docs/NUMERICS.md).

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';

/** A new state of `model` (from its spare pool when it has one) holding what `src` holds. */
export function forkState(model: Model, src: SequenceState): SequenceState {
  if (src.sweepStart !== null) throw new Error('forkState: a speculative sweep is in progress');
  const dst = model.newState();
  src.kda.forEach((k, i) => {
    const d = dst.kda[i];
    if (!k || !d) return;
    d.S.set(k.S);
    d.conv.set(k.conv);
  });
  src.mla.forEach((m, i) => {
    const d = dst.mla[i];
    if (!m || !d) return;
    d.reserve(m.length);
    d.lat.set(m.lat.subarray(0, m.length * m.Lk));
    d.rope.set(m.rope.subarray(0, m.length * m.dr));
    d.length = m.length;
  });
  dst.tokens.push(...src.tokens);
  return dst;
}

/** Bytes a state holds: its KDA part and its MLA cache for the positions it has. */
export function stateBytes(s: SequenceState): number {
  let n = 0;
  for (const k of s.kda) if (k) n += (k.S.length + k.conv.length + (k.work?.length ?? 0)) * 4;
  for (const m of s.mla) if (m) n += (m.lat.length + m.rope.length) * 4;
  return n;
}
