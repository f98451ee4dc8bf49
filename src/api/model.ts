// The library's model: generate from a prompt or a conversation as an async iterator of tokens
// with a final result, tokenize / detokenize, close. Every generation goes through the model's
// one Engine loop (engine.ts), so calls may overlap: they are decoded together, each with the
// same output as alone.

import type { Model } from '../model/model.js';
import { k3ReplyConstraint, type TokenConstraint } from '../generate/constrain/index.js';
import type { SamplingOptions } from '../generate/sampling.js';
import { usableStopIds } from '../generate/stop.js';
import { encodeK3Segments, k3ChatSegments, k3PromptTokenCount, renderChat, stopTokenIds, type ChatMessage, type K3ChatRequest, type Tokenizer, type TokenizerFamily } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { Engine } from './engine.js';
import type { DecodeOptions, GenerationResult, TokenEvent } from './events.js';
import { ChatSession } from '../generate/session.js';
import { LIBRARY, openModelDir, type LoadOptions, type Opener } from './load.js';
import { ChatReply, declaredTools, withoutReasoning, type ChatResult, type ChatTokenEvent, type ChatTurnOptions, type ToolSpec } from './chat.js';
import { KimiChatSession, type SessionOptions } from './session.js';

export interface GenerateOptions extends SamplingOptions, DecodeOptions {
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
  /** Stop when the text contains one of these (not part of the text). */
  stop?: readonly string[];
  /** Do not stop at end-of-message / eos ids. Default: false for chat, true for plain generate. */
  ignoreEos?: boolean;
}

/** A chat turn's options: generation's, and the conversation's (tools, thinking, structure). */
export interface ChatOptions extends GenerateOptions, ChatTurnOptions {}

/** A rendered chat prompt: its ids, the prompt tokens as Moonshot's API counts them (K3), and
 *  every tool it declares (the request's and those of system messages). */
export interface RenderedPrompt {
  ids: number[];
  promptTokens: number;
  tools: ToolSpec[];
}

/** Tokens as they are generated (`for await`), and the result when generation ends. */
export class Generation<R extends GenerationResult = GenerationResult, E extends TokenEvent = TokenEvent> implements AsyncIterable<E> {
  readonly result: Promise<R>;
  private readonly events: E[] = [];
  private ended = false;
  private error: unknown = null;
  private wake: (() => void) | null = null;

