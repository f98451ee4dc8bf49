// What the architecture expects of a checkpoint's small tensors and layer count, checked at the
// door (by `k3 run` and `k3 info` alike) so that a wrong checkpoint stops before any weight is
// read. Trunk matrices and experts are checked by the layout (store/layout.ts, resolveLinear);
// this covers the rest: every norm, bias, conv tap and A_log present with the element count and a
// float dtype, and no decoder layer beyond num_hidden_layers (+ DeepSeek-V3's MTP layers).

import type { ModelConfig } from './config.js';
import { namesOf } from './names.js';
import type { TensorEntry } from './safetensors.js';
import { virtualEntries } from './virtual.js';
import { UserError } from '../util/errors.js';

const FLOAT = new Set(['F32', 'BF16', 'F16']);

export function checkTensorsMatchConfig(cfg: ModelConfig, entries: Map<string, TensorEntry>): void {
  const names = namesOf(cfg);
  const maxLayer = cfg.numLayers + (cfg.mtpLayers ?? 0);
  for (const name of entries.keys()) {
    if (!names.isDecoder(name)) continue;
    const m = /\.layers\.(\d+)\./.exec(name);
    if (m && Number(m[1]) >= maxLayer) {
      throw new UserError(`${entries.get(name)!.file}: tensor ${name} is of layer ${m[1]}, but the config has ${cfg.numLayers} layers (num_hidden_layers too small?)`);
    }
  }
  // The official layout (virtual.ts) names every small tensor (anything but a matrix of rows > 1).
  for (const [name, want] of virtualEntries(cfg, 'bf16', false)) {
    if (want.shape.length === 2 && want.shape[0]! > 1) continue;
    const e = entries.get(name);
    if (!e) throw new UserError(`missing tensor ${name} in the checkpoint`);
    if (!FLOAT.has(e.dtype)) throw new UserError(`${e.file}: tensor ${name} has dtype ${e.dtype}, expected F32, BF16 or F16`);
    const n = e.shape.reduce((a, b) => a * b, 1);
    const count = want.shape.reduce((a, b) => a * b, 1);
    // K3 pads A_log to head_dim (virtual.ts writes max(heads, head_dim)); the engine reads `heads`.
    const ok = name.endsWith('A_log') ? n >= cfg.kda!.heads : n === count;
    if (!ok) throw new UserError(`${e.file}: tensor ${name} has ${n} elements (shape ${JSON.stringify(e.shape)}), expected ${count}`);
  }
}
