// Prefix reuse across requests: an LRU of sequence states keyed by the exact token ids they have
// processed. A request takes the longest held state whose ids are a strict prefix of its prompt
// (at least one prompt token must still run, for the logits of the last position) and processes
// only the rest, as `k3 chat` does between turns. The states' bytes are counted against a limit
// (the state part of the memory plan, see engine.ts); the least recently used go first, their
// memory back to the model's spare pool.

import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { forkState, stateBytes } from './fork.js';

interface Entry {
  state: SequenceState;
  bytes: number;
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

  /** A state for `prompt`: a copy of the longest held strict prefix, or a fresh one. */
  take(prompt: readonly number[]): SequenceState {
    let best = -1;
    for (let e = 0; e < this.entries.length; e++) {
      const t = this.entries[e]!.state.tokens;
      if (t.length >= prompt.length || (best >= 0 && t.length <= this.entries[best]!.state.tokens.length)) continue;
      let i = 0;
      while (i < t.length && t[i] === prompt[i]) i++;
      if (i === t.length) best = e;
    }
    if (best < 0) {
      this.misses++;
      return this.model.newState();
    }
    this.hits++;
    const [hit] = this.entries.splice(best, 1);
    this.entries.push(hit!);
    return forkState(this.model, hit!.state);
  }

  /** Keep a copy of `state` (the caller keeps using its own). */
  keep(state: SequenceState): void {
    if (state.tokens.length === 0) return;
    const same = this.entries.findIndex((e) => sameIds(e.state.tokens, state.tokens));
    if (same >= 0) {
      this.entries.push(...this.entries.splice(same, 1));
      return;
    }
    const bytes = stateBytes(state);
    if (bytes > this.limitBytes) return;
    while (this.used + bytes > this.limitBytes && this.entries.length > 0) this.evict();
    this.entries.push({ state: forkState(this.model, state), bytes });
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
