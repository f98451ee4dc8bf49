import type { Command } from './command.js';
import { parse } from './args.js';
import { buildLayout, census, checkTensorsMatchConfig, configAndIndex, layerMap, stateSize } from '../api/diagnostics.js';
import { UserError } from '../util/errors.js';
import * as fs from 'node:fs';
import { formatBytes } from '../util/format.js';

export const command: Command = {
  summary: 'architecture, layer map, experts, parameters and bytes by dtype, state sizes',
  help: `usage: k3 info MODEL [--json]

Reads config.json and the safetensors headers (no weights; MODEL may also be a config.json
alone, then the official dtypes are assumed) and prints the architecture, the
layer map (KDA / MLA, dense / MoE, 0-based), the experts, parameter counts and bytes by dtype,
and the state a sequence needs (per sequence and per position).`,
  async run(args) {
    const { values, positionals } = parse('info', args, { json: { type: 'boolean' } }, 1);
    const target = positionals[0]!;
    if (!fs.existsSync(target)) throw new UserError(`info: ${target} does not exist`);
    const { cfg, entries, hasWeights } = configAndIndex(target);
    // The checks `k3 run` makes before reading a weight: every tensor there, with its shape.
    if (hasWeights) {
      buildLayout(cfg, entries);
      checkTensorsMatchConfig(cfg, entries);
    }
    const c = census(cfg, entries);
    const s = stateSize(cfg);
    const map = layerMap(cfg);
    const info = {
      architecture: cfg.arch,
      ...(cfg.variant ? { variant: cfg.variant } : {}),
      vocab_size: cfg.vocabSize,
      hidden_size: cfg.hiddenSize,
      num_layers: cfg.numLayers,
      layer_map: map,
      mla_layers: cfg.layers.flatMap((L, l) => (L.attn === 'mla' ? [l] : [])),
      kda_layers: cfg.layers.flatMap((L, l) => (L.attn === 'kda' ? [l] : [])),
      full_attn_layers_1based: cfg.fullAttnLayers,
      experts: { routed: cfg.moe.experts, per_token: cfg.moe.topK, shared: cfg.moe.shared, intermediate: cfg.moe.intermediate, latent: cfg.moe.latentDim },
      attn_res_block_size: cfg.attnResBlock,
      params: c.params,
      bytes: c.bytes,
      expert_bytes: c.expertBytes,
      by_dtype: c.byDtype,
      tensors: c.tensors,
      skipped_tensors: c.skippedTensors,
      state_bytes_per_sequence: s.perSequenceBytes,
      state_bytes_per_position: s.perPositionBytes,
    };
    if (values.json) {
      console.log(JSON.stringify(info, null, 1));
      return 0;
    }
    const lines = [
      `architecture  ${cfg.arch}${cfg.variant === 'k25' ? ' (Kimi K2.5 text model; vision tower not run)' : ''}  (vocab ${cfg.vocabSize}, hidden ${cfg.hiddenSize}, ${cfg.numLayers} layers)`,
      `layers        ${map.map((m, l) => `${l}:${m}`).join(' ')}`,
      `experts       ${cfg.moe.experts} routed, ${cfg.moe.topK} per token, ${cfg.moe.shared} shared, width ${cfg.moe.intermediate}${cfg.moe.latentDim ? `, latent ${cfg.moe.latentDim}` : ''}`,
      `parameters    ${c.params.toLocaleString('en-US')} in ${c.tensors} tensors, ${formatBytes(c.bytes)} (${formatBytes(c.expertBytes)} routed experts)${c.skippedTensors ? `; ${c.skippedTensors} vision tensors skipped` : ''}`,
      ...Object.entries(c.byDtype).map(([d, v]) => `  ${d.padEnd(8)}    ${v.params.toLocaleString('en-US')} params, ${formatBytes(v.bytes)}, ${v.tensors} tensors`),
      `state         ${formatBytes(s.perSequenceBytes)} per sequence (KDA), ${formatBytes(s.perPositionBytes)} per position (MLA latent cache)`,
    ];
    console.log(lines.join('\n'));
    return 0;
  },
};
