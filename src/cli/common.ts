// Flags every model-running command shares, and opening the model they name.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ConfigOverrides } from '../checkpoint/config.js';
import { Model } from '../model/model.js';
import { FaultyReader, RetryingReader, parseFaultSpec } from '../store/fault.js';
import { FsReader } from '../store/store.js';
import { UserError } from '../util/errors.js';
import { parseIntFlag } from './args.js';

export const MODEL_OPTIONS = {
  memory: { type: 'string' },
  preset: { type: 'string' },
  ctx: { type: 'string' },
  chunk: { type: 'string' },
  threads: { type: 'string' },
  kernels: { type: 'string' },
  'fast-experts': { type: 'boolean' },
  'no-preload': { type: 'boolean' },
  'mla-latent-eps': { type: 'string' },
  'kimi-linear-biased-weights': { type: 'boolean' },
  'verify-reads': { type: 'boolean' },
  'allow-nonfinite': { type: 'boolean' },
} as const;

export const MODEL_HELP = `model options:
  --memory SIZE                    ceiling on the process's memory, e.g. 2G, 512M, 8GB or bytes;
                                   weights that do not fit are streamed from disk (same output)
  --preset laptop|desktop|workstation|server|max|auto
                                   8 GiB, 32 GiB, 128 GiB, 512 GiB, everything resident, or 90% of
                                   available memory (cgroup limit included; the default)
  --ctx N                          context length the attention cache is planned for (default 4096)
  --threads N                      compute threads (default: available cores; results do not depend on it)
  --kernels wasm|ref               WebAssembly SIMD kernels (default) or the TypeScript reference
  --fast-experts                   optional fast path, off by default: MXFP4 (expert) products with
                                   8-bit activations (llama.cpp q8_0 style; deterministic, but not
                                   the exact numbers: \`k3 bench --fast-experts\` reports its KL cost)
  --no-preload                     read resident weights on first use instead of at start
  --chunk N                        prefill chunk size in tokens (default 64; results do not depend on it)
  --mla-latent-eps reference|config  epsilon of MLA q_a/kv_a norms: 1e-6 as Moonshot's code (default)
                                   or the config's rms_norm_eps (vLLM, llama.cpp)
  --kimi-linear-biased-weights     Kimi Linear: routing weights from the biased scores (HF remote code)
  --verify-reads                   hash every read of bytes with a known sha256 (packed records,
                                   \`k3 verify\` checksums), not only the first; a mismatch exits 4
  --allow-nonfinite                do not stop (exit 4) when a hidden state or logit is NaN / inf`;

export interface ModelFlags {
  memory?: string;
  preset?: string;
  ctx?: string;
  chunk?: string;
  threads?: string;
  kernels?: string;
  'fast-experts'?: boolean;
  'no-preload'?: boolean;
  'mla-latent-eps'?: string;
  'kimi-linear-biased-weights'?: boolean;
  'verify-reads'?: boolean;
  'allow-nonfinite'?: boolean;
}

export async function openModel(cmd: string, dir: string, flags: ModelFlags): Promise<{ model: Model; chunk: number }> {
  if (!fs.existsSync(dir)) throw new UserError(`${cmd}: model directory ${dir} does not exist`);
  if (!fs.statSync(dir).isDirectory()) throw new UserError(`${cmd}: ${dir} is not a directory`);
  const eps = flags['mla-latent-eps'];
  if (eps !== undefined && eps !== 'reference' && eps !== 'config') throw new UserError(`${cmd}: --mla-latent-eps must be reference or config`);
  const overrides: ConfigOverrides = { mlaLatentNormEps: eps ?? 'reference', kimiLinearBiasedWeights: flags['kimi-linear-biased-weights'] ?? false };
  const chunk = parseIntFlag(cmd, 'chunk', flags.chunk, 64, 1);
  const ctx = parseIntFlag(cmd, 'ctx', flags.ctx, 4096, 1);
  const fault = process.env.K3_FAULT_AFTER_READS;
  const spec = process.env.K3_FAULT;
  const faulty = fault !== undefined && /^\d+$/.test(fault) ? new FaultyReader(new FsReader(), Number(fault)) : spec ? new FaultyReader(new FsReader(), parseFaultSpec(spec)) : undefined;
  const reader = faulty ? new RetryingReader(faulty) : undefined;
  const kernels = flags.kernels ?? 'wasm';
  if (kernels !== 'wasm' && kernels !== 'ref') throw new UserError(`${cmd}: --kernels must be wasm or ref`);
  const threads = parseIntFlag(cmd, 'threads', flags.threads, os.availableParallelism(), 1);
  const verifyReads = flags['verify-reads'] ? ('every' as const) : ('first' as const);
  const opts = { overrides, chunk, ctx, reader, verifyReads, budget: { memory: flags.memory, preset: flags.preset } };
  const fastExperts = flags['fast-experts'] ?? false;
  if (fastExperts && kernels === 'ref') throw new UserError(`${cmd}: --fast-experts needs the WebAssembly kernels (--kernels wasm)`);
  const model = kernels === 'ref' ? Model.open(dir, opts) : await Model.load(dir, { ...opts, threads, fastExperts });
  model.checkFinite = !flags['allow-nonfinite'];
  faulty?.classifyBy(model.store.layout, model.config);
  if (!flags['no-preload']) await model.store.preload();
  return { model, chunk };
}

/** Write a file so that it appears only complete: a temporary name, then rename. */
export function writeFileAtomic(file: string, data: Uint8Array | string): void {
  const dir = path.dirname(path.resolve(file));
  if (!fs.existsSync(dir)) throw new UserError(`${file}: directory ${dir} does not exist`);
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw new UserError(`${file}: cannot write (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 1);
  }
}
