// One loop that runs every generation of a model: requests are queued, admitted up to
// `parallel` at a time, their prompts prefilled (each continuing from the longest held prefix
// state, prefix-cache.ts), and all decoding sequences advance together, one token
// each, through one multi-sequence forward (Model.forwardBatch). Prompts go in one chunk per
// turn of the loop (taking turns when several are going in), between decode steps, and the
// loop returns to the event loop after every forward: a long prompt delays others' tokens,
// /health or a stop by one chunk's time, never its whole prefill, a short prompt that comes
// meanwhile is not stuck behind it, and it can be aborted between chunks. Only this loop calls the
// model, so two forward passes never run at once on it. forwardBatch gives each sequence the
// same bytes as a forward of it alone, and each sequence samples with its own Sampler: a
// request's output does not depend on what else runs (docs/NUMERICS.md).

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { sampleConstrained } from '../generate/constrain/index.js';
import { Sampler } from '../generate/sampling.js';
import { prefillStep } from '../generate/prefill.js';
import { TextStopper, type StopReason } from '../generate/stop.js';
import type { Tokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { generateAlone } from './alone.js';
import { logprobsOf, type GenerationResult, type JobOptions, type TokenEvent } from './events.js';
import { PrefixCache } from './prefix-cache.js';

interface Job {
  prompt: number[];
  opts: JobOptions;
  sampler: Sampler;
  stopper: TextStopper;
  onToken: (e: TokenEvent) => void;
  done: (r: GenerationResult) => void;
  fail: (e: unknown) => void;
  state: SequenceState | null;
  logits: Float32Array | null;
  cached: number;
  t0: number;
  tStart: number;
  tFirst: number;
  tPrompt: number;
  prefilled: boolean;
}

export interface EngineStats {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  decodeSeconds: number;
  active: number;
  queued: number;
}

const yieldToEvents = (): Promise<void> => new Promise((r) => setImmediate(r));

export class Engine {
  private readonly queue: Job[] = [];
  private readonly active: Job[] = [];
  /** Jobs whose prompts are going in, chunk by chunk, taking turns (the next one first). */
  private readonly prefilling: Job[] = [];
  private running = false;
  /** A generation that runs alone (exclusive) holds the model; the batched loop waits for it and it for the loop. */
  private held = false;
  private readonly waiters: Array<() => void> = [];
  private readonly closing = new AbortController();
  readonly cache: PrefixCache;
  readonly totals = { requests: 0, promptTokens: 0, cachedTokens: 0, completionTokens: 0, decodeSeconds: 0 };

  constructor(
    readonly model: Model,
    readonly tok: Tokenizer | null,
    readonly opts: { parallel: number; chunk: number; cacheBytes: number },
  ) {
    this.cache = new PrefixCache(model, opts.cacheBytes);
  }

  get stats(): EngineStats {
    return { ...this.totals, active: this.active.length + this.prefilling.length, queued: this.queue.length };
  }

  /** Queue a generation; resolves when it ends (stop, limit or abort). */
  run(prompt: number[], opts: JobOptions, onToken: (e: TokenEvent) => void = () => {}): Promise<GenerationResult> {
    const V = this.model.config.vocabSize;
    if (prompt.length === 0) throw new UserError('prompt is empty');
    for (const id of prompt) if (!Number.isInteger(id) || id < 0 || id >= V) throw new UserError(`token id ${id} is out of range (vocabulary ${V})`);
    const sampler = new Sampler(opts.sampling);
    const stopIds = opts.constraint ? [...opts.stopIds, ...opts.constraint.stopIds] : opts.stopIds;
    const stopper = new TextStopper(this.tok, { stopIds, stopStrings: opts.stopStrings, maxTokens: opts.maxTokens });
    if ((opts.spec ?? 0) > 0 || opts.drafter !== undefined || opts.report) return this.alone(prompt, opts, sampler, stopper, onToken);
    return new Promise((done, fail) => {
      const now = performance.now();
      this.queue.push({ prompt, opts, sampler, stopper, onToken, done, fail, state: null, logits: null, cached: 0, t0: now, tStart: now, tFirst: now, tPrompt: now, prefilled: false });
      if (!this.running && !this.held) void this.loop();
    });
  }

  private async alone(prompt: number[], opts: JobOptions, sampler: Sampler, stopper: TextStopper, onToken: (e: TokenEvent) => void): Promise<GenerationResult> {
    const t0 = performance.now();
    const signal = opts.signal ? AbortSignal.any([opts.signal, this.closing.signal]) : this.closing.signal;
    const r = await this.exclusive(() => generateAlone(this.model, prompt, { ...opts, signal }, this.opts.chunk, sampler, stopper, onToken));
    r.timings.queueSeconds = (performance.now() - t0) / 1000 - r.timings.promptSeconds - r.timings.decodeSeconds;
    this.totals.requests++;
    this.totals.promptTokens += r.promptTokens;
    this.totals.completionTokens += r.ids.length;
    this.totals.decodeSeconds += r.timings.decodeSeconds;
    return r;
  }

  /**
   * Run `f` with the model to itself (a generation alone, a chat session's turn): it starts when
   * the batched loop has drained and no other such call holds the model; requests that come
   * meanwhile queue and start after it.
   */
  async exclusive<T>(f: () => Promise<T>): Promise<T> {
    while (this.running || this.held) await new Promise<void>((r) => this.waiters.push(r));
    this.held = true;
    try {
      return await f();
    } finally {
      this.held = false;
      this.wakeWaiters();
    }
  }

  /** The model is free: calls waiting for it go first (one takes it, the rest wait again), else the queued requests. */
  private wakeWaiters(): void {
    if (this.waiters.length > 0) for (const w of this.waiters.splice(0)) w();
    else if (!this.running && !this.held && this.queue.length > 0) void this.loop();
  }

  private async loop(): Promise<void> {
    this.running = true;
    try {
      while (this.queue.length > 0 || this.active.length > 0 || this.prefilling.length > 0) {
        this.dropAborted();
        while (this.active.length + this.prefilling.length < this.opts.parallel && this.queue.length > 0) this.admit(this.queue.shift()!);
        const job = this.prefilling[0];
        if (job) {
          await this.guard([job], () => this.prefillChunk(job));
          if (this.prefilling[0] === job) this.prefilling.push(this.prefilling.shift()!); // the next chunk is another prompt's
          await yieldToEvents();
          this.dropAborted();
        }
        if (this.active.length > 0) {
          const batch = [...this.active];
          await this.guard(batch, () => this.decodeStep(batch));
          await yieldToEvents();
        }
      }
    } finally {
      this.running = false;
      queueMicrotask(() => this.wakeWaiters());
    }
  }

  /** A failure in a forward pass (a read fault) fails the jobs of that pass; the loop goes on. */
  private async guard(jobs: Job[], f: () => Promise<void>): Promise<void> {
    try {
      await f();
    } catch (e) {
      for (const j of jobs) {
        const i = this.active.indexOf(j);
        if (i >= 0) this.active.splice(i, 1);
        this.unPrefill(j);
        if (j.state) this.model.release(j.state);
        j.state = null;
        j.fail(e);
      }
    }
  }

  private dropAborted(): void {
    for (let i = this.queue.length - 1; i >= 0; i--) {
      const j = this.queue[i]!;
      if (j.opts.signal?.aborted) {
        this.queue.splice(i, 1);
        this.finish(j, 'aborted');
      }
    }
    for (const j of [...this.active]) if (j.opts.signal?.aborted) this.finish(j, 'aborted');
    for (const j of [...this.prefilling]) if (j.opts.signal?.aborted) this.finish(j, 'aborted');
  }

  private unPrefill(job: Job): void {
    const i = this.prefilling.indexOf(job);
    if (i >= 0) this.prefilling.splice(i, 1);
  }

  /** Start a job: from the longest held prefix; a prompt held whole (with its logits) decodes at once. */
  private admit(job: Job): void {
    job.tStart = performance.now();
    const { state, logits: held } = this.cache.take(job.prompt);
    job.state = state;
    job.cached = state.position;
    if (held) this.prefilled(job, held);
    else this.prefilling.push(job);
  }

  /** The next chunk of the prefilling job's prompt. */
  private async prefillChunk(job: Job): Promise<void> {
    const logits = await prefillStep(this.model, job.state!, job.prompt, this.opts.chunk);
    if (!logits) return;
    this.unPrefill(job);
    this.cache.keep(job.state!, logits);
    this.prefilled(job, logits);
  }

  private prefilled(job: Job, logits: Float32Array): void {
    job.tPrompt = performance.now();
    job.prefilled = true;
    this.active.push(job);
    this.emit(job, logits);
  }

  private async decodeStep(batch: Job[]): Promise<void> {
    const t = performance.now();
    const states = batch.map((j) => j.state!);
    const last = batch.map((j) => [j.stopper.ids[j.stopper.ids.length - 1]!]);
    const logits = await this.model.forwardBatch(states, last, 'last');
    this.totals.decodeSeconds += (performance.now() - t) / 1000;
    batch.forEach((j, i) => {
      if (this.active.includes(j)) this.emit(j, logits[i]!);
    });
  }

  /** Choose the next id of `job` from the logits of its last position, report it, stop if done. */
  private emit(job: Job, logits: Float32Array): void {
    const V = this.model.config.vocabSize;
    const s = job.sampler.opts;
    const penalized = s.repetitionPenalty !== 1 || s.presencePenalty !== 0 || s.frequencyPenalty !== 0;
    const history = penalized ? [...job.prompt, ...job.stopper.ids] : [];
    const c = job.opts.constraint;
    // the constraint masks a copy: the prefix cache holds these logits
    const id = c ? sampleConstrained(job.sampler, logits, history, V, c, job.opts.maxTokens - job.stopper.ids.length) : job.sampler.sample(logits, history, V);
    c?.accept(id);
    if (job.stopper.ids.length === 0) job.tFirst = performance.now();
    const { text, stop } = job.stopper.push(id);
    const ev: TokenEvent = { id, text };
    if (job.opts.logprobs !== undefined) Object.assign(ev, logprobsOf(logits, V, id, job.opts.logprobs));
    job.onToken(ev);
    if (stop) this.finish(job, job.stopper.reason!);
  }

  private finish(job: Job, reason: StopReason | 'aborted'): void {
    const i = this.active.indexOf(job);
    if (i >= 0) this.active.splice(i, 1);
    this.unPrefill(job);
    if (reason === 'aborted') job.stopper.finish('interrupted');
    if (job.state) {
      if (reason !== 'aborted') this.cache.keep(job.state);
      this.model.release(job.state);
      job.state = null;
    }
    const now = performance.now();
    const n = job.stopper.ids.length;
    const started = job.prefilled;
    const decodeSeconds = started ? (now - job.tPrompt) / 1000 : 0;
    this.totals.requests++;
    this.totals.promptTokens += job.prompt.length;
    this.totals.cachedTokens += job.cached;
    this.totals.completionTokens += n;
    job.done({
      ids: [...job.stopper.ids],
      text: job.stopper.text,
      stopReason: reason,
      promptTokens: job.prompt.length,
      cachedTokens: job.cached,
      timings: {
        queueSeconds: (job.tStart - job.t0) / 1000,
        promptSeconds: started ? (job.tPrompt - job.tStart) / 1000 : 0,
        decodeSeconds,
        firstTokenSeconds: started ? (job.tFirst - job.t0) / 1000 : 0,
        tokensPerSecond: decodeSeconds > 0 && n > 1 ? (n - 1) / decodeSeconds : 0,
      },
    });
  }

  /** Wait for the loop to drain, then free the held states. */
  async close(): Promise<void> {
    for (const j of [...this.queue, ...this.active, ...this.prefilling]) if (!j.opts.signal?.aborted) j.opts.signal = AbortSignal.abort();
    this.closing.abort();
    while (this.running || this.held) await yieldToEvents();
    this.cache.clear();
  }
}
