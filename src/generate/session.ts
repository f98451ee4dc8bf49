// A conversation that keeps its sequence state between turns, and the state file it saves to.
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
// State file (little-endian):
//   8 bytes  magic "K3STATE\0"
//   u32      format version (1)
//   u32      header length H
//   H bytes  JSON: { fingerprint, processed, pending, open, arrays }
//   pad to a multiple of 8
//   f32      per layer in order: KDA S [H·dk·dk] and conv tails [3·(W-1)·P]; MLA latents
//            [processed·Lk] and rope keys [processed·dr]
//   u32      token ids: the `processed` ids of the state, then the `pending` ids sampled but not
//            yet run through the model
// A file whose fingerprint differs from the model's, or whose size is not what the header says,
// is refused with a UserError naming it. Files are written to a temporary name and renamed.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ModelConfig } from '../checkpoint/config.js';
import type { Model } from '../model/model.js';
import { SequenceState } from '../model/state.js';
import { renderChat, stopTokenIds, type ChatMessage, type Tokenizer, type TokenizerFamily } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { Sampler, TextStopper, deriveSeed, usableStopIds, type SamplingOptions, type StopReason } from './sampling.js';

// ---------------------------------------------------------------------------------------------
// Fingerprint and state files

export const STATE_MAGIC = 'K3STATE\0';
export const STATE_VERSION = 1;

export interface ShapeFingerprint {
  arch: string;
  layers: number;
  hidden: number;
  vocab: number;
  /** One letter per layer: k = KDA, m = MLA. */
  attn: string;
  kda: { heads: number; headDim: number; convSize: number } | null;
  mla: { kvLoraRank: number; ropeDim: number };
  /** sha256 (first 16 hex digits) of every config field that sets a shape. */
  configHash: string;
}

export function shapeFingerprint(cfg: ModelConfig): ShapeFingerprint {
  const shapeFields = {
    arch: cfg.arch,
    vocabSize: cfg.vocabSize,
    hiddenSize: cfg.hiddenSize,
    numLayers: cfg.numLayers,
    intermediateSize: cfg.intermediateSize,
    layers: cfg.layers.map((L) => `${L.attn}/${L.ffn}`),
    mla: { heads: cfg.mla.heads, qLoraRank: cfg.mla.qLoraRank, kvLoraRank: cfg.mla.kvLoraRank, nopeDim: cfg.mla.nopeDim, ropeDim: cfg.mla.ropeDim, vDim: cfg.mla.vDim, outputGate: cfg.mla.outputGate },
    kda: cfg.kda ? { heads: cfg.kda.heads, headDim: cfg.kda.headDim, convSize: cfg.kda.convSize, fullRankGate: cfg.kda.fullRankGate } : null,
    moe: { experts: cfg.moe.experts, topK: cfg.moe.topK, shared: cfg.moe.shared, intermediate: cfg.moe.intermediate, latentDim: cfg.moe.latentDim },
    attnResBlock: cfg.attnResBlock,
  };
  return {
    arch: cfg.arch,
    layers: cfg.numLayers,
    hidden: cfg.hiddenSize,
    vocab: cfg.vocabSize,
    attn: cfg.layers.map((L) => (L.attn === 'kda' ? 'k' : 'm')).join(''),
    kda: cfg.kda ? { heads: cfg.kda.heads, headDim: cfg.kda.headDim, convSize: cfg.kda.convSize } : null,
    mla: { kvLoraRank: cfg.mla.kvLoraRank, ropeDim: cfg.mla.ropeDim },
    configHash: createHash('sha256').update(JSON.stringify(shapeFields)).digest('hex').slice(0, 16),
  };
}

function describe(f: ShapeFingerprint): string {
  return `${f.arch}, ${f.layers} layers, hidden ${f.hidden}, vocab ${f.vocab}, config ${f.configHash}`;
}

