// The streaming ring for trunk pieces that are not pinned: one fixed arena, filled in the order
// the forward pass uses the pieces (a FIFO circular buffer), read ahead while the current piece
// is being computed on. The trunk is a cyclic scan (every pass reads the same pieces in the same
// order), which defeats LRU, so there is no LRU here: pieces leave in the order they came.
//
// Invariant that makes progress certain: the arena holds at least 3x the largest piece, and the
// forward pass holds at most one piece at a time, so a demanded piece always fits once every
// unheld piece is evicted.

import type { Piece } from './layout.js';

interface Entry {
  piece: Piece;
  off: number;
  ready: Promise<void>;
  loaded: boolean;
  /** Its read failed: the next acquire is told so, then the entry is gone (evictable until then). */
  failed: boolean;
  refs: number;
  /** Acquired at least once since it was loaded (a prefetched, not yet used piece is protected from prefetch eviction). */
  used: boolean;
}

const ENTRY_ALIGN = 4096;

export type PieceLoader = (piece: Piece, into: Uint8Array) => Promise<void>;

export interface RingStats {
  loads: number;
  bytes: number;
  /** Milliseconds the forward pass waited for a piece that was not loaded yet. */
  waitMs: number;
  hits: number;
}

export class Ring {
  private readonly q: Entry[] = []; // allocation order; q[0] is the tail (oldest)
  private readonly byId = new Map<number, Entry>();
  private head = 0;
  private waiters: (() => void)[] = [];
  readonly stats: RingStats = { loads: 0, bytes: 0, waitMs: 0, hits: 0 };

  constructor(
    readonly arena: Uint8Array,
    /** Streamed pieces in sequence order (pinned pieces excluded). */
    private readonly sequence: Piece[],
    private readonly load: PieceLoader,
    /** How many bytes ahead of the current piece to read (bounded by the arena). */
    private readonly readAheadBytes: number = arena.byteLength,
  ) {
    sequence.forEach((p, i) => this.indexOf.set(p.seq, i));
    const max = sequence.reduce((m, p) => Math.max(m, p.bytes), 0);
    if (sequence.length > 0 && arena.byteLength < 3 * max) throw new Error(`ring of ${arena.byteLength} bytes is below 3 x the largest piece (${max})`);
  }

  /** Position of each streamed piece in `sequence`, by piece seq. */
  private readonly indexOf = new Map<number, number>();

  /** The piece's bytes, loaded (waiting if needed); call release() when done with them. */
  async acquire(piece: Piece): Promise<Uint8Array> {
    let e = this.byId.get(piece.seq);
    if (e) this.stats.hits++;
    else e = await this.demand(piece);
    e.refs++;
    e.used = true;
    if (!e.loaded) {
      const t0 = performance.now();
      try {
        await e.ready;
      } catch (err) {
        // Reported once, to this caller (who gets no bytes and releases nothing); the next
        // acquire reads the piece again. Kept, a piece never loaded would wedge every later pass.
        e.refs--;
        this.forget(e);
        throw err;
      }
      this.stats.waitMs += performance.now() - t0;
    }
    this.prefetchAfter(piece);
    return this.arena.subarray(e.off, e.off + piece.bytes);
  }

  release(piece: Piece): void {
    const e = this.byId.get(piece.seq);
    if (!e || e.refs <= 0) throw new Error(`ring: release of ${piece.base}[${piece.r0}:${piece.r1}] that is not held`);
    e.refs--;
    this.wake();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Wait until in-flight reads have finished (before closing files). */
  async drain(): Promise<void> {
    await Promise.allSettled(this.q.map((e) => e.ready));
  }

  private async demand(piece: Piece): Promise<Entry> {
    for (;;) {
      const off = this.allocate(piece.bytes, true);
      if (off >= 0) return this.start(piece, off);
      // Every evictable entry is gone and the tail is held: wait for a release.
      await new Promise<void>((r) => this.waiters.push(r));
      const e = this.byId.get(piece.seq);
      if (e) return e;
    }
  }

  private start(piece: Piece, off: number): Entry {
    const e: Entry = { piece, off, ready: Promise.resolve(), loaded: false, failed: false, refs: 0, used: false };
    e.ready = this.load(piece, this.arena.subarray(off, off + piece.bytes)).then(
      () => {
        e.loaded = true;
        this.wake();
      },
      (err: unknown) => {
        e.failed = true;
        this.wake();
        throw err;
      },
    );
    // A failed read is reported to whoever acquires the piece; keep it from being "unhandled" here.
    e.ready.catch(() => {});
    this.q.push(e);
    this.byId.set(piece.seq, e);
    // Entries start 4 KiB-aligned, so O_DIRECT can read an aligned piece in place (store/direct-reader.ts);
    // the slack is under 4 KiB per entry, far below the arena's two spare pieces.
    this.head = Math.min(this.arena.byteLength, Math.ceil((off + piece.bytes) / ENTRY_ALIGN) * ENTRY_ALIGN);
    this.stats.loads++;
    this.stats.bytes += piece.bytes;
    return e;
  }

  /** Drop an entry whose read failed; its space comes back at once when it was the newest entry,
   *  else once the entries before it have left. */
  private forget(e: Entry): void {
    const i = this.q.indexOf(e);
    if (i < 0) return;
    this.q.splice(i, 1);
    if (this.byId.get(e.piece.seq) === e) this.byId.delete(e.piece.seq);
    if (i === this.q.length) this.head = e.off;
    this.wake();
  }

  /**
   * Offset for `len` bytes at the head of the circular arena, evicting from the tail as needed:
   * any unheld, finished entry when `demand`; for read-ahead only entries already used (or failed).
   */
  private allocate(len: number, demand: boolean): number {
    const cap = this.arena.byteLength;
    for (;;) {
      if (this.q.length === 0) {
        this.head = 0;
        return len <= cap ? 0 : -1;
      }
      const tail = this.q[0]!.off;
      if (this.head > tail) {
        if (this.head + len <= cap) return this.head;
        if (len <= tail) return 0;
      } else if (this.head < tail) {
        if (this.head + len <= tail) return this.head;
      }
      // No room: evict the tail if allowed.
      const t = this.q[0]!;
      if (t.refs > 0 || !(t.loaded || t.failed) || (!demand && !t.used && !t.failed)) return -1;
      this.q.shift();
      this.byId.delete(t.piece.seq);
    }
  }

  private prefetchAfter(piece: Piece): void {
    const n = this.sequence.length;
    if (n === 0) return;
    const i0 = this.indexOf.get(piece.seq);
    if (i0 === undefined) return;
    let ahead = 0;
    for (let k = 1; k < n; k++) {
      const p = this.sequence[(i0 + k) % n]!;
      ahead += p.bytes;
      if (ahead > this.readAheadBytes) return;
      if (this.byId.has(p.seq)) continue;
      const off = this.allocate(p.bytes, false);
      if (off < 0) return;
      this.start(p, off);
    }
  }
}
