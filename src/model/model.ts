// A loaded model: its config, the store its weights are borrowed from, and the forward pass of
// its architecture. Forward consumes new tokens, advances the sequence state, and returns the
// logits of the positions asked for.

import * as os from 'node:os';
import type { ConfigOverrides, ModelConfig } from '../checkpoint/config.js';
import { checkFloor, type Plan } from '../store/plan.js';
import { WeightStore, prepareStore, type StoreOptions } from '../store/store.js';
import { KERNEL_PIECES } from '../graph/pieces.js';
import { Compute, KernelGroup, REF_COMPUTE, maddHint } from '../graph/compute.js';
import { makeBlock, type Block } from './decoder.js';
import { forwardK2 } from './k2.js';
import { forwardK3 } from './k3.js';
import { forwardKimiLinear } from './kimi_linear.js';
import { endKdaSweep } from './kda.js';
import { SequenceState, stateSize } from './state.js';
import { FiniteWatch } from './finite.js';
import { checkTaps, type Taps } from './taps.js';

export type LogitRows = 'all' | 'last' | 'none';

const FORWARD = { k2: forwardK2, kimi_linear: forwardKimiLinear, k3: forwardK3 } as const;

export class Model {
  private readonly block: Block;

  readonly config: ModelConfig;

  /** The kernels this model's products run on (REF_COMPUTE for the reference). */
  private readonly compute: Compute;
  /** The kernel group this model created (Model.load) and closes; never another model's. */
  private owned: KernelGroup | null = null;

  private readonly watch = new FiniteWatch();

  constructor(readonly store: WeightStore, compute: Compute = REF_COMPUTE) {
    this.config = store.cfg;
    this.compute = compute;
    this.block = makeBlock(store.cfg, store, compute);
    this.block.watch = this.watch;
  }

  /** Stop (exit 4) at NaN / inf hidden states or logits (default); false for debugging a model. */
  get checkFinite(): boolean {
    return this.watch.enabled;
  }

  set checkFinite(on: boolean) {
    this.watch.enabled = on;
  }

  /** Open a checkpoint with a memory budget (default: everything resident), computing with the TypeScript reference kernels. */
  static open(dir: string, opts: StoreOptions & { overrides?: ConfigOverrides } = {}): Model {
    return new Model(WeightStore.open(dir, { pieces: KERNEL_PIECES, ...opts, stateSize }));
  }

  /** The memory plan `open` / `load` would make, without refusing a budget below the floor or opening files.
   *  The plan counts `threads` (default 1, as `open`; `load`'s default is every core): give load's. */
  static plan(dir: string, opts: StoreOptions & { overrides?: ConfigOverrides } = {}): Plan {
    return WeightStore.plan(dir, { ...opts, stateSize });
  }

  /**
   * Open a checkpoint with the WebAssembly kernels on `threads` threads: weight memory is
   * allocated inside the kernels' memories so they multiply straight from it. Same numbers as
   * `open` (docs/NUMERICS.md). The kernels are the model's own: several models, each with its
   * own threads, can be loaded in one process.
   */
  static async load(dir: string, opts: StoreOptions & { overrides?: ConfigOverrides; threads?: number; relaxed?: boolean; fastExperts?: boolean; fast?: boolean } = {}): Promise<Model> {
    // the kernels' threads are counted in the plan (KernelGroup.create's default: every core)
    const threads = opts.threads ?? os.availableParallelism();
    const prepared = prepareStore(dir, { ...opts, threads, stateSize });
    const plan = WeightStore.planOf(prepared);
    checkFloor(plan); // refuse a budget below the floor before the kernels' memory is allocated
    const weightBytes = plan.ringBytes + plan.pinnedBytes + plan.expertCacheBytes;
    const group = await KernelGroup.create(weightBytes, { threads, relaxed: opts.relaxed, maxCols: WeightStore.maxCols(prepared) });
    // optional, off by default: mxfp4 (expert) products with 8-bit activations (kernels/wasm/q8.ts)
    group.fastExperts = (opts.fastExperts ?? false) || (opts.fast ?? false);
    try {
      // optional, off by default: bf16 trunk requantized to 7-bit blocks as read (kernels/wasm/q8-trunk.ts)
      const alloc = (n: number) => group.alloc(n);
      const store = WeightStore.fromPrepared(prepared, { pieces: KERNEL_PIECES, ...opts, fastTrunk: opts.fast ?? false, alloc, allocTogether: opts.allocTogether ?? ((n) => group.allocTogether(n)) });
      const model = new Model(store, new Compute(group));
      model.owned = group;
      const madd = (opts.relaxed ?? true) ? maddHint() : null;
      if (madd) (opts.notice ?? ((m: string) => process.stderr.write(m + '\n')))(`note: ${madd}`);
      if (opts.fast) {
        const n = model.store.requantized;
        (opts.notice ?? ((m: string) => process.stderr.write(m + '\n')))(`--fast: ${n.matrices} bf16 trunk matrices (${(n.bytes / 2 ** 20).toFixed(0)} MiB) are REQUANTIZED to 7-bit blocks as they are read, not used as stored; products with 8-bit activations (also the MXFP4 experts); not the exact numbers`);
      }
      return model;
    } catch (e) {
      await group.close();
      throw e;
    }
  }

