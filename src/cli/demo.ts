import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { loadForCommand, loadOptionsFromFlags } from './common.js';
import { DEMO_MODES, TRAINED_DEMO_DIR, demoTurn, readTrainInfo } from './demo-sums.js';
import { demoTokenizerFiles, synthCheckpoint } from '../api/checkpoint-tools.js';
import { command as run } from './run.js';
import { formatBytes } from '../util/format.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: 'run the small built-in K3 model, a tiny agent that adds numbers, on held-out problems',
  help: `usage: k3 demo [--problems N] [--memory SIZE] [--threads N]
       k3 demo --random [--out DIR] [--prompt TEXT] [--gen N] [--memory SIZE]

Runs the built-in demo model (models-shipped/demo-k3-trained: a tiny model with the exact K3
architecture, MXFP4 experts, KDA + gated NoPE MLA, latent MoE with SiTU, Attention Residuals,
trained by tools/train-demo/train.py on K3's chat format) on N held-out sums (default 8; never
seen in training), each three ways through the library: a raw prompt "ab+cd=", a chat turn
(it thinks first, then answers), and the tool loop (it calls an add tool, reads the result,
answers from it). Prints what it did and whether the answer is right.

--random instead writes a random checkpoint with the same layout (about 15 MiB) and a small
built-in tokenizer to DIR (default models/demo-k3; skipped when already there) and runs
\`k3 run\` on it with a text prompt: random weights, so the text is noise.`,
  async run(args) {
    const { values } = parse('demo', args, { random: { type: 'boolean' }, problems: { type: 'string' }, threads: { type: 'string' }, out: { type: 'string' }, prompt: { type: 'string' }, gen: { type: 'string' }, memory: { type: 'string' } });
    if (!values.random) {
      for (const f of ['out', 'prompt', 'gen'] as const) if (values[f] !== undefined) throw new UserError(`demo: --${f} goes with --random`);
      return trained(parseIntFlag('demo', 'problems', values.problems, 8, 1), values.memory, values.threads);
    }
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

async function trained(n: number, memory: string | undefined, threads: string | undefined): Promise<number> {
  const dir = TRAINED_DEMO_DIR;
  if (!fs.existsSync(path.join(dir, 'model.safetensors'))) throw new UserError(`demo: the built-in model is missing (${dir}); k3 demo --random writes a random one`);
  const info = readTrainInfo(dir);
  const problems = info.held_out.slice(0, n);
  process.stdout.write(`demo model: ${path.relative(process.cwd(), dir) || dir}, a tiny K3 trained as a tiny agent: it answers sums, thinks first when asked to, and calls an add tool when it has one (held-out sums, never trained on)\n`);
  const kimi = await loadForCommand('demo', dir, { ...loadOptionsFromFlags('demo', { memory, threads, ctx: '1024' }) });
  try {
    let right = 0;
    let runs = 0;
    for (const [a, b] of problems) {
      const want = String(a + b);
      const shown = `${a}+${b}`.padEnd(6);
      for (const mode of DEMO_MODES) {
        const got = await demoTurn(kimi, a, b, mode);
        const ok = got.answer === want;
        runs++;
        if (ok) right++;
        process.stdout.write(`  ${mode === 'raw' ? shown : ' '.repeat(6)}  ${`${mode}:`.padEnd(9)} ${got.shown.padEnd(34)} ${ok ? 'right' : `wrong (${want})`}\n`);
      }
    }
    process.stdout.write(`${right} of ${runs} right\n`);
  } finally {
    await kimi.close();
  }
  return 0;
}
