import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { UserError } from '../util/errors.js';
import { MiB, formatBytes } from '../util/format.js';
import { progressLine } from '../util/progress.js';
import { stopOnSignals } from './signals.js';
import { loadConfig } from '../api/diagnostics.js';
import { ARCHS, DRAFTER_LAYOUTS, EXPERTS_FORMATS, PRESETS, synthCheckpoint, synthDrafter, type DrafterLayout, type ExpertsFormat, type SynthArch, type SynthOptions, type SynthPreset } from '../api/checkpoint-tools.js';

const HELP = `usage: k3 synth --arch k3|kimi_linear|k2|k25 --out DIR [options]
       k3 synth --drafter inferact|inferact-block5|radixark|redhatai --out DIR [--preset tiny|real | --target MODEL] [--config-only] [--seed N] [--force]

Write a random checkpoint in the exact official layout of the architecture: config.json,
safetensors shards (+ model.safetensors.index.json when sharded) and synth.json (the options).
Weights are deterministic from --seed and scaled for a numerically sane forward pass. The
directory appears only when complete; rerunning with the same options does nothing.

options:
  --arch A              k3 (Kimi K3), kimi_linear (Kimi Linear), k2 (Kimi K2 / DeepSeek-V3),
                        k25 (Kimi K2.5: K2's decoder under language_model., vision stubs)
  --out DIR             output directory
  --preset P            tiny (default: the dims of shared/golden/<arch>), demo (K3, ~10 MiB),
                        k3-medium (K3, ~1.4 GiB), k3-real-layers (K3 with the real layer and
                        expert sizes, 4 layers x 32 experts by default, ~11 GiB)
  --experts-format F    mxfp4 (K3 default), bf16 (any arch; default for kimi_linear and k2),
                        int4 (K2-Thinking compressed-tensors; K2.5 default), fp8 (K2: DeepSeek-V3 block FP8 of
                        every decoder linear but the router)
  --shards N            number of safetensors files (1: model.safetensors, no index)
  --seed N              weight seed (default 1)
  --layers N            decoder layers (MLA layers: every 4th plus the last)
  --experts N           routed experts per MoE layer
  --top-k N             experts per token
  --vocab N             vocabulary size
  --hidden N            hidden size
  --force               replace an existing checkpoint written with other options
  --json                print the result as JSON

--drafter L writes a DSpark drafter in the layout of a published one (docs/DSPARK.md): config.json
and model.safetensors with every tensor its config implies, random BF16. --preset tiny (default,
for a 4-layer 64-wide target) or real (the published sizes: 4.5-9.5 GB; with --config-only, the
config alone, enough for k3 plan --drafter). --target MODEL fits the tiny sizes to that K3 checkpoint
(its hidden size, depth and vocabulary; the taps spread over its layers): a drafter k3 run --drafter
can use with it.`;

