// The library's model: generate from a prompt or a conversation as an async iterator of tokens
// with a final result, tokenize / detokenize, close. Every generation goes through the model's
// one Engine loop (engine.ts), so calls may overlap: they are decoded together, each with the
// same output as alone.

import type { Model } from '../model/model.js';
import type { SamplingOptions } from '../generate/sampling.js';
import { usableStopIds } from '../generate/stop.js';
import { renderChat, stopTokenIds, type ChatMessage, type Tokenizer, type TokenizerFamily } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { Engine } from './engine.js';
import type { GenerationResult, TokenEvent } from './events.js';
import { ChatSession } from '../generate/session.js';
import { LIBRARY, openModelDir, type LoadOptions, type Opener } from './load.js';
import { assistantMessage, type AssistantMessage } from './reply.js';
import { KimiChatSession, type SessionOptions } from './session.js';

export interface GenerateOptions extends SamplingOptions {
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
  /** Stop when the text contains one of these (not part of the text). */
  stop?: readonly string[];
  /** Do not stop at end-of-message / eos ids. Default: false for chat, true for plain generate. */
  ignoreEos?: boolean;
  /** Report each token's logprob and this many alternatives. */
  logprobs?: number;
  signal?: AbortSignal;
  /** Speculative decoding: draft up to N tokens per step by n-gram lookup in the text so far, verify
   *  them in one forward (greedy output is the same bytes; sampled keeps its distribution). Runs alone. */
  spec?: number;
  /** Also record the run report in the result (`k3 run`'s: bytes read per token by kind, I/O wait, peak RSS). Runs alone. */
  report?: boolean;
}

export interface ChatOptions extends GenerateOptions {
  /** K3: open the reply with a think block; the result's message has reasoning_content. */
  thinking?: boolean;
  /** K2: tool schemas rendered into the system prompt. */
  tools?: unknown[];
}

export interface ChatResult extends GenerationResult {
  message: AssistantMessage;
}

/** Tokens as they are generated (`for await`), and the result when generation ends. */
export class Generation<R extends GenerationResult = GenerationResult> implements AsyncIterable<TokenEvent> {
  readonly result: Promise<R>;
  private readonly events: TokenEvent[] = [];
  private ended = false;
  private error: unknown = null;
  private wake: (() => void) | null = null;

  constructor(start: (onToken: (e: TokenEvent) => void) => Promise<R>) {
    this.result = start((e) => {
      this.events.push(e);
      this.poke();
    });
    this.result.then(
      () => this.end(null),
      (e: unknown) => this.end(e),
    );
  }

  private end(e: unknown): void {
    this.ended = true;
    this.error = e;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<TokenEvent, void> {
    for (;;) {
      while (this.events.length > 0) yield this.events.shift()!;
      if (this.ended) {
        if (this.error !== null) throw this.error;
        return;
      }
      await new Promise<void>((r) => (this.wake = r));
    }
  }
}

export class KimiModel {
  private closed = false;
  readonly format: TokenizerFamily;

  constructor(
    readonly model: Model,
    readonly tokenizer: Tokenizer | null,
    readonly engine: Engine,
  ) {
    this.format = model.config.arch === 'k3' ? 'k3' : 'k2';
  }

  get architecture(): string {
    return this.model.config.arch;
  }

  get vocabSize(): number {
    return this.model.config.vocabSize;
  }

  private needTok(what: string): Tokenizer {
    if (!this.tokenizer) throw new UserError(`${what} needs the tokenizer files (tiktoken.model, tokenizer_config.json)`);
    return this.tokenizer;
  }

  private live(): void {
    if (this.closed) throw new UserError('the model is closed');
  }

  tokenize(text: string): number[] {
    return this.needTok('tokenize').encode(text);
  }

  detokenize(ids: readonly number[]): string {
    return this.needTok('detokenize').decode(ids);
  }