  constructor(start: (onToken: (e: E) => void) => Promise<R>) {
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

  async *[Symbol.asyncIterator](): AsyncGenerator<E, void> {
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
  renderChat(messages: readonly ChatMessage[], opts: ChatTurnOptions = {}): number[] {
    return this.renderPrompt(messages, opts).ids;
  }

  /** renderChat, with the prompt tokens as the usage reports them (K3: Moonshot's count). */
  renderPrompt(messages: readonly ChatMessage[], opts: ChatTurnOptions = {}): RenderedPrompt {
    const tok = this.needTok('chat');
    if (this.format !== 'k3') {
      const ids = renderChat(tok, messages, { format: this.format, addGenerationPrompt: true, tools: opts.tools as unknown[] | undefined }).ids;
      return { ids, promptTokens: ids.length, tools: [...(opts.tools ?? [])] };
    }
    const thinking = opts.thinking ?? true;
    const req: K3ChatRequest = {
      messages: thinking && opts.preserveThinking === false ? withoutReasoning(messages) : messages,
      tools: opts.tools,
      tool_choice: opts.toolChoice,
      response_format: opts.responseFormat,
      thinking,
      ...(opts.thinkingEffort !== undefined ? { thinking_effort: opts.thinkingEffort } : {}),
      add_generation_prompt: true,
    };
    return this.renderK3(req, declaredTools(messages, opts.tools));
  }

  /** A K3 render request (`k3 render`'s, from a request body) to its prompt; `tools`: every
   *  tool it declares, as plain values (the constraint holds calls to their schemas). */
  renderK3(req: K3ChatRequest, tools: readonly ToolSpec[] = []): RenderedPrompt {
    const ids = encodeK3Segments(this.needTok('chat'), k3ChatSegments(req));
    return { ids, promptTokens: k3PromptTokenCount(ids), tools: [...tools] };
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

  /** Reply to a conversation in the model's chat format: tokens with the message deltas they
   *  make, then the assistant message (reasoning, content, typed tool calls). */
  chat(messages: readonly ChatMessage[], opts: ChatOptions = {}): Generation<ChatResult, ChatTokenEvent> {
    this.live();
    return this.chatRendered(this.renderPrompt(messages, opts), opts);
  }

  /** The structure a chat request asks for (a JSON response, a forced call, calls held to their
   *  schemas) as a constraint on its reply, or null when it asks for none (and for K2). */
  replyConstraint(prompt: RenderedPrompt, opts: ChatOptions = {}): TokenConstraint | null {
    if (this.format !== 'k3') return null;
    const thinking = opts.thinking ?? true;
    return k3ReplyConstraint(this.needTok('chat'), { thinking, tools: prompt.tools, toolChoice: opts.toolChoice, responseFormat: opts.responseFormat, parallelToolCalls: opts.parallelToolCalls, vocabSize: this.vocabSize });
  }

  /** `chat` on a prompt rendered by renderPrompt with the same options. */
  chatRendered(prompt: RenderedPrompt, opts: ChatOptions = {}): Generation<ChatResult, ChatTokenEvent> {
    this.live();
    const tok = this.needTok('chat');
    const thinking = this.format === 'k3' && (opts.thinking ?? true);
    // stop strings end the content, not the markup: the reply watches them (chat.ts)
    const stopper = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, stopper.signal]) : stopper.signal;
    const toolsAllowed = prompt.tools.length > 0 && opts.toolChoice !== 'none';
    const reply = new ChatReply(tok, this.format, thinking, opts.stop, () => stopper.abort(), toolsAllowed);
    const constraint = opts.constraint ?? this.replyConstraint(prompt, opts);
    const job = this.jobOptions({ ...opts, stop: undefined, signal, constraint: constraint ?? undefined }, opts.ignoreEos ?? false);
    return new Generation<ChatResult, ChatTokenEvent>(async (onToken) => {
      const r = await this.engine.run(prompt.ids, job, (e) => onToken({ ...e, deltas: reply.push(e) }));
      const fin = reply.finish(r.stopReason === 'aborted' && reply.stopSequence !== null ? { ...r, stopReason: 'stop_string' } : r);
      return { ...fin.result, promptTokens: prompt.promptTokens, lastDeltas: fin.deltas };
    });
  }

  private jobOptions(o: GenerateOptions, ignoreEos: boolean) {
    const maxTokens = o.maxTokens ?? 256;
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) throw new UserError(`maxTokens must be an integer >= 1, got ${maxTokens}`);
    if ((o.stop?.length ?? 0) > 0) this.needTok('stop strings');
    const spec = o.spec ?? 0;
    if (!Number.isSafeInteger(spec) || spec < 0) throw new UserError(`spec must be an integer >= 0, got ${spec}`);
    if (o.drafter !== undefined && spec > 0) throw new UserError('drafter and spec are exclusive (spec drafts from the text, drafter from a DSpark checkpoint)');
    if (o.specWidth !== undefined) {
      if (o.drafter === undefined) throw new UserError('specWidth needs a drafter');
      if (!Number.isSafeInteger(o.specWidth) || o.specWidth < 0) throw new UserError(`specWidth must be an integer >= 0, got ${o.specWidth}`);
    }
    return { sampling: o, maxTokens, stopIds: ignoreEos ? [] : this.stopIds(), stopStrings: o.stop, logprobs: o.logprobs, signal: o.signal, spec, drafter: o.drafter, specWidth: o.specWidth, report: o.report, constraint: o.constraint };
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
