// A conversation that keeps its sequence state between turns.
//
// The conversation is held as the exact ids the model has seen or produced (`history`): each
// user turn is the chat format's rendering of that message plus the generation prompt, each
// assistant turn is the ids actually sampled (re-encoding the reply's text could give other ids
// and break the prefix), closed by the format's end of message if the reply did not end with a
// stop id. A turn renders the conversation so far plus the new message; the state's processed
// tokens must be a prefix of it, and only the rest goes through model.forward. If they are not
// a prefix (a turn interrupted while its prompt was read, a template that does not render
// message by message), the state is reset and the whole conversation reprocessed; /stats says so.
//
// The state file's format is in state-file.ts.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { renderChat, stopTokenIds, type ChatMessage, type Tokenizer, type TokenizerFamily } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { Sampler, deriveSeed, type SamplingOptions } from './sampling.js';
import { loadState, saveState, type LoadedState } from './state-file.js';
import { TextStopper, usableStopIds, type StopReason } from './stop.js';
import { storePriors, sweep, sweepCost, widthDrafts, type Choose } from './spec.js';
import { WidthModel } from './spec-width.js';
import { acceptDraft, acceptDraftFrom } from './spec-sample.js';
import { loadDSpark, type DSparkDrafter } from './dspark-draft.js';
import { SuffixDrafter } from './suffix-draft.js';

export interface SessionOptions {
  /** Chat format: default K3 for K3 models, else K2 (Kimi Linear shares K2's). */
  format?: TokenizerFamily;
  /** System message of the first turn. */
  system?: string;
  sampling?: SamplingOptions;
  /** Most tokens per reply (default 512). */
  maxTokens?: number;
  stopStrings?: readonly string[];
  /** Do not stop on end-of-message / eos ids (the reply runs to maxTokens or a stop string). */
  ignoreEos?: boolean;
  /** Prefill chunk size (default 64). */
  chunk?: number;
  /** K3: reason in the think channel first (default true, effort max, as K3's release template). */
  thinking?: boolean;
  /** Speculative decoding: most tokens drafted per step from the longest earlier match in the conversation (suffix-draft.ts) (default 0 = off). */
  spec?: number;
  /** A DSpark drafter directory (docs/DSPARK.md): its block, drafted from K3's tapped states, verified in one
   *  forward per sweep (greedy output is the same bytes). Not with `spec`. */
  drafter?: string;
  /** With `drafter`: verify exactly this many proposals every sweep (at most its block). */
  specWidth?: number;
}

/** What a turn streams to: the reply's text, every generated id, and the flag that stops it. */
export interface TurnIo {
  onText?: (s: string) => void;
  onId?: (id: number) => void;
  abort?: AbortFlag;
}

/** Set `aborted` (e.g. from a SIGINT handler) to stop the turn at the next token. */
export interface AbortFlag {
  aborted: boolean;
}

export interface TurnResult {
  ids: number[];
  text: string;
  reason: StopReason;
  /** The ids run through the model before the first reply token (new context only). */
  promptIds: number[];
  promptSeconds: number;
  decodeTokens: number;
  decodeSeconds: number;
  /** Tokens of the conversation that were already in the state and not reprocessed. */
  reused: number;
  /** Why the state was rebuilt from the start, or null when it was reused. */
  rebuilt: string | null;
  /** The turn was interrupted while its prompt was being read (no reply). */
  interruptedInPrompt: boolean;
}

const yieldToEvents = (): Promise<void> => new Promise((r) => setImmediate(r));

export class ChatSession {
  state: SequenceState;
  /** The conversation's ids; the first `state.position` are in the state (when consistent). */
  history: number[] = [];
  /** The last reply ended without a stop id: the next turn closes it. */
  private open = false;
  /** A note for /stats about how the state came to be (load, reset). */
  private note: string | null = null;
  // (spec) indexes the whole conversation once: a turn adds only its new ids; an edit rebuilds
  private readonly drafter = new SuffixDrafter();
  /** The DSpark drafter (SessionOptions.drafter): the taps of every forward of the session go to it. */
  private readonly dspark: DSparkDrafter | null;
  /** Most drafts per sweep: spec, or the drafter's width. */
  private readonly width: number;
  /** How many drafts each sweep verifies (spec-width.ts), learnt over the session's turns; null with --spec-width. */
  private readonly widths: WidthModel | null;
  lastTurn: TurnResult | null = null;
  turns = 0;
  readonly format: TokenizerFamily;
  readonly sampler: Sampler;
  readonly stopIds: number[];
  private readonly chunk: number;
  private readonly maxTokens: number;

