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
import { DraftGate, sweep, type Choose } from './spec.js';
import { acceptDraft } from './spec-sample.js';
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
  async turn(text: string, io: { onText?: (s: string) => void; onId?: (id: number) => void; abort?: AbortFlag } = {}): Promise<TurnResult> {
    const abort = io.abort ?? { aborted: false };
    const target = [...this.history, ...(this.open ? this.closing() : []), ...this.userPiece(text)];
    // The context the memory was planned for (--ctx) ends the conversation, as in `k3 run`.
    const ctx = this.model.store.plan.ctx;
    if (target.length >= ctx) {
      const r: TurnResult = { ids: [], text: '', reason: 'context', promptIds: [], promptSeconds: 0, decodeTokens: 0, decodeSeconds: 0, reused: 0, rebuilt: null, interruptedInPrompt: false };
      this.lastTurn = r;
      return r;
    }
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
    const model = this.model;
    const V = model.config.vocabSize;
    const t0 = performance.now();
    let logits: Float32Array = new Float32Array(0);
    for (let s = 0; s < feed.length; s += this.chunk) {
      const part = feed.slice(s, s + this.chunk);
      logits = await model.forward(this.state, part, s + this.chunk >= feed.length ? 'last' : 'none', this.chunk);
      await yieldToEvents();
      if (abort.aborted && s + this.chunk < feed.length) {
        // The state now holds part of this prompt: the next turn will not match it and rebuilds.
        const r: TurnResult = { ids: [], text: '', reason: 'interrupted', promptIds: feed.slice(0, s + part.length), promptSeconds: (performance.now() - t0) / 1000, decodeTokens: 0, decodeSeconds: 0, reused, rebuilt, interruptedInPrompt: true };
        this.lastTurn = r;
        return r;
      }
    }
    const promptSeconds = (performance.now() - t0) / 1000;
    this.history = target;
    this.open = false;
    this.turns++;

    const stopper = new TextStopper(this.tok, { stopIds: this.stopIds, stopStrings: this.opts.stopStrings, maxTokens: this.maxTokens });
    this.sampler.reseed(deriveSeed(this.sampler.opts.seed, target.length));
    const t1 = performance.now();
    let decodeTokens = 0;
    let emitted = 0;
    const emit = (id: number): boolean => {
      emitted++;
      this.history.push(id);
      io.onId?.(id);
      const r = stopper.push(id);
      if (r.text) io.onText?.(r.text);
      if (r.stop) return true;
      if (this.history.length >= ctx) {
        const rest = stopper.finish('context'); // finish even when nobody reads the text
        if (rest) io.onText?.(rest);
        return true;
      }
      if (abort.aborted) {
        const rest = stopper.finish('interrupted');
        if (rest) io.onText?.(rest);
        return true;
      }
      return false;
    };
    // The id at each position: sampled, or (speculation) a draft decided by the acceptance rule.
    const choose: Choose = (l, draft) => (draft === undefined ? { id: this.sampler.sample(l, this.history, V), accepted: false } : acceptDraft(this.sampler, l, draft, this.history, V));
    const spec = this.opts.spec ?? 0;
    const gate = new DraftGate();
    let stopped = emit(choose(logits, undefined, 0).id);
    while (!stopped) {
      const room = gate.allow(Math.min(spec, this.maxTokens - emitted - 1));
      const drafts = room > 0 ? this.drafter.draft(this.history, room) : [];
      const r = await sweep(model, this.state, this.history[this.history.length - 1]!, drafts, choose, emit);
      gate.result(r.drafted, r.accepted);
      decodeTokens += r.emitted;
      stopped = r.stopped;
      await yieldToEvents();
    }
    const decodeSeconds = (performance.now() - t1) / 1000;
    this.open = stopper.reason !== 'stop_token';
    const r: TurnResult = { ids: stopper.ids, text: stopper.text, reason: stopper.reason!, promptIds: feed, promptSeconds, decodeTokens, decodeSeconds, reused, rebuilt, interruptedInPrompt: false };
    this.lastTurn = r;
    this.note = null;
    return r;
  }

  /** Tokens the conversation may hold (--ctx). */
  get ctx(): number {
    return this.model.store.plan.ctx;
  }

  /** Forget the conversation (the system message is used again on the next turn). */
  reset(): void {
    this.model.release(this.state);
    this.state = this.model.newState();
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

function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  if (a.length > b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
