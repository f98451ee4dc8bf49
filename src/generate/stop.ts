// Stopping: decide when generation ends, and turn the ids into text on the way.
//
// `TextStopper` turns ids into text as they come (StreamDecoder: never half a UTF-8 character),
// stops on stop ids, stop strings and a token limit, and holds back text that may be the start of
// a stop string, so a stop string that spans token boundaries never reaches the output.

import type { StreamDecoder, Tokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';

export type StopReason = 'stop_token' | 'stop_string' | 'max_tokens' | 'context' | 'interrupted';

export interface StopOptions {
  /** Ids that end generation; they are not part of the text. */
  stopIds?: Iterable<number>;
  /** Strings that end generation when they appear in the decoded text (across token
   *  boundaries); the text ends just before the first one. */
  stopStrings?: readonly string[];
  /** Most tokens to generate (default: no limit). */
  maxTokens?: number;
}

/**
 * Ids in, text out, with the stop rules. `push(id)` returns the text that is safe to show now
 * and whether to stop after this id; `finish()` the rest of the text (at the end, whatever the
 * reason). Concatenating every piece gives `text`.
 */
export class TextStopper {
  readonly ids: number[] = [];
  text = '';
  reason: StopReason | null = null;
  private pending = '';
  private readonly stopIds: Set<number>;
  private readonly stopStrings: string[];
  private readonly maxTokens: number;
  private readonly decoder: StreamDecoder | null;

  constructor(tok: Tokenizer | null, opts: StopOptions = {}) {
    this.stopIds = new Set(opts.stopIds ?? []);
    this.stopStrings = (opts.stopStrings ?? []).filter((s) => s.length > 0);
    if (this.stopStrings.length > 0 && !tok) throw new UserError('stop strings need a tokenizer (--tok DIR)');
    this.maxTokens = opts.maxTokens ?? Infinity;
    this.decoder = tok ? tok.streamDecoder() : null;
  }

  get stopped(): boolean {
    return this.reason !== null;
  }

  /** Feed one generated id. */
  push(id: number): { text: string; stop: boolean } {
    if (this.reason) return { text: '', stop: true };
    this.ids.push(id);
    let out = '';
    if (this.stopIds.has(id)) {
      this.reason = 'stop_token';
    } else {
      if (this.decoder) {
        this.pending += this.decoder.push(id);
        out = this.release(false);
      }
      if (!this.reason && this.ids.length >= this.maxTokens) this.reason = 'max_tokens';
    }
    if (this.reason) out += this.finish();
    return { text: out, stop: this.reason !== null };
  }

  /** End of generation (any reason, e.g. an interrupt): the held-back text, stop strings still
   *  applied. Further calls return ''. */
  finish(reason?: StopReason): string {
    if (!this.reason) this.reason = reason ?? 'max_tokens';
    if (!this.decoder) return '';
    const stopMatched = this.reason === 'stop_string';
    if (!stopMatched) this.pending += this.decoder.flush();
    return stopMatched ? '' : this.release(true);
  }

  /** Move pending text out: up to a stop string (and stop), or all but a possible stop-string start. */
  private release(final: boolean): string {
    const p = this.pending;
    let cut = -1;
    for (const s of this.stopStrings) {
      const i = p.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    let emit: string;
    if (cut >= 0) {
      emit = p.slice(0, cut);
      this.pending = '';
      this.reason = 'stop_string';
    } else if (final) {
      emit = p;
      this.pending = '';
    } else {
      const hold = this.heldSuffix(p);
      emit = p.slice(0, p.length - hold);
      this.pending = p.slice(p.length - hold);
    }
    this.text += emit;
    return emit;
  }

  /** Length of the longest suffix of `p` that is a proper prefix of a stop string. */
  private heldSuffix(p: string): number {
    let best = 0;
    for (const s of this.stopStrings) {
      for (let k = Math.min(s.length - 1, p.length); k > best; k--) {
        if (p.endsWith(s.slice(0, k))) {
          best = k;
          break;
        }
      }
    }
    return best;
  }
}

/** Stop ids for a model: `stopTokenIds` of the tokenizer, minus model eos ids that the
 *  tokenizer holds as ordinary text (a synthetic config may name one) or that lie outside the
 *  model's vocabulary. */
export function usableStopIds(tok: Tokenizer, ids: readonly number[], vocabSize: number): number[] {
  return ids.filter((id) => id < vocabSize && tok.isSpecial(id));
}
