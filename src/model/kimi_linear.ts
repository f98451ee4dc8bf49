// Kimi Linear (docs/spec/ARCHITECTURE.md §3.9): the same pre-norm residual layer as K2, with KDA on the
// layers not in full_attn_layers and NoPE MLA on the rest; dense layer 0, MoE after.
// The layer map lives in the config, so the pass itself is K2's.

export { forwardK2 as forwardKimiLinear } from './k2.js';