  constructor(
    readonly model: Model,
    readonly tok: Tokenizer,
    readonly opts: SessionOptions = {},
  ) {
    this.state = model.newState();
    this.format = opts.format ?? (model.config.arch === 'k3' ? 'k3' : 'k2');
    this.sampler = new Sampler(opts.sampling);
    this.stopIds = opts.ignoreEos ? [] : usableStopIds(tok, stopTokenIds(tok, model.config.eosTokenIds), model.config.vocabSize);
    this.chunk = opts.chunk ?? 64;
    this.maxTokens = opts.maxTokens ?? 512;
    this.dspark = sessionDrafter(model, opts);
    this.width = this.dspark ? (opts.specWidth ?? this.dspark.config.block) : (opts.spec ?? 0);
    this.widths = opts.specWidth !== undefined ? null : new WidthModel(storePriors(model));
  }

  private render(messages: ChatMessage[], gen: boolean): number[] {
    return renderChat(this.tok, messages, { format: this.format, addGenerationPrompt: gen, thinking: this.opts.thinking }).ids;
  }

  /** The ids a new user message adds: its rendering plus the generation prompt. The first turn
   *  renders [system?, user]; later turns the difference between [S, user] with the prompt and
   *  [S] without it (S a system message, so no template inserts a default one). */
  userPiece(text: string): number[] {
    const user: ChatMessage = { role: 'user', content: text };
    if (this.history.length === 0) return this.render(this.opts.system !== undefined ? [{ role: 'system', content: this.opts.system }, user] : [user], true);
    const anchor: ChatMessage = { role: 'system', content: this.opts.system ?? '' };
    const before = this.render([anchor], false);
    const after = this.render([anchor, user], true);
    if (isPrefix(before, after)) return after.slice(before.length);
    return this.render([user], true);
  }

  /** The ids that close a reply cut short: the format's assistant message minus its prompt. */
  closing(): number[] {
    const anchor: ChatMessage = { role: 'user', content: 'x' };
    const prompt = this.render([anchor], true);
    const full = this.render([anchor, { role: 'assistant', content: '' }], false);
    if (isPrefix(prompt, full) && full.length > prompt.length) return full.slice(prompt.length);
    const end = this.tok.specialId(this.format === 'k3' ? '<|end_of_msg|>' : '<|im_end|>') ?? this.stopIds[0];
    return end === undefined ? [] : [end];
  }

