// config.json -> one typed ModelConfig for the three architectures (docs/spec/ARCHITECTURE.md §2.1, §3.1,
// docs/spec/ARCHITECTURE.md §4.1; docs/spec/K3.md §2). Every field the forward pass uses is read here and nowhere else. A missing or
// contradictory field is an error naming it; unknown extra fields are ignored.
//
// This file picks the architecture from model_type; config-k2.ts, config-kimi.ts and config-k3.ts
// read one architecture each from the shared readers of config-sections.ts. Checkpoint quirks:
// K3 and K2.5 nest the decoder in `text_config` and prefix tensors with `language_model.` (K2.5's
// decoder is K2's, so it parses as arch k2); Kimi Linear / K3 rename DeepSeek's MoE fields; layer
// lists are 1-based.

import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import type { ConfigOverrides, ModelConfig } from './config-types.js';
import { readJsonObject, type Json } from './config-reader.js';
import { openSource } from './config-sections.js';
import { parseK2Config } from './config-k2.js';
import { parseKimiLinearConfig } from './config-kimi.js';
import { parseK3Config } from './config-k3.js';

export type * from './config-types.js';
export { LIMITS } from './config-reader.js';

/** Read `config.json` from a checkpoint directory (or a path to the file itself). */
export function loadConfig(dirOrFile: string, overrides: ConfigOverrides = {}): ModelConfig {
  const file = dirOrFile.endsWith('.json') ? dirOrFile : path.join(dirOrFile, 'config.json');
  return parseConfig(readJsonObject(file), file, overrides);
}

export function parseConfig(top: Json, file: string, overrides: ConfigOverrides = {}): ModelConfig {
  const modelType = typeof top.model_type === 'string' ? top.model_type : null;
  if (modelType === 'kimi_k3' || modelType === 'kimi_k25') {
    const tc = top.text_config;
    if (typeof tc !== 'object' || tc === null || Array.isArray(tc)) throw new UserError(`${file}: missing required field text_config (model_type ${modelType})`);
    const inner = (tc as Json).model_type;
    if (modelType === 'kimi_k25' && inner !== undefined && inner !== 'kimi_k2' && inner !== 'deepseek_v3') {
      throw new UserError(`${file}: text_config.model_type ${JSON.stringify(inner)} is not kimi_k2 or deepseek_v3 (model_type kimi_k25)`);
    }
    const src = openSource(top, file, modelType, true, overrides);
    return modelType === 'kimi_k3' ? parseK3Config(src) : parseK2Config(src);
  }
  if (modelType === 'kimi_linear') return parseKimiLinearConfig(openSource(top, file, modelType, false, overrides));
  if (modelType === 'deepseek_v3' || modelType === 'kimi_k2') return parseK2Config(openSource(top, file, modelType, false, overrides));
  throw new UserError(`${file}: model_type ${JSON.stringify(modelType)} is not one of kimi_k3, kimi_k25, kimi_linear, kimi_k2, deepseek_v3`);
}
