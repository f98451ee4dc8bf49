// kda_block: the whole KDA block of T tokens after the projections, heads [h0, h1), one word: its
// parameter block (wasm/kda-block.ts, which emits it around kda_step and documents the block).

import { addKdaBlock, KDA_BLOCK_BYTES, KDA_BLOCK_WORDS, KDA_BLOCK_F64, type KdaBlockArgs } from '../wasm/kda-block.js';
import type { OpDef } from './op.js';

/** What the parameter block needs of a chain's kernels (chain.ts ChainPort). */
interface KdaArena {
  contains(a: ArrayBufferView): boolean;
  allocOffset(bytes: number, alignment?: number): number;
  mem(): ArrayBufferLike;
}

/** The offset of a[0 .. n): in place, or copied into the arena. */
function f32In(k: KdaArena, a: Float32Array, n: number, what: string): number {
  if (a.length < n) throw new RangeError(`${what}: ${a.length} values, need ${n}`);
  const s = a.length === n ? a : a.subarray(0, n);
  if (k.contains(s)) return s.byteOffset;
  const off = k.allocOffset(s.byteLength);
  new Float32Array(k.mem(), off, n).set(s);
  return off;
}

export const KDA_BLOCK: OpDef = {
  name: 'kda_block',
  summary: 'KDA block of T tokens: short conv, L2, decay, β, delta rule, gated norm',
  args: [{ name: 'pb', kind: 'i32', shape: '32', io: 'in', doc: 'parameter block (KDA_BLOCK_WORDS, then f64 eps, λ, qScale, A[H])' }],
  split: { unit: 'heads', range: 'H' },
  place: 'S, the conv tails and work (the sequence state) in kernel memory, else the reference runs; the rest is copied in',
  refNote: 'kdaBlockRef (src/graph/reference.ts); test/kernels/kda-block.test.ts',
  emit(cx) {
    addKdaBlock(cx.fnx, cx.fn('kda_step'));
  },
};

/** The KDA block's parameter block in the arena (inputs outside kernel memory copied in; y in it): its offset, and the work it is. */
export function kdaParams(k: KdaArena, a: KdaBlockArgs): { pb: number; macs: number } {
  const { H, d, W, T } = a;
  const P = H * d;
  if (!k.contains(a.S) || !k.contains(a.conv) || !k.contains(a.work)) throw new RangeError('kdaBlock: the state must lie in kernel memory');
  if (a.S.length < P * d || a.conv.length < 3 * (W - 1) * P || a.work.length < 5 * P + H) throw new RangeError('kdaBlock: state too small');
  if (a.A.length < H) throw new RangeError('kdaBlock: A too short');
  if (a.y.length < T * P) throw new RangeError(`kda y: ${a.y.length} values, need ${T * P}`);
  const pb = k.allocOffset(KDA_BLOCK_BYTES + 8 * H, 16);
  const w: Record<(typeof KDA_BLOCK_WORDS)[number], number> = {
    S: a.S.byteOffset, conv: a.conv.byteOffset, work: a.work.byteOffset,
    qr: f32In(k, a.qr, T * P, 'kda qr'), kr: f32In(k, a.kr, T * P, 'kda kr'), vr: f32In(k, a.vr, T * P, 'kda vr'),
    z: f32In(k, a.zOrAlpha, T * P, 'kda z'), b: f32In(k, a.b, T * H, 'kda b'), gamma: f32In(k, a.gamma, T * P, 'kda gamma'),
    y: a.y.byteOffset,
    qConv: f32In(k, a.qConv, P * W, 'kda qConv'), kConv: f32In(k, a.kConv, P * W, 'kda kConv'), vConv: f32In(k, a.vConv, P * W, 'kda vConv'),
    dtBias: f32In(k, a.dtBias, P, 'kda dtBias'), A: pb + KDA_BLOCK_BYTES, oNorm: f32In(k, a.oNorm, d, 'kda oNorm'),
    d, H, W, T, mode: a.mode === 'bounded' ? 1 : 0,
  };
  const buf = k.mem();
  const words = new Int32Array(buf, pb, KDA_BLOCK_WORDS.length);
  KDA_BLOCK_WORDS.forEach((k, i) => (words[i] = w[k]));
  const f = new Float64Array(buf, pb, KDA_BLOCK_BYTES / 8 + H);
  f[KDA_BLOCK_F64.eps / 8] = a.eps;
  f[KDA_BLOCK_F64.lambda / 8] = a.lambda;
  f[KDA_BLOCK_F64.qScale / 8] = a.qScale;
  f.set(a.A.subarray(0, H), KDA_BLOCK_BYTES / 8);
  // work per head and token: the delta rule's 2·d² plus the element-wise pieces (~8 exps per channel)
  return { pb, macs: T * (2 * P * d + 64 * P) };
}
