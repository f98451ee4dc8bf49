// Opening a model for the library: the same options as the CLI's model flags (src/cli/common.ts
// openModel), as typed values instead of strings.

import * as fs from 'node:fs';
import * as os from 'node:os';
import { Model } from '../model/model.js';
import type { IoMode } from '../store/direct-reader.js';
import type { ByteReader } from '../store/store.js';
import { checkTokenizerFits, loadTokenizer, type Tokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';

export interface LoadOptions {
  /** Ceiling on the process's memory: bytes or a size such as '2G', '512M' (default: the preset). */
  memory?: number | string;
  /** laptop | desktop | workstation | server | max | auto (default auto: 90% of available memory). */
  preset?: string;
  /** Context length the attention cache is planned for (default 4096). */
  ctx?: number;
  /** Prefill chunk size in tokens (default 64; results do not depend on it). */
  chunk?: number;
  /** Compute threads (default: available cores; results do not depend on it). */
  threads?: number;
  /** 'wasm' (default) or 'ref' (the TypeScript reference kernels). */
  kernels?: 'wasm' | 'ref';
  /** Read resident weights at load (default true). */
  preload?: boolean;
  /** Tokenizer directory (default: the model directory; none there = ids only). */
  tokenizer?: string;
  /** Sequences decoded together (default 4). */
  parallel?: number;
  /** Optional MXFP4 fast path with 8-bit activations (not the exact numbers; see `k3 bench --fast-experts`). */
  fastExperts?: boolean;
  /** `fastExperts`, and the bf16 trunk REQUANTIZED at load to 7-bit blocks (not the stored weights; see `k3 bench --fast`). */
  fast?: boolean;
  /** Epsilon of MLA q_a/kv_a norms: 'reference' (1e-6, default) or 'config' (rms_norm_eps). */
  mlaLatentEps?: 'reference' | 'config';
  /** Kimi Linear: routing weights from the biased scores (HF remote code). */
  kimiLinearBiasedWeights?: boolean;
  /** How weights are read from the files: 'direct' (O_DIRECT), 'buffered' (default) or 'auto'. */
  io?: IoMode;
  /** Guess the next MoE layer's experts and read them early (default true). */
  lookahead?: boolean;
  /** Check every read of bytes with a known sha256, not only the first (default false). */
  verifyReads?: boolean;
  /** Do not stop on a NaN / inf hidden state or logit (default false). */
  allowNonfinite?: boolean;
  /** Where weight bytes come from (default: the files, read as `io` says; tests inject read faults here). */
  reader?: ByteReader;
}

export interface Loaded {
  model: Model;
  tok: Tokenizer | null;
  chunk: number;
}

const positiveInt = (name: string, v: number | undefined, def: number): number => {
  if (v === undefined) return def;
  if (!Number.isSafeInteger(v) || v < 1) throw new UserError(`loadModel: ${name} must be an integer >= 1, got ${v}`);
  return v;
};

export async function openForApi(dir: string, o: LoadOptions): Promise<Loaded> {
  if (!fs.existsSync(dir)) throw new UserError(`loadModel: model directory ${dir} does not exist`);
  if (!fs.statSync(dir).isDirectory()) throw new UserError(`loadModel: ${dir} is not a directory`);
  const kernels = o.kernels ?? 'wasm';
  if (kernels !== 'wasm' && kernels !== 'ref') throw new UserError('loadModel: kernels must be wasm or ref');
  const chunk = positiveInt('chunk', o.chunk, 64);
  const ctx = positiveInt('ctx', o.ctx, 4096);
  const threads = positiveInt('threads', o.threads, os.availableParallelism());
  const memory = typeof o.memory === 'number' ? String(o.memory) : o.memory;
  const tokDir = o.tokenizer ?? dir;
  const tok = fs.existsSync(`${tokDir}/tiktoken.model`) ? await loadTokenizer(tokDir) : null;
  if (!tok && o.tokenizer !== undefined) throw new UserError(`loadModel: no tiktoken.model in ${tokDir}`);
  const eps = o.mlaLatentEps ?? 'reference';
  if (eps !== 'reference' && eps !== 'config') throw new UserError('loadModel: mlaLatentEps must be reference or config');
  if (o.fastExperts && kernels === 'ref') throw new UserError('loadModel: fastExperts needs the WebAssembly kernels');
  if (o.fast && kernels === 'ref') throw new UserError('loadModel: fast needs the WebAssembly kernels');
  const opts = {
    overrides: { mlaLatentNormEps: eps, kimiLinearBiasedWeights: o.kimiLinearBiasedWeights ?? false },
    chunk,
    ctx,
    reader: o.reader,
    io: o.io,
    lookahead: o.lookahead ?? true,
    verifyReads: o.verifyReads ? ('every' as const) : ('first' as const),
    budget: { memory, preset: o.preset },
  };
  const model = kernels === 'ref' ? Model.open(dir, opts) : await Model.load(dir, { ...opts, threads, fastExperts: o.fastExperts ?? false, fast: o.fast ?? false });
  model.checkFinite = !o.allowNonfinite;
  try {
    if (tok) checkTokenizerFits('loadModel', tok, tokDir, model.config.vocabSize);
    if (o.preload ?? true) await model.store.preload();
  } catch (e) {
    await model.close();
    throw e;
  }
  return { model, tok, chunk };
}