  /** One user turn: feed the new context, then generate the reply (streamed to onText; onId
   *  sees every generated id, the stop id included). */
  async turn(text: string, io: TurnIo = {}): Promise<TurnResult> {
    const abort = io.abort ?? { aborted: false };
    const target = [...this.history, ...(this.open ? this.closing() : []), ...this.userPiece(text)];
    const none = { ids: [], text: '', promptSeconds: 0, decodeTokens: 0, decodeSeconds: 0, rebuilt: null, interruptedInPrompt: false };
    // The context the memory was planned for (--ctx) ends the conversation, as in `k3 run`.
    if (target.length >= this.ctx) return (this.lastTurn = { ...none, reason: 'context', promptIds: [], reused: 0 });
    let rebuilt: string | null = null;
    const have = this.state.tokens;
    let i = 0;
    while (i < have.length && i < target.length && have[i] === target[i]) i++;
    if (i < have.length) {
      rebuilt = `the cached state (${have.length} tokens) diverged from the conversation at token ${i}: reset and reprocessed ${target.length} tokens`;
      this.model.release(this.state);
      this.state = this.model.newState();
    }
    const reused = this.state.position;
    const feed = target.slice(reused);
    const t0 = performance.now();
    const logits = await this.feed(feed, abort);
    const promptSeconds = (performance.now() - t0) / 1000;
    if (typeof logits === 'number') {
      // The state now holds part of this prompt: the next turn will not match it and rebuilds.
      return (this.lastTurn = { ...none, reason: 'interrupted', promptIds: feed.slice(0, logits), promptSeconds, reused, rebuilt, interruptedInPrompt: true });
    }
    this.history = target;
    this.open = false;
    this.turns++;
    const stopper = new TextStopper(this.tok, { stopIds: this.stopIds, stopStrings: this.opts.stopStrings, maxTokens: this.maxTokens });
    this.sampler.reseed(deriveSeed(this.sampler.opts.seed, target.length));
    // sampled replies: the drafter samples its block at the sampler's temperature (its own stream of the turn's seed)
    if (this.dspark && !this.sampler.greedy) this.dspark.sampleFrom(this.sampler.opts.temperature, BigInt(deriveSeed(this.sampler.opts.seed, target.length)) ^ 0x44537061726bn);
    const t1 = performance.now();
    const decodeTokens = await this.reply(logits, stopper, io, abort);
    const decodeSeconds = (performance.now() - t1) / 1000;
    this.open = stopper.reason !== 'stop_token';
    this.note = null;
    return (this.lastTurn = { ids: stopper.ids, text: stopper.text, reason: stopper.reason!, promptIds: feed, promptSeconds, decodeTokens, decodeSeconds, reused, rebuilt, interruptedInPrompt: false });
  }

  /** Run `feed` through the model in chunks (with the drafter's taps): the last logits, or how many ids went in before an abort. */
  private async feed(feed: number[], abort: AbortFlag): Promise<Float32Array | number> {
    const chunk = this.chunk;
    let logits: Float32Array = new Float32Array(0);
    for (let s = 0; s < feed.length; s += chunk) {
      const part = feed.slice(s, s + chunk);
      logits = await this.model.forward(this.state, part, s + chunk >= feed.length ? 'last' : 'none', chunk, this.dspark?.taps);
      await yieldToEvents();
      if (abort.aborted && s + chunk < feed.length) return s + part.length;
    }
    return logits;
  }

  /** Generate the reply from the prompt's last logits: sweeps of drafts (spec, drafter) or plain steps; returns the decode steps' tokens. */
  private async reply(logits: Float32Array, stopper: TextStopper, io: TurnIo, abort: AbortFlag): Promise<number> {
    const V = this.model.config.vocabSize;
    let emitted = 0;
    const emit = (id: number): boolean => {
      emitted++;
      this.history.push(id);
      io.onId?.(id);
      const r = stopper.push(id);
      if (r.text) io.onText?.(r.text);
      if (r.stop) return true;
      const why = this.history.length >= this.ctx ? 'context' : abort.aborted ? 'interrupted' : null;
      if (why === null) return false;
      const rest = stopper.finish(why); // finish even when nobody reads the text
      if (rest) io.onText?.(rest);
      return true;
    };
    // The id at each position: sampled, or a draft decided by the acceptance rule (DSpark's against its own q).
    const choose: Choose = (l, draft, i) => {
      if (draft === undefined) return { id: this.sampler.sample(l, this.history, V), accepted: false };
      const q = this.dspark?.lastQ[i];
      return q ? acceptDraftFrom(this.sampler, l, draft, q, this.history, V) : acceptDraft(this.sampler, l, draft, this.history, V);
    };
    let decodeTokens = 0;
    let stopped = emit(choose(logits, undefined, 0).id);
    while (!stopped) {
      const confidence = () => (this.dspark ? this.dspark.lastConfidence : this.drafter.lastConfidence);
      const drafts = widthDrafts(this.widths, Math.min(this.width, this.maxTokens - emitted - 1), (most) => this.draftFor(most), confidence);
      const before = { ...this.model.store.stats };
      const t0 = performance.now();
      const r = await sweep(this.model, this.state, this.history[this.history.length - 1]!, drafts, choose, emit, this.dspark?.taps);
      this.widths?.record(sweepCost(before, this.model.store.stats, drafts.length, r.accepted, (performance.now() - t0) / 1000));
      decodeTokens += r.emitted;
      stopped = r.stopped;
      await yieldToEvents();
    }
    return decodeTokens;
  }

