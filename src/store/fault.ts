// A reader that fails on purpose: the test double for read faults. A failed or short read must
// stop the run with exit code 4, naming the file and offset, and never skip an expert; a read
// that comes back in pieces or after a transient error must give the same bytes; a flipped bit
// in a range with a known checksum must be caught (verified-reader.ts).
//
// `k3` wraps its reader in one when asked by the environment (tests use this):
//   K3_FAULT_AFTER_READS=N        reads after the first N fail (EIO)
//   K3_FAULT=KIND:TARGET:N        the N-th (0-based) read of TARGET gets KIND, where
//     KIND    eio     the read fails
//             eof     the read comes back short at the end of the file (a truncated file)
//             short   the read arrives in two parts (a partial read the reader must continue)
//             eintr   the first two attempts fail with EINTR (a transient error, retried)
//             flip    the read succeeds with one bit flipped
//     TARGET  any | trunk | expert | embed | small    (which weights the read is of)

import type { ModelConfig } from '../checkpoint/config.js';
import { ReadError, UserError } from '../util/errors.js';
import type { Layout, Range } from './layout.js';
import type { ByteReader } from './store.js';

export type FaultKind = 'eio' | 'eof' | 'short' | 'eintr' | 'flip';
export type FaultTarget = 'any' | 'trunk' | 'expert' | 'embed' | 'small';
const KINDS: FaultKind[] = ['eio', 'eof', 'short', 'eintr', 'flip'];
const TARGETS: FaultTarget[] = ['any', 'trunk', 'expert', 'embed', 'small'];

export interface FaultPlan {
  kind: FaultKind;
  target: FaultTarget;
  /** Which read of the target (0-based). */
  at: number;
}

/** K3_FAULT's value -> a plan; a UserError naming the variable when it is malformed. */
export function parseFaultSpec(spec: string): FaultPlan {
  const [kind, target, at] = spec.split(':');
  if (!KINDS.includes(kind as FaultKind) || !TARGETS.includes(target as FaultTarget) || !/^\d+$/.test(at ?? '')) {
    throw new UserError(`K3_FAULT=${JSON.stringify(spec)}: expected KIND:TARGET:N with KIND ${KINDS.join('|')} and TARGET ${TARGETS.join('|')}`);
  }
  return { kind: kind as FaultKind, target: target as FaultTarget, at: Number(at) };
}

/** An error that a retrying reader treats as transient (EINTR / EAGAIN). */
export class TransientError extends Error {
  constructor(readonly code: 'EINTR' | 'EAGAIN') {
    super(code);
  }
}

export class FaultyReader implements ByteReader {
  reads = 0;
  faulted = false;
  private readonly seen = new Map<FaultTarget, number>();
  private attempts = 0;
  /** What a read is of; set once the layout is known (`classifyBy`). */
  private classify: ((file: string, offset: number) => FaultTarget) | null = null;

  constructor(
    private readonly inner: ByteReader,
    /** Reads that succeed before every later one fails (K3_FAULT_AFTER_READS), or a plan. */
    private readonly plan: number | FaultPlan,
  ) {}

  /** Tell reads of the trunk, experts, embedding and small tensors apart by where they are. */
  classifyBy(layout: Layout, cfg: ModelConfig): void {
    const spans: { file: string; lo: number; hi: number; t: FaultTarget }[] = [];
    const add = (r: Range, t: FaultTarget) => spans.push({ file: r.file, lo: r.offset, hi: r.offset + r.length, t });
    for (const p of layout.sequence) {
      add(p.data, 'trunk');
      if (p.scale) add(p.scale, 'trunk');
    }
    add({ file: layout.embed.data.file, offset: layout.embed.data.offset, length: layout.embed.data.nbytes }, 'embed');
    for (const e of layout.smalls.values()) add({ file: e.file, offset: e.offset, length: e.nbytes }, 'small');
    cfg.layers.forEach((L, l) => {
      if (L.ffn !== 'moe') return;
      for (let e = 0; e < cfg.moe.experts; e++) {
        for (const q of layout.experts(l, e)) {
          add(q.data, 'expert');
          if (q.scale) add(q.scale, 'expert');
        }
      }
    });
    this.classify = (file, offset) => spans.find((s) => s.file === file && offset >= s.lo && offset < s.hi)?.t ?? 'any';
  }

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    const n = this.reads++;
    if (typeof this.plan === 'number') {
      if (n >= this.plan) this.fail(file, offset, into, 'failed (injected fault)');
      return this.inner.read(file, offset, into);
    }
    const p = this.plan;
    const t = p.target === 'any' ? 'any' : (this.classify?.(file, offset) ?? 'any');
    if (t !== p.target) return this.inner.read(file, offset, into);
    const k = this.seen.get(t) ?? 0;
    this.seen.set(t, k + 1);
    if (k !== p.at) return this.inner.read(file, offset, into);
    switch (p.kind) {
      case 'eio':
        return this.fail(file, offset, into, 'failed (EIO, injected fault)');
      case 'eof': {
        const half = into.subarray(0, into.byteLength >> 1);
        await this.inner.read(file, offset, half);
        this.faulted = true;
        throw new ReadError(`${file}: short read at offset ${offset + half.byteLength}: got ${half.byteLength} of ${into.byteLength} bytes (file truncated?) (injected fault)`, 4);
      }
      case 'short': {
        const cut = into.byteLength >> 1;
        await this.inner.read(file, offset, into.subarray(0, cut));
        return this.inner.read(file, offset + cut, into.subarray(cut));
      }
      case 'eintr':
        if (this.attempts++ < 2) {
          this.seen.set(t, k); // the retry is the same read
          throw new TransientError('EINTR');
        }
        return this.inner.read(file, offset, into);
      case 'flip':
        await this.inner.read(file, offset, into);
        if (into.byteLength > 0) into[into.byteLength >> 1]! ^= 0x10;
        return;
    }
  }

  private fail(file: string, offset: number, into: Uint8Array, why: string): never {
    this.faulted = true;
    throw new ReadError(`${file}: read of ${into.byteLength} bytes at offset ${offset} ${why}`, 4);
  }

  close(): void {
    this.inner.close();
  }
}

/** Retries a read that failed with a transient error (EINTR / EAGAIN), a few times. */
export class RetryingReader implements ByteReader {
  constructor(
    private readonly inner: ByteReader,
    private readonly tries = 5,
  ) {}

  async read(file: string, offset: number, into: Uint8Array): Promise<void> {
    for (let i = 1; ; i++) {
      try {
        return await this.inner.read(file, offset, into);
      } catch (e) {
        if (!(e instanceof TransientError) || i >= this.tries) {
          if (e instanceof TransientError) throw new ReadError(`${file}: read at offset ${offset} failed ${i} times (${e.code})`, 4);
          throw e;
        }
      }
    }
  }

  close(): void {
    this.inner.close();
  }
}
