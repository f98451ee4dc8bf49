// What the store's parts (trunk.ts, experts.ts, smalls.ts) share: the layout and plan, the
// counters, the timed reads, where weight memory comes from, and the test trace.

import type { Layout } from './layout.js';
import type { Plan } from './plan.js';
import type { TimedReads } from './reader.js';

export interface StoreStats {
  trunkBytesRead: number;
  expertBytesRead: number;
  embedBytesRead: number;
  smallBytesRead: number;
  /** Milliseconds the forward pass spent waiting for reads. */
  ioWaitMs: number;
  expertHits: number;
  expertMisses: number;
  /** Milliseconds during which at least one read was in flight (compare ioWaitMs: io_overlap). */
  readBusyMs: number;
  /** Lookahead: experts guessed for a layer before its router ran, and those its router then chose. */
  guesses: number;
  guessHits: number;
  /** Guessed experts read ahead (guesses that were not resident already). */
  guessReads: number;
}

export function newStats(): StoreStats {
  return { trunkBytesRead: 0, expertBytesRead: 0, embedBytesRead: 0, smallBytesRead: 0, ioWaitMs: 0, expertHits: 0, expertMisses: 0, readBusyMs: 0, guesses: 0, guessHits: 0, guessReads: 0 };
}

/** What the store did, in order, for tests that check when reads are issued (see `WeightStore.trace`). */
export type StoreEvent =
  | { kind: 'routed'; layer: number; experts: number[] }
  | { kind: 'read-expert'; layer: number; expert: number; guess: boolean }
  | { kind: 'use-expert'; layer: number; expert: number }
  | { kind: 'use-matrix'; name: string; row: number };

export interface StoreParts {
  readonly layout: Layout;
  readonly plan: Plan;
  readonly stats: StoreStats;
  readonly reads: TimedReads;
  readonly alloc: (bytes: number) => Uint8Array;
  /** The facade's test trace as it is now (tests set it after opening). */
  trace(): ((e: StoreEvent) => void) | null;
}
