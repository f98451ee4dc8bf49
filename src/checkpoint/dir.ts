// A checkpoint directory's tensor index: one safetensors file, shards listed by
// model.safetensors.index.json, or a packed directory (packed.json).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import { visionOnlyShards } from './multimodal.js';
import { MANIFEST_NAME, readPackedDir } from './packed.js';
import { readSafetensorsHeader, type TensorEntry } from './safetensors.js';

/**
 * The set of safetensors files of a checkpoint directory, merged into one name -> entry map; for a
 * directory written by `k3 pack` (it holds packed.json), the entries point into the packed files.
 */
export function indexCheckpointDir(dir: string): Map<string, TensorEntry> {
  if (fs.existsSync(path.join(dir, MANIFEST_NAME))) return readPackedDir(dir);
  const indexFile = path.join(dir, 'model.safetensors.index.json');
  const single = path.join(dir, 'model.safetensors');
  const map = new Map<string, TensorEntry>();
  if (fs.existsSync(indexFile)) {
    let idx: { weight_map?: Record<string, string> };
    try {
      idx = JSON.parse(fs.readFileSync(indexFile, 'utf8'));
    } catch {
      throw new UserError(`${indexFile}: not valid JSON`);
    }
    const wm = idx.weight_map;
    if (!wm || typeof wm !== 'object') throw new UserError(`${indexFile}: no "weight_map" object`);
    const shards = [...new Set(Object.values(wm))].sort();
    // A shard of vision tensors only may be absent (`k3 pull` skips them): its tensors are never read.
    const optional = visionOnlyShards(wm);
    const absent = new Set<string>();
    for (const shard of shards) {
      if (typeof shard !== 'string' || shard.includes('/') || shard.includes('\\')) {
        throw new UserError(`${indexFile}: bad shard name ${JSON.stringify(shard)}`);
      }
      const file = path.join(dir, shard);
      if (optional.has(shard) && !fs.existsSync(file)) {
        absent.add(shard);
        continue;
      }
      if (!fs.existsSync(file)) throw new UserError(`${indexFile}: shard ${shard} is listed but missing`);
      for (const e of readSafetensorsHeader(file)) map.set(e.name, e);
    }
    for (const [name, shard] of Object.entries(wm)) {
      if (absent.has(shard)) continue;
      const e = map.get(name);
      if (!e) throw new UserError(`${path.join(dir, shard)}: tensor ${name} is in the index but not in the shard`);
      if (path.basename(e.file) !== shard) {
        throw new UserError(`${indexFile}: tensor ${name} is mapped to ${shard} but found in ${path.basename(e.file)}`);
      }
    }
  } else if (fs.existsSync(single)) {
    for (const e of readSafetensorsHeader(single)) map.set(e.name, e);
  } else {
    const any = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors')) : [];
    if (any.length === 0) throw new UserError(`${dir}: no model.safetensors or model.safetensors.index.json`);
    for (const f of any.sort()) for (const e of readSafetensorsHeader(path.join(dir, f))) map.set(e.name, e);
  }
  return map;
}
