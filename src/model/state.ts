// Everything a sequence carries between forward calls (design/ENGINE.md "State of a sequence"):
// per KDA layer the f32 recurrent state and conv tails, per MLA layer the latent cache, and the
// token ids so far. AttnRes keeps nothing across positions.

import type { ModelConfig } from '../checkpoint/config.js';
import { newKdaState, type KdaState } from './kda.js';
import { MlaCache } from './mla.js';

export class SequenceState {
  readonly tokens: number[] = [];
  readonly kda: (KdaState | null)[];
  readonly mla: (MlaCache | null)[];

  /** @param ctx positions the MLA caches are allocated for up front (they grow past it if needed). */
  constructor(readonly cfg: ModelConfig, ctx = 64) {
    const k = cfg.kda;
    this.kda = cfg.layers.map((L) => (L.attn === 'kda' ? newKdaState({ heads: k!.heads, headDim: k!.headDim, convSize: k!.convSize, gateLowerBound: k!.gateLowerBound, eps: cfg.rmsNormEps }) : null));
    this.mla = cfg.layers.map((L) => (L.attn === 'mla' ? new MlaCache(cfg.mla.kvLoraRank, cfg.mla.ropeDim, ctx) : null));
  }

  /** Number of positions already processed. */
  get position(): number {
    return this.tokens.length;
  }
}
