// Kimi Linear config.json (docs/spec/ARCHITECTURE.md §3.1): KDA and NoPE MLA layers by the 1-based lists of
// linear_attn_config, Moonshot's renames of DeepSeek's MoE fields.

import type { ModelConfig } from './config-types.js';
import { finishConfig, layerSpecs, readAct, readKda, readLayerMap, readMla, readMoe, readNoPE, readTrunk, type ConfigSource } from './config-sections.js';

export function parseKimiLinearConfig(src: ConfigSource): ModelConfig {
  const { r } = src;
  const trunk = readTrunk(r);
  const { attnOf, fullAttnLayers } = readLayerMap(src, trunk.numLayers);
  const layers = layerSpecs(attnOf, trunk.firstDense);
  const mla = readMla(src, trunk.rmsNormEps, false, readNoPE);
  const kda = readKda(src, attnOf);
  const act = readAct(r);
  // docs/spec/ARCHITECTURE.md §3.6: the HF remote code's biased routing weights, on request only.
  const moe = readMoe(r, { naming: 'kimi', latent: false, biasedWeights: src.overrides.kimiLinearBiasedWeights === true });
  return finishConfig(src, { arch: 'kimi_linear', trunk, layers, fullAttnLayers, mla, kda, act, moe, attnRes: false });
}
