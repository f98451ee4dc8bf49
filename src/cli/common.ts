// Flags every model-running command shares, and opening the model they name.

import * as os from 'node:os';
import { IO_MODES, checkModelDir, openModelDir, type IoMode, type LoadOptions, type Opener } from '../api/load.js';
import { loadModelAs, type KimiModel } from '../api/model.js';
import { maddHint, type Model } from '../api/diagnostics.js';
import type { Tokenizer } from '../api/tokens.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';
import { progressLine } from '../util/progress.js';
import { thpHint } from '../util/hugepages.js';
import { parseIntFlag } from './args.js';

export const MODEL_OPTIONS = {
  model: { type: 'string', short: 'm' },
  memory: { type: 'string' },
  preset: { type: 'string' },
  ctx: { type: 'string', short: 'c' },
  chunk: { type: 'string' },
  threads: { type: 'string', short: 't' },
  kernels: { type: 'string' },
  'fast-experts': { type: 'boolean' },
  fast: { type: 'boolean' },
  'no-preload': { type: 'boolean' },
  'mla-latent-eps': { type: 'string' },
  'kimi-linear-biased-weights': { type: 'boolean' },
  io: { type: 'string' },
  'no-lookahead': { type: 'boolean' },
  'verify-reads': { type: 'boolean' },
  'allow-nonfinite': { type: 'boolean' },
} as const;

export const MODEL_HELP = `model options:
  -m, --model DIR                  the model directory (instead of the MODEL argument, as llama.cpp)
  --memory SIZE                    ceiling on the process's memory, e.g. 2G, 512M, 8GB or bytes;
                                   weights that do not fit are streamed from disk (same output)
  --preset laptop|desktop|workstation|server|max|auto
                                   8 GiB, 32 GiB, 128 GiB, 512 GiB, everything resident, or 90% of
                                   available memory (cgroup limit included; the default)
  -c, --ctx N                      context length the attention cache is planned for (default 4096)
  -t, --threads N                  compute threads (default: available cores; results do not depend on it)
  --kernels wasm|ref               WebAssembly SIMD kernels (default) or the TypeScript reference
  --fast-experts                   optional fast path, off by default: MXFP4 (expert) products with
                                   8-bit activations (llama.cpp q8_0 style; deterministic, but not
                                   the exact numbers: \`k3 bench --fast-experts\` reports its KL cost)
  --fast                           optional, off by default: --fast-experts, and the bf16 trunk
                                   matrices REQUANTIZED at load to 7-bit blocks (not the stored
                                   weights; not MLA kv_b nor the router) with 8-bit activations and
                                   integer dots; deterministic, not the exact numbers (\`k3 bench
                                   --fast\` reports its KL cost)
  --no-preload                     read resident weights on first use instead of at start
  --chunk N                        prefill chunk size in tokens (default 64; results do not depend on it)
  --mla-latent-eps reference|config  epsilon of MLA q_a/kv_a norms: 1e-6 as Moonshot's code (default)
                                   or the config's rms_norm_eps (vLLM, llama.cpp)
  --kimi-linear-biased-weights     Kimi Linear: routing weights from the biased scores (HF remote code)
  --io direct|buffered|auto        read weights with O_DIRECT (no page cache: the disk is the disk, and
                                   the cache does not eat the budget) or through the page cache; auto
                                   (default): direct where the filesystem allows it, else buffered
  --no-lookahead                   do not guess the next MoE layer's experts to read them early

  --verify-reads                   hash every read of bytes with a known sha256 (packed records,
                                   \`k3 verify\` checksums), not only the first; a mismatch exits 4
  --allow-nonfinite                do not stop (exit 4) when a hidden state or logit is NaN / inf`;

export interface ModelFlags {
  model?: string;
  memory?: string;
  preset?: string;
  ctx?: string;
  chunk?: string;
  threads?: string;
  kernels?: string;
  'fast-experts'?: boolean;
  fast?: boolean;
  'no-preload'?: boolean;
  'mla-latent-eps'?: string;
  'kimi-linear-biased-weights'?: boolean;
  io?: string;
  'no-lookahead'?: boolean;
  'verify-reads'?: boolean;
  'allow-nonfinite'?: boolean;
}

/** What on this machine slows the kernels without changing a number (4 KiB pages for the weights,
 *  an emulated multiply-add): the lines k3 bench and k3 plan print under their figures. */
export function speedNotes(): string[] {
  return [thpHint(), maddHint()].filter((n): n is string => n !== null);
}

