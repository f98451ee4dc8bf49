// Flags every model-running command shares, and opening the model they name.

import * as fs from 'node:fs';
import * as os from 'node:os';
import type { ConfigOverrides } from '../checkpoint/config.js';
import { Model } from '../model/model.js';
import { IO_MODES, makeReader, type IoMode } from '../store/direct-reader.js';
import { FaultyReader, RetryingReader, parseFaultSpec } from '../store/fault.js';
import { FsReader } from '../store/store.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';
import { progressLine } from '../util/progress.js';
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

/** The --io flag, checked (default auto). */
export function ioMode(cmd: string, flag: string | undefined): IoMode {
  const io = flag ?? 'auto';
  if (!(IO_MODES as readonly string[]).includes(io)) throw new UserError(`${cmd}: --io must be direct, buffered or auto`);
  return io as IoMode;
}

/** The model directory exists and is one (checked first, so a missing folder is named as such). */
export function checkModelDir(cmd: string, dir: string): void {
  if (!fs.existsSync(dir)) throw new UserError(`${cmd}: model directory ${dir} does not exist`);
  if (!fs.statSync(dir).isDirectory()) throw new UserError(`${cmd}: ${dir} is not a directory`);
}

export async function openModel(cmd: string, dir: string, flags: ModelFlags): Promise<{ model: Model; chunk: number }> {
  checkModelDir(cmd, dir);
  const eps = flags['mla-latent-eps'];
  if (eps !== undefined && eps !== 'reference' && eps !== 'config') throw new UserError(`${cmd}: --mla-latent-eps must be reference or config`);
  const overrides: ConfigOverrides = { mlaLatentNormEps: eps ?? 'reference', kimiLinearBiasedWeights: flags['kimi-linear-biased-weights'] ?? false };
  const chunk = parseIntFlag(cmd, 'chunk', flags.chunk, 64, 1);
  const ctx = parseIntFlag(cmd, 'ctx', flags.ctx, 4096, 1);
  const fault = process.env.K3_FAULT_AFTER_READS;
  const spec = process.env.K3_FAULT;
  const base = makeReader(ioMode(cmd, flags.io), () => new FsReader());
  const faulty = fault !== undefined && /^\d+$/.test(fault) ? new FaultyReader(base, Number(fault)) : spec ? new FaultyReader(base, parseFaultSpec(spec)) : undefined;
  const reader = faulty ? new RetryingReader(faulty) : base;
  const kernels = flags.kernels ?? 'wasm';
  if (kernels !== 'wasm' && kernels !== 'ref') throw new UserError(`${cmd}: --kernels must be wasm or ref`);
  const threads = parseIntFlag(cmd, 'threads', flags.threads, os.availableParallelism(), 1);
  const verifyReads = flags['verify-reads'] ? ('every' as const) : ('first' as const);
  const opts = { overrides, chunk, ctx, reader, verifyReads, budget: { memory: flags.memory, preset: flags.preset }, lookahead: !flags['no-lookahead'] };
  const fastExperts = flags['fast-experts'] ?? false;
  const fast = flags.fast ?? false;
  if (fastExperts && kernels === 'ref') throw new UserError(`${cmd}: --fast-experts needs the WebAssembly kernels (--kernels wasm)`);
  if (fast && kernels === 'ref') throw new UserError(`${cmd}: --fast needs the WebAssembly kernels (--kernels wasm)`);
  const model = kernels === 'ref' ? Model.open(dir, opts) : await Model.load(dir, { ...opts, threads, fastExperts, fast });
  model.checkFinite = !flags['allow-nonfinite'];
  faulty?.classifyBy(model.store.layout, model.config);
  if (!flags['no-preload']) {
    // On a terminal: what is being read, how much, how long (a big model takes a while).
    const line = progressLine((done, total, s) => `${cmd}: loading ${dir}: ${formatBytes(done)} / ${formatBytes(total)} (${Math.floor((100 * done) / Math.max(total, 1))}%), ${s.toFixed(1)} s`, { intervalMs: 250 });
    try {
      await model.store.preload(line.update);
    } finally {
      line.end();
    }
  }
  return { model, chunk };
}
