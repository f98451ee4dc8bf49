// Load a DSpark drafter directory (docs/DSPARK.md): its config (drafter-config.ts), its tensors
// checked against the config (drafter-tensors.ts) or, for a directory holding only config.json,
// the tensors the config implies, and the check that it fits the target it drafts for. Nothing
// here reads a weight byte: the sizes are what `k3 plan --drafter` needs, and the entries are
// where the drafter's forward pass will read from.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import type { ModelConfig } from './config-types.js';
import { loadDrafterConfig } from './drafter-config.js';
import { checkDrafterTensors, drafterTensorSpecs, specBytes } from './drafter-tensors.js';
import type { DrafterConfig } from './drafter-types.js';
import { indexCheckpointDir } from './dir.js';
import type { TensorEntry } from './safetensors.js';

export interface Drafter {
  dir: string;
  config: DrafterConfig;
  /** The checkpoint's tensors, or null for a directory holding only config.json. */
  entries: Map<string, TensorEntry> | null;
  /** Bytes the drafter's forward pass reads (its layers and heads, and its own embedding / lm_head if it ships them). */
  readBytes: number;
  /** Bytes in the files that are never read (the redundant copy of K3's embedding). */
  neverReadBytes: number;
  /** Of readBytes: the Markov head, the confidence head and the drafter's own embedding (read by row or tiny: never streamed whole). */
  rowReadBytes: number;
  /** Parameters the files hold (the published counts: 3.56 B for Inferact/Kimi-K3-DSpark). */
  parameters: number;
  /** The largest read tensor (a streamed drafter needs room for it). */
  maxTensorBytes: number;
}

/** Read a drafter directory, or a path to its config.json. */
export function loadDrafter(target: string): Drafter {
  if (!fs.existsSync(target)) throw new UserError(`--drafter: ${target} does not exist`);
  const cfgPath = fs.statSync(target).isDirectory() ? path.join(target, 'config.json') : target;
  const config = loadDrafterConfig(cfgPath);
  const dir = path.dirname(cfgPath);
  const hasWeights = fs.readdirSync(dir).some((f) => f.endsWith('.safetensors'));
  const entries = hasWeights ? indexCheckpointDir(dir) : null;
  if (entries) checkDrafterTensors(config, entries);
  const specs = drafterTensorSpecs(config);
  let readBytes = 0;
  let neverReadBytes = 0;
  let rowReadBytes = 0;
  let parameters = 0;
  let maxTensorBytes = 0;
  for (const s of specs) {
    const present = !entries || entries.has(s.name);
    if (!present) continue;
    const b = specBytes(s);
    parameters += b / 2;
    if (s.use === 'never_read') {
      neverReadBytes += b;
      continue;
    }
    readBytes += b;
    if (s.name.startsWith('markov_head.markov_w1') || s.name.startsWith('confidence_head.') || s.name === 'embed_tokens.weight') rowReadBytes += b;
    else maxTensorBytes = Math.max(maxTensorBytes, b);
  }
  return { dir, config, entries, readBytes, neverReadBytes, rowReadBytes, parameters, maxTensorBytes };
}

/**
 * Refuse a drafter that does not fit the target: it reads the target's hidden states and (unless
 * it ships its own) the target's embedding and lm_head, so sizes, depth and vocabulary must agree.
 */
export function checkDrafterTarget(d: DrafterConfig, target: ModelConfig, targetFile: string): void {
  const fail = (m: string): never => {
    throw new UserError(`${d.file}: ${m} (target ${targetFile})`);
  };
  if (d.targetHiddenSize !== target.hiddenSize) fail(`target_hidden_size ${d.targetHiddenSize} is not the target's hidden_size ${target.hiddenSize}`);
  if (d.targetLayers !== null && d.targetLayers !== target.numLayers) fail(`the drafter was trained on a ${d.targetLayers}-layer target, this one has ${target.numLayers}`);
  const last = d.taps[d.taps.length - 1]!;
  if (last >= target.numLayers) fail(`tap after layer ${last} is past the target's ${target.numLayers} layers`);
  if (d.vocabSize !== target.vocabSize) fail(`vocab_size ${d.vocabSize} is not the target's ${target.vocabSize} (the drafter's tokens are verified by the target)`);
  if (d.lmHead === 'target' && d.hiddenSize !== target.hiddenSize) fail(`hidden_size ${d.hiddenSize} cannot use the target's lm_head (${target.hiddenSize} wide)`);
  if (d.embedding === 'target' && d.hiddenSize !== target.hiddenSize) fail(`hidden_size ${d.hiddenSize} cannot use the target's embedding (${target.hiddenSize} wide)`);
  if (d.stream === 'attn_res' && target.attnResBlock === null) fail('aux_hidden_stream "attn_res" needs a target with Attention Residuals (K3)');
}
