// A conversation held by the library: `model.session()`. The state is kept between turns, so a
// follow-up only runs its new tokens through the model (generate/session.ts); each turn runs with
// the model to itself (Engine.exclusive), so sessions and batched requests can share one model.
// `k3 chat` is a REPL over this.

import { ChatSession, type AbortFlag, type SessionOptions, type TurnResult } from '../generate/session.js';
import type { LoadedState } from '../generate/state-file.js';
import type { Engine } from './engine.js';

export type { SessionOptions, TurnResult };

export interface TurnOptions {
  /** Sees the reply's text as it is generated. */
  onText?: (s: string) => void;
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
      try {
        return await this.s.turn(text, { onText: o.onText, abort });
      } finally {
        o.signal?.removeEventListener('abort', onAbort);
      }
    });
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
