// A conversation held by the library: `model.session()`. The state is kept between turns, so a
// follow-up only runs its new tokens through the model (generate/session.ts); each turn runs with
// the model to itself (Engine.exclusive), so sessions and batched requests can share one model.
// `k3 chat` is a REPL over this.

import { ChatSession, type AbortFlag, type SessionOptions, type TurnResult as BaseTurnResult } from '../generate/session.js';
import type { LoadedState } from '../generate/state-file.js';
import type { Engine } from './engine.js';
import { K3ReplyParser, type K3Delta, type K3Parsed } from './k3-reply.js';

export type { SessionOptions };

/** A turn's result; K3 turns also have the reply parsed (reasoning, content, tool calls). */
export interface TurnResult extends BaseTurnResult {
  reply?: K3Parsed;
}

export interface TurnOptions {
  /** Sees the reply's text as it is generated (K3: the raw channels, markup included). */
  onText?: (s: string) => void;
  /** K3: sees the reply's reasoning, content and tool calls as they are parsed. */
  onDelta?: (d: K3Delta) => void;
  /** Stops the reply at the next token (or the prompt at the next chunk). */
  signal?: AbortSignal;
}

export class KimiChatSession {
  constructor(
    private readonly s: ChatSession,
    private readonly engine: Engine,
  ) {}

  /** One user turn: the reply, streamed to onText. */
  turn(text: string, o: TurnOptions = {}): Promise<TurnResult> {
    return this.engine.exclusive(async () => {
      const abort: AbortFlag = { aborted: o.signal?.aborted ?? false };
      const onAbort = (): void => void (abort.aborted = true);
      o.signal?.addEventListener('abort', onAbort);
      const k3 = this.s.format === 'k3';
      const parser = k3 ? new K3ReplyParser(this.s.tok, this.s.opts.thinking === false ? 'response' : 'think') : null;
      const onId = parser ? (id: number) => parser.push(id).forEach((d) => o.onDelta?.(d)) : undefined;
      try {
        const r = await this.s.turn(text, { onText: o.onText, onId, abort });
        return parser ? { ...r, reply: parser.finish() } : r;
      } finally {
        o.signal?.removeEventListener('abort', onAbort);
      }
    });
  }

  /** The chat format (k3: replies are parsed into reasoning, content and tool calls). */
  get format(): string {
    return this.s.format;
  }

  /** The conversation's ids (what the model has seen or produced). */
  get history(): readonly number[] {
    return this.s.history;
  }

  get lastTurn(): TurnResult | null {
    return this.s.lastTurn;
  }

  /** Tokens the conversation may hold (the model's planned context). */
  get ctx(): number {
    return this.s.ctx;
  }

  /** What `/stats` prints: context, last turn's tokens and speeds, state reuse. */
  stats(): string {
    return this.s.stats();
  }

  /** Write the conversation's state (KDA state, MLA cache, ids) to a file; returns its bytes. */
  save(file: string): number {
    return this.s.save(file);
  }

  /** Continue the conversation saved in `file` (refused if saved from another model). */
  load(file: string): LoadedState {
    return this.s.load(file);
  }

  /** Start a new conversation. */
  reset(): void {
    this.s.reset();
  }

  /** Give the state's memory back. */
  close(): void {
    this.s.close();
  }
}