  /** Up to `room` drafts: DSpark's block when its taps cover the conversation (not after a /load), else the suffix drafter's. */
  private draftFor(room: number): number[] {
    const d = this.dspark;
    if (!d) return this.drafter.draft(this.history, room);
    return d.covers(this.history.length - 1) ? d.draft(this.history, room) : [];
  }

  /** Tokens the conversation may hold (--ctx). */
  get ctx(): number {
    return this.model.store.plan.ctx;
  }

  /** Forget the conversation (the system message is used again on the next turn). */
  reset(): void {
    this.model.release(this.state);
    this.state = this.model.newState();
    this.dspark?.forget();
    this.history = [];
    this.open = false;
    this.lastTurn = null;
    this.note = 'reset';
  }

  /** Give the state's memory back (the session is not used after). */
  close(): void {
    this.model.release(this.state);
  }

  /** The state is consistent with the conversation (its tokens are a prefix of history). */
  get consistent(): boolean {
    const have = this.state.tokens;
    return have.length <= this.history.length && isPrefix(have, this.history);
  }

  save(file: string): number {
    if (!this.consistent) throw new UserError(`${file}: not saved: the last turn was interrupted while its prompt was read, so the state is rebuilt on the next turn; save after it`);
    return saveState(file, this.model, this.state, this.history.slice(this.state.position), this.open);
  }

  load(file: string): LoadedState {
    const l = loadState(file, this.model);
    this.model.release(this.state);
    this.dspark?.forget(); // the loaded positions' taps were never seen: no DSpark drafts until a reset
    this.state = l.state;
    this.history = [...l.state.tokens, ...l.pending];
    this.open = l.open;
    this.lastTurn = null;
    this.note = `loaded ${this.history.length} tokens from ${file}`;
    return l;
  }

  /** The text of /stats. */
  stats(): string {
    const lines = [`context      ${this.history.length} tokens (${this.state.position} in the state${this.history.length > this.state.position && this.consistent ? `, ${this.history.length - this.state.position} to feed next turn` : ''})`];
    if (this.note) lines.push(`state        ${this.note}`);
    const t = this.lastTurn;
    if (t) {
      const rate = (n: number, s: number): string => (s > 0 ? `${(n / s).toFixed(1)} tok/s` : '-');
      lines.push(`last turn    processed ${t.promptIds.length + t.decodeTokens} tokens: prompt ${t.promptIds.length} new tokens in ${t.promptSeconds.toFixed(3)} s (${rate(t.promptIds.length, t.promptSeconds)}), reply ${t.ids.length} tokens, ${t.decodeTokens} decode steps in ${t.decodeSeconds.toFixed(3)} s (${rate(t.decodeTokens, t.decodeSeconds)})`);
      lines.push(`stop         ${t.interruptedInPrompt ? 'interrupted while reading the prompt' : t.reason}`);
      lines.push(`cache        ${t.rebuilt ?? `reused ${t.reused} tokens`}`);
    }
    return lines.join('\n');
  }
}

/** The session's DSpark drafter, refused with one line for options that do not go with it. */
function sessionDrafter(model: Model, opts: SessionOptions): DSparkDrafter | null {
  if (opts.drafter === undefined) {
    if (opts.specWidth !== undefined) throw new UserError('--spec-width needs --drafter');
    return null;
  }
  if ((opts.spec ?? 0) > 0) throw new UserError('--drafter and --spec are exclusive (spec drafts from the text, drafter from a DSpark checkpoint)');
  const d = loadDSpark(model, opts.drafter!);
  const w = opts.specWidth;
  if (w !== undefined && (!Number.isSafeInteger(w) || w < 0 || w > d.config.block)) throw new UserError(`--spec-width ${w} is not an integer in 0..${d.config.block} (the drafter's block)`);
  return d;
}

function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  if (a.length > b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
