// Everything a sequence carries between forward calls (docs/DESIGN.md "State of a sequence"):
// per KDA layer the f32 recurrent state and conv tails, per MLA layer the latent cache, and the
// token ids so far. AttnRes keeps nothing across positions.

import type { ModelConfig } from '../checkpoint/config.js';
import type { StateSize } from '../store/plan.js';
import { kdaStateFloats, newKdaState, startKdaSweep, type F32Alloc, type KdaState } from './kda.js';
import { MlaCache, mlaFloatsPerPosition } from './mla.js';

export class SequenceState {
  readonly tokens: number[] = [];
  readonly kda: (KdaState | null)[];
  readonly mla: (MlaCache | null)[];
  /** Position where the speculative sweep in progress started (Model.startSweep), or null. */
  sweepStart: number | null = null;

  /**
   * @param ctx positions the MLA caches are allocated for up front (they grow past it if needed).
   * @param alloc where the state arrays live, e.g. a model's kernel memory (Model.newState passes
   *   its Compute.allocF32), so the WebAssembly KDA and MLA kernels of that model work on them in
   *   place. Default (undefined or null): plain arrays (the JavaScript reference). The numbers are
   *   the same either way.
   */
  constructor(readonly cfg: ModelConfig, ctx = 64, alloc: F32Alloc | null = null) {
    const k = cfg.kda;
    this.kda = cfg.layers.map((L) => (L.attn === 'kda' ? newKdaState({ heads: k!.heads, headDim: k!.headDim, convSize: k!.convSize, gateLowerBound: k!.gateLowerBound, eps: cfg.rmsNormEps }, alloc) : null));
    this.mla = cfg.layers.map((L) => (L.attn === 'mla' ? new MlaCache(cfg.mla.kvLoraRank, cfg.mla.ropeDim, ctx, alloc) : null));
  }

  /** Number of positions already processed. */
  get position(): number {
    return this.tokens.length;
  }

  /** Record what cutting the next forward calls back needs (Model.startSweep / endSweep). */
  startSweep(): void {
    if (this.sweepStart !== null) throw new Error('a sweep is already in progress');
    this.sweepStart = this.position;
    for (const k of this.kda) if (k) startKdaSweep(k);
  }

  /** Back to the start of a sequence, keeping the memory (state in kernel memory is never freed). */
  clear(): void {
    this.sweepStart = null;
    for (const k of this.kda) {
      if (!k) continue;
      k.S.fill(0);
      k.conv.fill(0);
      k.sweep = null;
    }
    for (const m of this.mla) if (m) m.length = 0;
    this.tokens.length = 0;
  }
}

/**
 * The sequences of one forward pass (Model.forwardBatch): each with its own state and its number
 * of rows, back to back in row order.
 */
export type Batch = readonly { state: SequenceState; T: number }[];

/**
 * Bytes of one sequence's state, from the same functions that size its allocations (kda.ts
 * kdaStateFloats, mla.ts mlaFloatsPerPosition): what the memory plan counts is what is allocated.
 */
export function stateSize(cfg: ModelConfig): StateSize {
  let perSequence = 0;
  let perPosition = 0;
  for (const L of cfg.layers) {
    if (L.attn === 'kda') {
      const f = kdaStateFloats(cfg.kda!);
      perSequence += (f.S + f.conv + f.work) * 4;
    } else {
      perPosition += mlaFloatsPerPosition(cfg.mla.kvLoraRank, cfg.mla.ropeDim) * 4;
    }
  }
  return { perSequenceBytes: perSequence, perPositionBytes: perPosition };
}
