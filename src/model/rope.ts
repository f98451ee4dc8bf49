// Rotary embedding with YaRN for architecture A (K2 / DeepSeek-V3), docs/spec/ARCHITECTURE.md §1.6.
// Interleaved ("GPT-J") pairs (x[2i], x[2i+1]); frequencies and angles in double.

import type { YarnConfig } from '../checkpoint/config.js';

export interface Rope {
  /** f'_i for i < d/2. */
  freqs: Float64Array;
  /** cos/sin amplitude A (1 for every Kimi config). */
  amplitude: number;
}

function yarnMscale(s: number, k: number): number {
  return s <= 1 ? 1 : 0.1 * k * Math.log(s) + 1;
}

export function makeRope(d: number, theta: number, yarn: YarnConfig | null): Rope {
  const half = d / 2;
  const freqs = new Float64Array(half);
  for (let i = 0; i < half; i++) freqs[i] = theta ** ((-2 * i) / d);
  if (!yarn) return { freqs, amplitude: 1 };
  const s = yarn.factor;
  const L0 = yarn.originalMaxPosition;
  const cdim = (r: number) => (d * Math.log(L0 / (2 * Math.PI * r))) / (2 * Math.log(theta));
  const lo = Math.max(Math.floor(cdim(yarn.betaFast)), 0);
  let hi = Math.min(Math.ceil(cdim(yarn.betaSlow)), d - 1);
  if (lo === hi) hi += 0.001;
  for (let i = 0; i < half; i++) {
    const ramp = Math.min(Math.max((i - lo) / (hi - lo), 0), 1);
    const keep = 1 - ramp;
    freqs[i] = (freqs[i]! / s) * (1 - keep) + freqs[i]! * keep;
  }
  const amplitude = yarn.mscaleAllDim ? yarnMscale(s, yarn.mscale) / yarnMscale(s, yarn.mscaleAllDim) : yarnMscale(s, yarn.mscale);
  return { freqs, amplitude };
}

/** Softmax scale multiplier for YaRN models: m(s, mscale_all_dim)² (docs/spec/ARCHITECTURE.md §1.7.4). */
export function yarnScaleFactor(yarn: YarnConfig | null): number {
  if (!yarn || !yarn.mscaleAllDim) return 1;
  const m = yarnMscale(yarn.factor, yarn.mscaleAllDim);
  return m * m;
}

/** Rotate x[o .. o+d) in place for position pos. */
export function applyRope(r: Rope, x: Float32Array, o: number, pos: number): void {
  const half = r.freqs.length;
  for (let i = 0; i < half; i++) {
    const ang = pos * r.freqs[i]!;
    const c = Math.cos(ang) * r.amplitude;
    const s = Math.sin(ang) * r.amplitude;
    const a = x[o + 2 * i]!;
    const b = x[o + 2 * i + 1]!;
    x[o + 2 * i] = a * c - b * s;
    x[o + 2 * i + 1] = b * c + a * s;
  }
}