  /** The chat format's ids for a conversation, ending with the assistant generation prompt. */
  renderChat(messages: readonly ChatMessage[], opts: Pick<ChatOptions, 'thinking' | 'tools'> = {}): number[] {
    if (opts.tools && opts.tools.length > 0 && this.format === 'k3') throw new UserError('tools: K3 tool calls are not supported yet (the K3 tool grammar is unpublished)');
    return renderChat(this.needTok('chat'), messages, { format: this.format, addGenerationPrompt: true, thinking: opts.thinking, tools: opts.tools }).ids;
  }

  /** Ids that end a reply (end of message, eos) for this model and tokenizer. */
  stopIds(): number[] {
    const cfg = this.model.config;
    return this.tokenizer ? usableStopIds(this.tokenizer, stopTokenIds(this.tokenizer, cfg.eosTokenIds), cfg.vocabSize) : cfg.eosTokenIds;
  }

  /** Generate from text (encoded as is) or ids. */
  generate(prompt: string | readonly number[], opts: GenerateOptions = {}): Generation {
    this.live();
    const ids = typeof prompt === 'string' ? this.tokenize(prompt) : [...prompt];
    return new Generation((onToken) => this.engine.run(ids, this.jobOptions(opts, opts.ignoreEos ?? true), onToken));
  }

  /** Reply to a conversation in the model's chat format. */
  chat(messages: readonly ChatMessage[], opts: ChatOptions = {}): Generation<ChatResult> {
    this.live();
    const ids = this.renderChat(messages, opts);
    const thinking = opts.thinking ?? false;
    return new Generation(async (onToken) => {
      const r = await this.engine.run(ids, this.jobOptions(opts, opts.ignoreEos ?? false), onToken);
      return { ...r, message: assistantMessage(r.text, this.format, thinking) };
    });
  }

  private jobOptions(o: GenerateOptions, ignoreEos: boolean) {
    const maxTokens = o.maxTokens ?? 256;
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) throw new UserError(`maxTokens must be an integer >= 1, got ${maxTokens}`);
    if ((o.stop?.length ?? 0) > 0) this.needTok('stop strings');
    const spec = o.spec ?? 0;
    if (!Number.isSafeInteger(spec) || spec < 0) throw new UserError(`spec must be an integer >= 0, got ${spec}`);
    return { sampling: o, maxTokens, stopIds: ignoreEos ? [] : this.stopIds(), stopStrings: o.stop, logprobs: o.logprobs, signal: o.signal, spec, report: o.report };
  }

  /** A conversation that keeps its state between turns (save / load / reset), as `k3 chat`. */
  session(opts: Omit<SessionOptions, 'chunk'> = {}): KimiChatSession {
    this.live();
    return new KimiChatSession(new ChatSession(this.model, this.needTok('session'), { ...opts, chunk: this.engine.opts.chunk }), this.engine);
  }

  /** Stop every generation, free the held states, the weights and the kernel threads. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.engine.close();
    await this.model.close();
  }
}

/** Load a model directory (a checkpoint or a `k3 pack` output) with the CLI's model options. */
export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<KimiModel> {
  return loadModelAs(dir, opts, LIBRARY);
}

/** `loadModel` for a caller that names the options its own way in errors (the CLI: as flags). */
export async function loadModelAs(dir: string, opts: LoadOptions, by: Opener): Promise<KimiModel> {
  const parallel = opts.parallel ?? 4;
  if (!Number.isSafeInteger(parallel) || parallel < 1) throw new UserError(`${by.who}: ${by.name('parallel')} must be an integer >= 1, got ${parallel}`);
  const { model, tok, chunk } = await openModelDir(dir, opts, by);
  const p = model.store.plan;
  // Held prefix states count against --memory: the plan counts the `parallel` running
  // sequences and one held state (Plan.engineBytes); more when the budget leaves room.
  const perState = p.kdaStateBytes + p.mlaCacheBytes;
  const cacheBytes = perState + Math.max(0, p.budgetBytes - p.totalBytes);
  const engine = new Engine(model, tok, { parallel, chunk, cacheBytes });
  return new KimiModel(model, tok, engine);
}
