// Prefix reuse across requests: an LRU of sequence states keyed by the exact token ids they have
// processed. A request takes the longest held state whose ids are a strict prefix of its prompt
// (or an equal one held with the logits of its last position) and processes only the rest, as
// `k3 chat` does between turns. The states' bytes are counted against a limit
// (the state part of the memory plan, see engine.ts); the least recently used go first, their
// memory back to the model's spare pool.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { forkState, stateBytes } from './fork.js';

interface Entry {
  state: SequenceState;
  bytes: number;
  /** Logits of the state's last position, when kept: a prompt equal to the state's ids then needs no forward at all. */
  logits: Float32Array | null;
}

export class PrefixCache {
  private readonly entries: Entry[] = []; // least recently used first
  private used = 0;
  hits = 0;
  misses = 0;

  constructor(
    private readonly model: Model,
    readonly limitBytes: number,
  ) {}

  get bytes(): number {
    return this.used;
  }

  get size(): number {
    return this.entries.length;
  }

  /** A state for `prompt`: a copy of the longest held prefix (with its last logits when it is
   *  the whole prompt), or a fresh one. */
  take(prompt: readonly number[]): { state: SequenceState; logits: Float32Array | null } {
    let best = -1;
    for (let e = 0; e < this.entries.length; e++) {
      const t = this.entries[e]!.state.tokens;
      const whole = t.length === prompt.length && this.entries[e]!.logits !== null;
      if ((t.length >= prompt.length && !whole) || (best >= 0 && t.length <= this.entries[best]!.state.tokens.length)) continue;
      let i = 0;
      while (i < t.length && t[i] === prompt[i]) i++;
      if (i === t.length) best = e;
    }
    if (best < 0) {
      this.misses++;
      return { state: this.model.newState(), logits: null };
    }
    this.hits++;
    const [hit] = this.entries.splice(best, 1);
    this.entries.push(hit!);
    const whole = hit!.state.tokens.length === prompt.length;
    return { state: forkState(this.model, hit!.state), logits: whole ? hit!.logits : null };
  }

  /** Keep a copy of `state` (the caller keeps using its own), with the logits of its last position when given. */
  keep(state: SequenceState, logits: Float32Array | null = null): void {
    if (state.tokens.length === 0) return;
    const same = this.entries.findIndex((e) => sameIds(e.state.tokens, state.tokens));
    if (same >= 0) {
      const [e] = this.entries.splice(same, 1);
      if (e!.logits === null && logits !== null) {
        e!.logits = logits.slice();
        e!.bytes += logits.byteLength;
        this.used += logits.byteLength;
      }
      this.entries.push(e!);
      return;
    }
    const bytes = stateBytes(state) + (logits?.byteLength ?? 0);
    if (bytes > this.limitBytes) return;
    while (this.used + bytes > this.limitBytes && this.entries.length > 0) this.evict();
    this.entries.push({ state: forkState(this.model, state), bytes, logits: logits && logits.slice() });
    this.used += bytes;
  }

  private evict(): void {
    const e = this.entries.shift()!;
    this.used -= e.bytes;
    this.model.release(e.state);
  }

  clear(): void {
    while (this.entries.length > 0) this.evict();
  }
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
