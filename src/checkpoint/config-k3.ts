// Kimi K3 config.json (docs/spec/ARCHITECTURE.md §4.1, docs/spec/K3.md §2): Kimi Linear's fields in text_config plus the
// bounded KDA gate, the gated MLA output, the latent MoE and Attention Residuals.

import type { ModelConfig } from './config-types.js';
import { finishConfig, layerSpecs, readAct, readKda, readLayerMap, readMla, readMoe, readNoPE, readTrunk, type ConfigSource } from './config-sections.js';

export function parseK3Config(src: ConfigSource): ModelConfig {
  const { r } = src;
  const trunk = readTrunk(r);
  const { attnOf, fullAttnLayers } = readLayerMap(src, trunk.numLayers);
  const layers = layerSpecs(attnOf, trunk.firstDense);
  const mla = readMla(src, trunk.rmsNormEps, true, readNoPE);
  const kda = readKda(src, attnOf);
  if (!kda || kda.gateLowerBound === null) r.fail('K3 needs linear_attn_config.gate_lower_bound');
  const act = readAct(r);
  const moe = readMoe(r, { naming: 'kimi', latent: true, biasedWeights: false });
  return finishConfig(src, { arch: 'k3', trunk, layers, fullAttnLayers, mla, kda, act, moe, attnRes: true });
}