export const command: Command = {
  summary: 'write a random checkpoint in the official K3 / Kimi Linear / K2 / K2.5 layout',
  help: HELP,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse('synth', args, {
      arch: { type: 'string' },
      out: { type: 'string' },
      preset: { type: 'string' },
      'experts-format': { type: 'string' },
      shards: { type: 'string' },
      seed: { type: 'string' },
      layers: { type: 'string' },
      experts: { type: 'string' },
      'top-k': { type: 'string' },
      vocab: { type: 'string' },
      hidden: { type: 'string' },
      force: { type: 'boolean' },
      json: { type: 'boolean' },
      drafter: { type: 'string' },
      target: { type: 'string' },
      'config-only': { type: 'boolean' },
    });
    if (positionals.length > 0) throw new UserError(`synth: unexpected argument ${JSON.stringify(positionals[0])} (k3 synth --help)`);
    if (values.drafter !== undefined) return runDrafter(values);
    if (!values.arch) throw new UserError('synth: --arch is required (k3, kimi_linear, k2 or k25)');
    if (!values.out) throw new UserError('synth: --out DIR is required');
    const arch = values.arch as SynthArch;
    if (!ARCHS.includes(arch)) throw new UserError(`synth: --arch must be one of ${ARCHS.join(', ')}, got ${JSON.stringify(values.arch)}`);
    if (values.preset !== undefined && !PRESETS.includes(values.preset as SynthPreset)) {
      throw new UserError(`synth: --preset must be one of ${PRESETS.join(', ')}, got ${JSON.stringify(values.preset)}`);
    }
    const fmt = values['experts-format'];
    if (fmt !== undefined && !EXPERTS_FORMATS.includes(fmt as ExpertsFormat)) {
      throw new UserError(`synth: --experts-format must be one of ${EXPERTS_FORMATS.join(', ')}, got ${JSON.stringify(fmt)}`);
    }
    const opt = (name: string, min: number): number | undefined => {
      const v = values[name as keyof typeof values] as string | undefined;
      return v === undefined ? undefined : parseIntFlag('synth', name, v, 0, min);
    };
    const opts: SynthOptions = {
      arch,
      out: values.out,
      preset: values.preset as SynthPreset | undefined,
      expertsFormat: fmt as ExpertsFormat | undefined,
      shards: opt('shards', 1),
      seed: opt('seed', 0),
      layers: opt('layers', 1),
      experts: opt('experts', 1),
      topK: opt('top-k', 1),
      vocab: opt('vocab', 1),
      hidden: opt('hidden', 1),
      force: values.force === true,
    };
    for (const k of Object.keys(opts) as (keyof SynthOptions)[]) if (opts[k] === undefined) delete opts[k];

    const line = progressLine((done, total, s) => `synth: ${formatBytes(done)} / ${formatBytes(total)} (${Math.floor((100 * done) / total)}%), ${formatBytes(done / Math.max(s, 1e-3))}/s`, { intervalMs: 500, pipeIntervalMs: 10_000, drawFirst: false });
    opts.onProgress = (done, total) => {
      if (total < 256 * MiB) return; // small outputs finish before a progress line helps
      line.update(done, total);
    };
    opts.signal = stopOnSignals('synth');
    const r = await synthCheckpoint(opts);
    line.end();
    if (values.json) {
      console.log(JSON.stringify({ dir: r.dir, skipped: r.skipped, files: r.shards, tensors: r.tensors, bytes: r.bytes, seconds: r.seconds, ...r.resolved }));
    } else if (r.skipped) {
      console.log(`synth: ${r.dir} already holds this checkpoint (same options); nothing to do`);
    } else {
      const what = `${r.resolved.arch} ${r.resolved.preset}, ${r.resolved.expertsFormat} experts, seed ${r.resolved.seed}`;
      console.log(
        `synth: wrote ${r.dir} (${what}): ${r.shards.length} shard(s), ${r.tensors} tensors, ${formatBytes(r.bytes)} (${r.bytes} bytes) in ${r.seconds.toFixed(2)} s (${formatBytes(r.bytes / Math.max(r.seconds, 1e-3))}/s)`,
      );
    }
    return 0;
  },
};

/** `k3 synth --drafter LAYOUT`: a drafter directory (src/synth/drafter.ts). */
async function runDrafter(values: { drafter?: string; out?: string; preset?: string; seed?: string; force?: boolean; json?: boolean; 'config-only'?: boolean; arch?: string; target?: string }): Promise<number> {
  const layout = values.drafter as DrafterLayout;
  if (!DRAFTER_LAYOUTS.includes(layout)) throw new UserError(`synth: --drafter must be one of ${DRAFTER_LAYOUTS.join(', ')}, got ${JSON.stringify(values.drafter)}`);
  if (values.arch !== undefined) throw new UserError('synth: --drafter and --arch are exclusive');
  if (!values.out) throw new UserError('synth: --out DIR is required');
  const dims = values.preset ?? 'tiny';
  if (dims !== 'tiny' && dims !== 'real') throw new UserError(`synth: --preset with --drafter must be tiny or real, got ${JSON.stringify(values.preset)}`);
  if (values.target !== undefined && values.preset !== undefined) throw new UserError('synth: --target and --preset are exclusive (--target fits the tiny sizes to the model)');
  const t = values.target === undefined ? undefined : loadConfig(values.target);
  if (t && t.layers.length < 4) throw new UserError(`synth: --target ${values.target} has ${t.numLayers} layers; a drafter's taps need at least 4`);
  const target = t ? { hidden: t.hiddenSize, layers: t.numLayers, vocab: t.vocabSize } : undefined;
  const r = await synthDrafter({ layout, out: values.out, dims, target, configOnly: values['config-only'] === true, seed: values.seed === undefined ? undefined : parseIntFlag('synth', 'seed', values.seed, 1, 0), force: values.force === true });
  if (values.json) console.log(JSON.stringify({ dir: r.dir, layout, preset: dims, tensors: r.tensors, bytes: r.bytes }));
  else console.log(`synth: wrote ${r.dir} (${layout} drafter, ${dims}${values['config-only'] ? ', config only' : ''}): ${r.tensors} tensors, ${formatBytes(r.bytes)}`);
  return 0;
}
