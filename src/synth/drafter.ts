// A random DSpark drafter checkpoint in one of the four published layouts (drafter-configs.ts):
// config.json and one model.safetensors holding exactly the tensors the loader expects, BF16,
// deterministic from the seed. `configOnly` writes the config alone (a real-size drafter is
// 4.5-9.5 GB; `k3 plan --drafter` needs only its config). The directory appears only when
// complete.

import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { parseDrafterConfig } from '../checkpoint/drafter-config.js';
import { drafterTensorSpecs } from '../checkpoint/drafter-tensors.js';
import { UserError } from '../util/errors.js';
import { drafterConfigJson, type DrafterDims, type DrafterLayout, type DrafterTarget } from './drafter-configs.js';
import { makeFill, type TensorPlan } from './gen.js';
import { writeFileAtomic, writeSafetensors } from './writer.js';

export { DRAFTER_LAYOUTS, drafterConfigJson, type DrafterDims, type DrafterLayout, type DrafterTarget } from './drafter-configs.js';

export interface SynthDrafterOptions {
  layout: DrafterLayout;
  out: string;
  /** 'tiny' (default) or 'real'. */
  dims?: DrafterDims;
  configOnly?: boolean;
  seed?: number;
  /** Fit tiny sizes to this target (its hidden size, depth, vocabulary): a drafter a small K3 can run. */
  target?: DrafterTarget;
  /** Replace an existing directory that holds a drafter (config.json and safetensors only). */
  force?: boolean;
}

export interface SynthDrafterResult {
  dir: string;
  tensors: number;
  bytes: number;
}

/** Values of one tensor: norm scales near 1, the confidence bias 0, matrices N(0, 1/sqrt(fan-in)). */
function genOf(name: string, shape: number[]): TensorPlan['gen'] {
  if (name.endsWith('norm.weight') || /fc_norm\.\d+\.weight$/.test(name)) return { kind: 'uniform', lo: 0.9, hi: 1.1 };
  if (name === 'confidence_head.proj.bias') return { kind: 'normal', mean: 0, std: 0.01 };
  if (name.startsWith('markov_head.')) return { kind: 'normal', mean: 0, std: 0.05 };
  if (name === 'embed_tokens.weight') return { kind: 'normal', mean: 0, std: 1 };
  return { kind: 'normal', mean: 0, std: 1 / Math.sqrt(shape[shape.length - 1]!) };
}

export async function synthDrafter(opts: SynthDrafterOptions): Promise<SynthDrafterResult> {
  const out = path.resolve(opts.out);
  const json = drafterConfigJson(opts.layout, opts.dims ?? 'tiny', opts.target);
  const cfg = parseDrafterConfig(json, path.join(out, 'config.json'));
  const specs = opts.configOnly ? [] : drafterTensorSpecs(cfg);
  if (fs.existsSync(out)) {
    const names = fs.readdirSync(out);
    if (!opts.force) throw new UserError(`synth: ${out} already exists (--force replaces a drafter directory)`);
    if (names.some((n) => n !== 'config.json' && !n.endsWith('.safetensors'))) throw new UserError(`synth: ${out} holds more than a drafter; refusing to replace it`);
  }
  await fsp.mkdir(path.dirname(out), { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  await fsp.rm(tmp, { recursive: true, force: true });
  await fsp.mkdir(tmp);
  let bytes = 0;
  try {
    if (specs.length > 0) {
      const seed = opts.seed ?? 1;
      const tensors = specs.map((s) => ({ name: s.name, dtype: s.dtype, shape: s.shape, fill: makeFill({ name: s.name, dtype: s.dtype, shape: s.shape, gen: genOf(s.name, s.shape) }, seed) }));
      bytes = (await writeSafetensors(path.join(tmp, 'model.safetensors'), tensors)).bytes;
    }
    await writeFileAtomic(path.join(tmp, 'config.json'), JSON.stringify(json, null, 2) + '\n');
    await fsp.rm(out, { recursive: true, force: true });
    await fsp.rename(tmp, out);
  } catch (e) {
    await fsp.rm(tmp, { recursive: true, force: true }).catch(() => {});
    throw e;
  }
  return { dir: out, tensors: specs.length, bytes };
}
