import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { synthCheckpoint } from '../synth/synth.js';
import { demoTokenizerFiles } from '../tokenizer/index.js';
import { command as run } from './run.js';
import { formatBytes } from '../util/format.js';

export const command: Command = {
  summary: 'write the small built-in K3 model (if needed) and generate text from it',
  help: `usage: k3 demo [--out DIR] [--prompt TEXT] [--gen N] [--memory SIZE]

Writes a small random checkpoint with the exact K3 layout (MXFP4 experts, KDA + gated MLA,
latent MoE, Attention Residuals; about 15 MiB) and a small built-in tokenizer to DIR (default
models/demo-k3; skipped when already there), then runs \`k3 run\` on it with a text prompt.
The weights are random, so the text is too: the demo shows the pipeline, not a language model.`,
  async run(args) {
    const { values } = parse('demo', args, { out: { type: 'string' }, prompt: { type: 'string' }, gen: { type: 'string' }, memory: { type: 'string' } });
    const out = path.resolve(values.out ?? path.join('models', 'demo-k3'));
    const gen = parseIntFlag('demo', 'gen', values.gen, 24, 1);
    const r = await synthCheckpoint({ arch: 'k3', preset: 'demo', out, extraFiles: demoTokenizerFiles() });
    process.stderr.write(r.skipped ? `demo model: ${out} (already there)\n` : `demo model: wrote ${formatBytes(r.bytes)} in ${r.tensors} tensors to ${out} in ${r.seconds.toFixed(1)} s\n`);
    const prompt = values.prompt ?? 'The quick brown fox';
    process.stderr.write(`prompt: ${JSON.stringify(prompt)}\n`);
    process.stderr.write('note: the weights are random, so the text is noise: the demo shows the pipeline (tokenizer, streaming, kernels, report), not a language model\n');
    return run.run([out, '--prompt', prompt, '--gen', String(gen), '--printable', ...(values.memory ? ['--memory', values.memory] : [])]);
  },
};
