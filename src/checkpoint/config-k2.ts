// Kimi K2 / DeepSeek-V3 / Kimi K2.5 config.json (docs/spec/ARCHITECTURE.md §2.1): every layer MLA with
// YaRN rope, DeepSeek's MoE field names; K2.5 (`kimi_k25`) nests the same decoder in text_config.

import type { ModelConfig, YarnConfig } from './config-types.js';
import { LIMITS, Reader } from './config-reader.js';
import { finishConfig, layerSpecs, readAct, readMla, readMoe, readTrunk, type ConfigSource } from './config-sections.js';

export function parseK2Config(src: ConfigSource): ModelConfig {
  const { r } = src;
  const trunk = readTrunk(r);
  const layers = layerSpecs(new Array(trunk.numLayers).fill('mla'), trunk.firstDense);
  const mla = readMla(src, trunk.rmsNormEps, false, (rr) => ({ theta: rr.range('rope_theta', rr.num('rope_theta'), 0, 1e12, true), yarn: readYarn(src) }));
  const act = readAct(r);
  const moe = readMoe(r, { naming: 'k2', latent: false, biasedWeights: false });
  return finishConfig(src, { arch: 'k2', trunk, layers, fullAttnLayers: null, mla, kda: null, act, moe, attnRes: false });
}

/** rope_scaling (docs/spec/ARCHITECTURE.md §1.6), or null when the config has none. */
function readYarn(src: ConfigSource): YarnConfig | null {
  const { r, file } = src;
  const rs = r.obj('rope_scaling');
  if (!rs) return null;
  const type = rs.type ?? rs.rope_type;
  if (type !== 'yarn') r.fail(`rope_scaling.type ${JSON.stringify(type)} is not supported (only "yarn")`);
  const rr = new Reader(file, [{ obj: rs, path: 'rope_scaling.' }]);
  const yarn: YarnConfig = {
    factor: rr.range('rope_scaling.factor', rr.num('factor'), 0, 1e4, true),
    originalMaxPosition: rr.range('rope_scaling.original_max_position_embeddings', rr.pos('original_max_position_embeddings'), 1, LIMITS.positions),
    // Rotations per wavelength bounds; a negative mscale would shrink (or flip) the rope amplitude.
    betaFast: rr.range('rope_scaling.beta_fast', rr.optNum(32, 'beta_fast')!, 0, 1e4, true),
    betaSlow: rr.range('rope_scaling.beta_slow', rr.optNum(1, 'beta_slow')!, 0, 1e4, true),
    mscale: rr.range('rope_scaling.mscale', rr.optNum(1, 'mscale')!, 0, 100),
    mscaleAllDim: rr.range('rope_scaling.mscale_all_dim', rr.optNum(0, 'mscale_all_dim')!, 0, 100),
  };
  if (yarn.betaFast < yarn.betaSlow) r.fail(`field rope_scaling.beta_fast = ${yarn.betaFast} must be at least rope_scaling.beta_slow = ${yarn.betaSlow}`);
  return yarn;
}