  /** Threads the kernels run on (1 for the TypeScript reference). */
  get threads(): number {
    return this.compute.group?.threads ?? 1;
  }

  /** This model's kernel group (null for the TypeScript reference), e.g. to switch its fast experts or to benchmark its kernels. */
  get kernels(): KernelGroup | null {
    return this.compute.group;
  }

  private readonly spare: SequenceState[] = [];

  /** A fresh sequence: a released one cleared for reuse when there is one (its memory is not freed). */
  newState(): SequenceState {
    const s = this.spare.pop();
    if (s) {
      s.clear();
      return s;
    }
    // in this model's kernel memory when it has kernels (plain arrays for the reference)
    const c = this.compute;
    return new SequenceState(this.config, this.store.plan.ctx, c.group ? (n) => c.allocF32(n) : null);
  }

  /** Give back a state the caller will not use again, so the next newState() reuses its memory. */
  release(state: SequenceState): void {
    if (state.cfg === this.config && !this.spare.includes(state)) this.spare.push(state);
  }

  /**
   * Process `ids` as the next positions of `state`, `chunk` tokens per call (the result does not
   * depend on the chunk size). Returns logits [rows, V]: every position, the last one, or none.
   * `taps` (K3 only): also hand out the states after some layers for every position (taps.ts);
   * the logits are the same bytes with or without.
   */
  async forward(state: SequenceState, ids: number[], rows: LogitRows = 'all', chunk = 64, taps?: Taps): Promise<Float32Array> {
    const V = this.config.vocabSize;
    if (taps) {
      if (this.config.arch !== 'k3') throw new Error(`taps: only K3's forward hands out hidden states (this model is ${this.config.arch})`);
      checkTaps(taps, this.config.numLayers);
    }
    const T = ids.length;
    const nOut = rows === 'all' ? T : rows === 'last' && T > 0 ? 1 : 0;
    const out = new Float32Array(nOut * V);
    let written = 0;
    for (let s = 0; s < T; s += chunk) {
      const part = ids.slice(s, s + chunk);
      const want: number[] = [];
      for (let t = 0; t < part.length; t++) if (rows === 'all' || (rows === 'last' && s + t === T - 1)) want.push(t);
      const logits = taps ? await forwardK3(this.block, state, part, want, taps, state.position) : await FORWARD[this.config.arch](this.block, state, part, want);
      this.watch.endChunk(logits, state.tokens.length, this.config.numLayers);
      state.tokens.push(...part);
      out.set(logits, written);
      written += logits.length;
    }
    return out;
  }

  /**
   * One forward pass over several sequences, each with its own state and its own new tokens:
   * every linear layer runs once over all their rows (each weight read once for the batch), and
   * attention runs per sequence on its own state. Each sequence's logits are the same bytes as
   * `forward(state, ids, rows)` alone would give. Returns one logits array per sequence.
   */
  async forwardBatch(states: readonly SequenceState[], ids: readonly number[][], rows: LogitRows = 'last'): Promise<Float32Array[]> {
    if (states.length !== ids.length) throw new Error(`forwardBatch: ${states.length} states for ${ids.length} token lists`);
    if (new Set(states).size !== states.length) throw new Error('forwardBatch: a state appears twice');
    const V = this.config.vocabSize;
    const all: number[] = [];
    const want: number[] = [];
    const counts: number[] = [];
    ids.forEach((seq) => {
      const base = all.length;
      const w = rows === 'all' ? seq.map((_, t) => base + t) : rows === 'last' && seq.length > 0 ? [base + seq.length - 1] : [];
      want.push(...w);
      counts.push(w.length);
      all.push(...seq);
    });
    const logits = await FORWARD[this.config.arch](this.block, states.map((state, i) => ({ state, T: ids[i]!.length })), all, want);
    states.forEach((s, i) => s.tokens.push(...ids[i]!));
    let off = 0;
    return counts.map((n) => logits.slice(off * V, (off += n) * V));
  }

  /**
   * Start a speculative sweep on `state`: the forward calls until endSweep record what cutting
   * them back needs (KDA: the state before, and per token the recurrence's inputs).
   */
  startSweep(state: SequenceState): void {
    state.startSweep();
  }

  /**
   * End the sweep keeping only its first `keep` tokens: the state becomes byte for byte what
   * forwarding those tokens alone would have left. No weight is read: KDA re-runs only its
   * recurrence over the kept tokens, conv tails are restored, MLA caches truncated.
   */
  endSweep(state: SequenceState, keep: number): void {
    const p0 = state.sweepStart;
    if (p0 === null) throw new Error('endSweep without startSweep');
    const n = state.position - p0;
    if (!Number.isInteger(keep) || keep < 0 || keep > n) throw new Error(`endSweep: keep ${keep} of ${n} tokens`);
    for (const k of state.kda) if (k) endKdaSweep(this.compute, this.block.kda!, k, keep);
    for (const m of state.mla) if (m) m.length = p0 + keep;
    state.tokens.length = p0 + keep;
    state.sweepStart = null;
  }

  async close(): Promise<void> {
    await this.store.close();
    const group = this.owned;
    if (group) {
      this.owned = null;
      await group.close();
    }
  }
}