/** The --io flag, checked (default auto). */
export function ioMode(cmd: string, flag: string | undefined): IoMode {
  const io = flag ?? 'auto';
  if (!(IO_MODES as readonly string[]).includes(io)) throw new UserError(`${cmd}: --io must be direct, buffered or auto`);
  return io as IoMode;
}

export { checkModelDir };

/** LoadOptions names -> the flags that set them, for error messages. */
const FLAG_OF: Partial<Record<keyof LoadOptions, string>> = { mlaLatentEps: 'mla-latent-eps', fastExperts: 'fast-experts', kimiLinearBiasedWeights: 'kimi-linear-biased-weights', tokenizer: 'tok' };

/** Flags -> the library's load options (numbers parsed, names checked; the rest is checked where the model is opened). */
export function loadOptionsFromFlags(cmd: string, flags: ModelFlags): LoadOptions {
  const eps = flags['mla-latent-eps'];
  if (eps !== undefined && eps !== 'reference' && eps !== 'config') throw new UserError(`${cmd}: --mla-latent-eps must be reference or config`);
  const kernels = flags.kernels;
  if (kernels !== undefined && kernels !== 'wasm' && kernels !== 'ref') throw new UserError(`${cmd}: --kernels must be wasm or ref`);
  return {
    memory: flags.memory,
    preset: flags.preset,
    ctx: parseIntFlag(cmd, 'ctx', flags.ctx, 4096, 1),
    chunk: parseIntFlag(cmd, 'chunk', flags.chunk, 64, 1),
    threads: parseIntFlag(cmd, 'threads', flags.threads, os.availableParallelism(), 1),
    kernels,
    preload: !flags['no-preload'],
    fastExperts: flags['fast-experts'] ?? false,
    fast: flags.fast ?? false,
    mlaLatentEps: eps,
    kimiLinearBiasedWeights: flags['kimi-linear-biased-weights'] ?? false,
    io: ioMode(cmd, flags.io),
    lookahead: !flags['no-lookahead'],
    verifyReads: flags['verify-reads'] ?? false,
    allowNonfinite: flags['allow-nonfinite'] ?? false,
  };
}

/**
 * How a CLI command opens a model: options named as flags in errors, the fault-injecting reader
 * of the tests (env K3_FAULT_AFTER_READS=N or K3_FAULT=spec, store/fault.ts) when one is set, and
 * on a terminal a progress line for the resident weights (a big model takes a while).
 */
function cliOpener(cmd: string, dir: string, opts: LoadOptions, tok?: Tokenizer | null, oneSequence = false): { opts: LoadOptions; by: Opener; end: () => void } {
  const fault = process.env.K3_FAULT_AFTER_READS;
  const spec = process.env.K3_FAULT;
  const line = progressLine((done, total, s) => `${cmd}: loading ${dir}: ${formatBytes(done)} / ${formatBytes(total)} (${Math.floor((100 * done) / Math.max(total, 1))}%), ${s.toFixed(1)} s`, { intervalMs: 250 });
  const by: Opener = {
    who: cmd,
    name: (o) => `--${FLAG_OF[o] ?? o}`,
    tok,
    oneSequence,
    faults: fault !== undefined && /^\d+$/.test(fault) ? Number(fault) : spec || undefined,
  };
  return { opts: { ...opts, onProgress: line.update }, by, end: () => line.end() };
}

/** The library's model for a command (k3 run, chat, serve), opened as `cliOpener` says; without
 *  `opts.parallel` the command runs one sequence at a time and the plan counts no batch. */
export async function loadForCommand(cmd: string, dir: string, opts: LoadOptions, tok?: Tokenizer | null): Promise<KimiModel> {
  const o = cliOpener(cmd, dir, { ...opts, parallel: opts.parallel ?? 1 }, tok, opts.parallel === undefined);
  try {
    return await loadModelAs(dir, o.opts, o.by);
  } finally {
    o.end();
  }
}

/** Open the model a command names, as the library does (src/api/load.ts). */
export async function openModel(cmd: string, dir: string, flags: ModelFlags): Promise<{ model: Model; chunk: number }> {
  checkModelDir(cmd, dir);
  const o = cliOpener(cmd, dir, loadOptionsFromFlags(cmd, flags), null, true);
  try {
    const { model, chunk } = await openModelDir(dir, o.opts, o.by);
    return { model, chunk };
  } finally {
    o.end();
  }
}