interface StateHeader {
  fingerprint: ShapeFingerprint;
  processed: number;
  pending: number;
  /** The last reply was cut (no stop id): the next turn closes it first. */
  open: boolean;
  /** Float32 count of every array, in file order (a check of the layout). */
  arrays: number[];
}

/** The f32 arrays of a state in file order (MLA views cover `length` positions). */
function stateArrays(state: SequenceState): Float32Array[] {
  const out: Float32Array[] = [];
  for (let i = 0; i < state.cfg.layers.length; i++) {
    const k = state.kda[i];
    const m = state.mla[i];
    if (k) out.push(k.S, k.conv);
    if (m) out.push(m.lat.subarray(0, m.length * m.Lk), m.rope.subarray(0, m.length * m.dr));
  }
  return out;
}

function asBytes(a: ArrayBufferView): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** Write `state` (+ `pending` ids) to `file` atomically. */
export function saveState(file: string, state: SequenceState, pending: readonly number[] = [], open = false): number {
  if (os.endianness() !== 'LE') throw new UserError('state files are little-endian; this machine is not');
  for (const m of state.mla) {
    if (m && m.length !== state.position) throw new Error(`MLA cache holds ${m.length} positions, state ${state.position}`);
  }
  const arrays = stateArrays(state);
  const header: StateHeader = { fingerprint: shapeFingerprint(state.cfg), processed: state.position, pending: pending.length, open, arrays: arrays.map((a) => a.length) };
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const pre = Buffer.alloc(16);
  pre.write(STATE_MAGIC, 0, 'latin1');
  pre.writeUInt32LE(STATE_VERSION, 8);
  pre.writeUInt32LE(json.length, 12);
  const pad = Buffer.alloc((8 - ((16 + json.length) % 8)) % 8);
  const ids = Uint32Array.from([...state.tokens, ...pending]);

  const dir = path.dirname(path.resolve(file));
  if (!fs.existsSync(dir)) throw new UserError(`${file}: directory ${dir} does not exist`);
  const tmp = `${file}.tmp-${process.pid}`;
  let total = 0;
  try {
    const fd = fs.openSync(tmp, 'w');
    try {
      for (const b of [pre, json, pad, ...arrays.map(asBytes), asBytes(ids)]) {
        let off = 0;
        while (off < b.length) off += fs.writeSync(fd, b, off, b.length - off);
        total += b.length;
      }
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    if (e instanceof UserError) throw e;
    throw new UserError(`${file}: cannot write the state (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 1);
  }
  return total;
}

export interface LoadedState {
  state: SequenceState;
  pending: number[];
  open: boolean;
  bytes: number;
}

/** Read a state file for `model`; UserError naming the file if it is not one, is for another
 *  model, or is truncated. */
export function loadState(file: string, model: Model): LoadedState {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${file}: cannot open the state file (${code === 'ENOENT' ? 'not found' : (code ?? String(e))})`);
  }
  try {
    const size = fs.fstatSync(fd).size;
    const readAt = (into: ArrayBufferView, pos: number): void => {
      const b = asBytes(into);
      let off = 0;
      while (off < b.length) {
        const n = fs.readSync(fd, b, off, b.length - off, pos + off);
        if (n === 0) throw new UserError(`${file}: state file is truncated`);
        off += n;
      }
    };
    if (size < 16) throw new UserError(`${file}: not a k3 state file (too short)`);
    const pre = Buffer.alloc(16);
    readAt(pre, 0);
    if (pre.toString('latin1', 0, 8) !== STATE_MAGIC) throw new UserError(`${file}: not a k3 state file (bad magic)`);
    const version = pre.readUInt32LE(8);
    if (version !== STATE_VERSION) throw new UserError(`${file}: state file version ${version}, this build reads version ${STATE_VERSION}`);
    const hlen = pre.readUInt32LE(12);
    if (16 + hlen > size) throw new UserError(`${file}: state file is truncated (header)`);
    const jb = Buffer.alloc(hlen);
    readAt(jb, 16);
    let h: StateHeader;
    try {
      h = JSON.parse(jb.toString('utf8')) as StateHeader;
    } catch {
      throw new UserError(`${file}: state file header is corrupt`);
    }
    if (!h || typeof h !== 'object' || !h.fingerprint || !Number.isInteger(h.processed) || !Number.isInteger(h.pending) || h.processed < 0 || h.pending < 0 || !Array.isArray(h.arrays)) {
      throw new UserError(`${file}: state file header is corrupt`);
    }
    const mine = shapeFingerprint(model.config);
    if (JSON.stringify(h.fingerprint) !== JSON.stringify(mine)) {
      throw new UserError(`${file}: state was saved from a different model (${describe(h.fingerprint)}; this model: ${describe(mine)})`);
    }
    const state = model.newState();
    for (const m of state.mla) {
      if (m) {
        m.reserve(h.processed);
        m.length = h.processed;
      }
    }
    const arrays = stateArrays(state);
    if (arrays.length !== h.arrays.length || arrays.some((a, i) => a.length !== h.arrays[i])) throw new UserError(`${file}: state file layout does not match the model`);
    let pos = 16 + hlen;
    pos += (8 - (pos % 8)) % 8;
    const expected = pos + arrays.reduce((s, a) => s + a.byteLength, 0) + 4 * (h.processed + h.pending);
    if (size < expected) throw new UserError(`${file}: state file is truncated (${size} bytes, header says ${expected})`);
    if (size > expected) throw new UserError(`${file}: state file has ${size - expected} unexpected trailing bytes`);
    for (const a of arrays) {
      readAt(a, pos);
      pos += a.byteLength;
    }
    const ids = new Uint32Array(h.processed + h.pending);
    readAt(ids, pos);
    for (const id of ids) if (id >= model.config.vocabSize) throw new UserError(`${file}: token id ${id} is outside the vocabulary`);
    state.tokens.push(...ids.subarray(0, h.processed));
    return { state, pending: Array.from(ids.subarray(h.processed)), open: h.open === true, bytes: size };
  } finally {
    fs.closeSync(fd);
  }
}

// ---------------------------------------------------------------------------------------------
// The chat session

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
  /** K3: open the reply with `think` instead of `response`. */
  thinking?: boolean;
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

  /** One user turn: feed the new context, then generate the reply (streamed to onText). */
  async turn(text: string, io: { onText?: (s: string) => void; abort?: AbortFlag } = {}): Promise<TurnResult> {
    const abort = io.abort ?? { aborted: false };
    const target = [...this.history, ...(this.open ? this.closing() : []), ...this.userPiece(text)];
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
    for (;;) {
      const id = this.sampler.sample(logits, this.history, V);
      this.history.push(id);
      const r = stopper.push(id);
      if (r.text) io.onText?.(r.text);
      if (r.stop) break;
      if (abort.aborted) {
        const rest = stopper.finish('interrupted');
        if (rest) io.onText?.(rest);
        break;
      }
      logits = await model.forward(this.state, [id], 'last');
      decodeTokens++;
      await yieldToEvents();
    }
    const decodeSeconds = (performance.now() - t1) / 1000;
    this.open = stopper.reason !== 'stop_token';
    const r: TurnResult = { ids: stopper.ids, text: stopper.text, reason: stopper.reason!, promptIds: feed, promptSeconds, decodeTokens, decodeSeconds, reused, rebuilt, interruptedInPrompt: false };
    this.lastTurn = r;
    this.note = null;
    return r;
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

  /** The state is consistent with the conversation (its tokens are a prefix of history). */
  get consistent(): boolean {
    const have = this.state.tokens;
    return have.length <= this.history.length && isPrefix(have, this.history);
  }

  save(file: string): number {
    if (!this.consistent) throw new UserError(`${file}: not saved: the last turn was interrupted while its prompt was read, so the state is rebuilt on the next turn; save after it`);
    return saveState(file, this.state, this.history.slice(this.state.position), this.open);
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
