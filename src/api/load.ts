// Opening a model directory: the one place that does it, for the library (`loadModel`, options
// as typed values) and for every CLI command (src/cli/common.ts turns flags into these options
// and names them as flags in errors).

import * as fs from 'node:fs';
import * as os from 'node:os';
import { loadConfig } from '../checkpoint/config.js';
import { loadDrafter } from '../checkpoint/drafter.js';
import { drafterMemoryBytes } from '../generate/dspark-draft.js';
import { Model } from '../model/model.js';
import { IO_MODES, makeReader, type IoMode } from '../store/direct-reader.js';
import { drafterPlanEnv } from '../store/drafter-plan.js';
import { FaultyReader, RetryingReader, parseFaultSpec } from '../store/fault.js';
import { FsReader, type ByteReader } from '../store/store.js';
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
  /** How weights are read from the files: 'direct' (O_DIRECT), 'buffered' or 'auto' (default: direct where the filesystem allows it). */
  io?: IoMode;
  /** Guess the next MoE layer's experts and read them early (default true). */
  lookahead?: boolean;
  /** Check every read of bytes with a known sha256, not only the first (default false). */
  verifyReads?: boolean;
  /** Do not stop on a NaN / inf hidden state or logit (default false). */
  allowNonfinite?: boolean;
  /** Where weight bytes come from (default: the files, read as `io` says; tests inject read faults here). */
  reader?: ByteReader;
  /** Progress of reading the resident weights at load: bytes done, bytes in all. */
  onProgress?: (done: number, total: number) => void;
  /**
   * A DSpark drafter the generations will use (GenerateOptions.drafter): planned for at load, its
   * weights, KV cache and working memory kept off `memory` and K3's lm_head pinned first when the
   * drafter reads it too. Without it a drafter must fit beside the model's plan.
   */
  drafter?: string;
}

/** Who opens the model, for error messages: `loadModel` names options as such, a CLI command as flags. */
export interface Opener {
  who: string;
  /** How an option is named in a message (`chunk` -> `--chunk` for the CLI). */
  name: (option: keyof LoadOptions) => string;
  /** The tokenizer, when the caller has loaded it already (`k3 run` needs it before the plan's ctx is known). */
  tok?: Tokenizer | null;
  /** The caller runs one sequence at a time (`k3 run`, `k3 chat`, `k3 logits`): the plan counts no batch of `parallel` sequences. */
  oneSequence?: boolean;
  /** The tests' read faults (store/fault.ts): a count of good reads before every read fails, or a
   *  fault spec (`eio:trunk:400`); transient ones (EINTR / EAGAIN) are retried, as a disk's would be. */
  faults?: number | string;
}

export { IO_MODES, type IoMode };

export const LIBRARY: Opener = { who: 'loadModel', name: (o) => o };

export interface Loaded {
  model: Model;
  tok: Tokenizer | null;
  chunk: number;
}

/** The model directory exists and is one (checked first, so a missing folder is named as such). */
export function checkModelDir(who: string, dir: string): void {
  if (!fs.existsSync(dir)) throw new UserError(`${who}: model directory ${dir} does not exist`);
  if (!fs.statSync(dir).isDirectory()) throw new UserError(`${who}: ${dir} is not a directory`);
}

export async function openModelDir(dir: string, o: LoadOptions, by: Opener = LIBRARY): Promise<Loaded> {
  const fail = (msg: string): never => {
    throw new UserError(`${by.who}: ${msg}`);
  };
  const positiveInt = (name: 'chunk' | 'ctx' | 'threads' | 'parallel', def: number): number => {
    const v = o[name];
    if (v === undefined) return def;
    if (!Number.isSafeInteger(v) || v < 1) fail(`${by.name(name)} must be an integer >= 1, got ${v}`);
    return v;
  };
  checkModelDir(by.who, dir);
  const kernels = o.kernels ?? 'wasm';
  if (kernels !== 'wasm' && kernels !== 'ref') fail(`${by.name('kernels')} must be wasm or ref`);
  const chunk = positiveInt('chunk', 64);
  const ctx = positiveInt('ctx', 4096);
  const threads = positiveInt('threads', os.availableParallelism());
  const eps = o.mlaLatentEps ?? 'reference';
  if (eps !== 'reference' && eps !== 'config') fail(`${by.name('mlaLatentEps')} must be reference or config`);
  if (o.fastExperts && kernels === 'ref') fail(`${by.name('fastExperts')} needs the WebAssembly kernels (${by.name('kernels')} wasm)`);
  if (o.fast && kernels === 'ref') fail(`${by.name('fast')} needs the WebAssembly kernels (${by.name('kernels')} wasm)`);
  const tokDir = o.tokenizer ?? dir;
  let tok = by.tok;
  if (tok === undefined) {
    tok = fs.existsSync(`${tokDir}/tiktoken.model`) ? await loadTokenizer(tokDir) : null;
    if (!tok && o.tokenizer !== undefined) fail(`no tiktoken.model in ${tokDir}`);
  }
  const faulty = by.faults === undefined ? undefined : new FaultyReader(makeReader(o.io ?? 'auto', () => new FsReader()), typeof by.faults === 'number' ? by.faults : parseFaultSpec(by.faults));
  const opts = {
    overrides: { mlaLatentNormEps: eps, kimiLinearBiasedWeights: o.kimiLinearBiasedWeights ?? false },
    chunk,
    ctx,
    parallel: by.oneSequence ? 0 : positiveInt('parallel', 4), // their states count in the plan
    reader: faulty ? new RetryingReader(faulty) : o.reader,
    io: o.io,
    lookahead: o.lookahead ?? true,
    verifyReads: o.verifyReads ? ('every' as const) : ('first' as const),
    budget: { memory: typeof o.memory === 'number' ? String(o.memory) : o.memory, preset: o.preset },
    ...(o.drafter !== undefined && kernels === 'wasm' ? drafterPlanning(dir, o.drafter, ctx) : {}),
  };
  const model = kernels === 'ref' ? Model.open(dir, opts) : await Model.load(dir, { ...opts, threads, fastExperts: o.fastExperts ?? false, fast: o.fast ?? false });
  model.checkFinite = !o.allowNonfinite;
  try {
    if (tok) checkTokenizerFits(by.who, tok, tokDir, model.config.vocabSize);
    faulty?.classifyBy(model.store.layout, model.config); // it learns what each read is of
    if (o.preload ?? true) await model.store.preload(o.onProgress);
  } catch (e) {
    await model.close();
    throw e;
  }
  return { model, tok, chunk };
}

/**
 * How the model directory `dir` is planned for drafter `drafterDir` (LoadOptions.drafter): as
 * `k3 plan --drafter` plans it (drafterPlanEnv), with the drafter's weights, KV cache for `ctx`
 * positions and working memory kept off the budget.
 */
function drafterPlanning(dir: string, drafterDir: string, ctx: number): { reserveBytes: number; pinFirst?: readonly string[]; kernelCols?: number } {
  const d = loadDrafter(drafterDir);
  const { pinFirst, kernelCols } = drafterPlanEnv({}, loadConfig(dir), d);
  return { reserveBytes: drafterMemoryBytes(d, ctx), pinFirst, kernelCols };
}
