// The trunk: pieces of the forward order, the first ones pinned after their first read, the rest
// streamed through the ring with read-ahead (ring.ts). A split matrix whose every piece is pinned
// may go in one buffer, so that it is one view too. The kernels' transforms of a piece's bytes
// (coded rows decoded, `--fast` requantization, column panels) come in as a PieceTransform.

import { PANEL_COLS, PANEL_FROM, panelWidth, toPanelsInPlace } from '../formats/panels.js';
import type { WeightView } from '../formats/weight.js';
import { UserError } from '../util/errors.js';
import { allSettledOrThrow } from '../util/settle.js';
import { pieceView, type Piece, type TrunkMatrixLayout } from './layout.js';
import type { StoreParts } from './parts.js';
import type { PieceTransform, Requantizer } from './pieces.js';
import { pinnedMask } from './plan.js';
import { Ring } from './ring.js';

export interface PanelOptions {
  from?: number;
  width?: number;
}

export interface TrunkOptions {
  /** One buffer for all the pinned pieces of a split matrix, or null when it would not go together; default: `alloc`. */
  allocTogether?: (bytes: number) => Uint8Array | null;
  /** Requantize the matrices `transform.requantize` takes (`--fast`). */
  fastTrunk?: boolean;
  /** Column panels for resident wide bf16 matrices (default on, when the transform allows panels). */
  panels?: PanelOptions | false;
  transform?: PieceTransform;
}

/** A pinned piece: its buffer, the read (and requantization) that fills it, and whether that has finished. */
interface PinnedPiece { buf: Uint8Array; ready: Promise<void>; done: boolean; failed: boolean }

export class Trunk {
  private readonly pinned = new Map<number, PinnedPiece>();
  /** Split trunk matrices pinned in one buffer, by base (null: in a buffer per piece); see pinBuffer. */
  private readonly together = new Map<string, Uint8Array | null>();
  /** Trunk matrices requantized as they are read (`fastTrunk`). */
  private readonly q7 = new Set<string>();
  /** Trunk matrices whose pinned pieces go in column panels, by base: the panel width. */
  private readonly panelWidths = new Map<string, number>();
  private readonly requant: Requantizer | null;
  private readonly transform: PieceTransform;
  private readonly allocTogether: (bytes: number) => Uint8Array | null;
  /** 1 per piece seq the plan pins (plan.ts pinnedMask). */
  private readonly pinnedAt: Uint8Array;
  readonly ring: Ring;

  constructor(private readonly s: StoreParts, o: TrunkOptions) {
    this.transform = o.transform ?? {};
    this.allocTogether = o.allocTogether ?? s.alloc;
    this.requant = o.fastTrunk ? (this.transform.requantize ?? null) : null;
    if (o.fastTrunk && !this.requant) throw new Error('fastTrunk: the piece transform has no requantizer');
    const matrices = [...s.layout.matrices.values()];
    if (this.requant) for (const m of matrices) if (this.requant.eligible(m)) this.q7.add(m.base);
    const panels = o.panels ?? {};
    const rowsMax = this.transform.panelRows;
    if (panels && rowsMax) {
      for (const m of matrices) {
        const w = this.q7.has(m.base) ? 0 : panelEligible(m, panels, rowsMax);
        if (w) this.panelWidths.set(m.base, w);
      }
    }
    this.pinnedAt = pinnedMask(s.plan, s.layout);
    const streamed = s.layout.sequence.filter((p) => !this.isPinned(p.seq));
    this.ring = new Ring(s.alloc(s.plan.ringBytes), streamed, (p, into) => this.readPiece(p, into));
  }

  private async readPiece(p: Piece, into: Uint8Array): Promise<void> {
    await this.readStored(p, into);
    if (this.q7.has(p.base)) this.requant!.inPlace(into, p.r1 - p.r0, p.cols);
  }

  private async readStored(p: Piece, into: Uint8Array): Promise<void> {
    const { reads, stats } = this.s;
    if (p.code) {
      // Coded rows (k3 pack --compress): the stored bytes go to the end of the piece's buffer and decode in place.
      const decode = this.transform.decode;
      if (!decode) throw new Error(`${p.base}: coded rows and no decoder in the piece transform`);
      await reads.range(p.data, into.subarray(p.bytes - p.data.length, p.bytes));
      decode(into.subarray(0, p.bytes), p.code);
      stats.trunkBytesRead += p.data.length;
      return;
    }
    const dataLen = p.data.length;
    const all = [reads.range(p.data, into.subarray(0, dataLen))];
    if (p.scale) all.push(reads.range(p.scale, into.subarray(dataLen, dataLen + p.scale.length)));
    await allSettledOrThrow(all);
    stats.trunkBytesRead += p.bytes;
  }

  /** The view of a piece's buffer: as stored, in column panels (pinned pieces of panelled
   *  matrices: readPinned), or the rows it was requantized to (in its own buffer, or in its
   *  matrix's one buffer: pinQ7Together). */
  viewOf(p: Piece, buf: Uint8Array, base: string): WeightView {
    const width = this.panelWidth(p);
    if (width) return { ...pieceView(p, buf, base), panels: { rows: p.r1 - p.r0, width } };
    if (!this.q7.has(p.base)) return pieceView(p, buf, base);
    const whole = this.together.get(p.base);
    if (whole) return this.requant!.view(base, whole, p.rows, p.cols, p.r0, p.r1);
    return this.requant!.view(base, buf, p.r1 - p.r0, p.cols);
  }

  /** The view of split matrix m held in its one buffer (pinBuffer), once every piece is read; else null. */
  wholeView(m: TrunkMatrixLayout, base: string): WeightView | null {
    const buf = this.together.get(base);
    if (!buf || !m.pieces.every((p) => this.pinned.get(p.seq)?.done)) return null;
    return this.q7.has(base) ? this.requant!.view(base, buf, m.rows, m.cols) : { ...this.viewOf(m.pieces[0]!, buf, base), name: base, rows: m.rows, data: buf };
  }

  /** The view of pinned piece p once read; else null. */
  pinnedView(p: Piece, base: string): WeightView | null {
    const e = this.pinned.get(p.seq);
    return e?.done ? this.viewOf(p, e.buf, base) : null;
  }

  /** The panel width of piece p's bytes (pinned pieces of panelled matrices), 0: row-major. */
  private panelWidth(p: Piece): number {
    return this.isPinned(p.seq) ? (this.panelWidths.get(p.base) ?? 0) : 0;
  }

  /** A pinned piece's stored rows, then (panelled matrices) laid out in column panels in place. */
  private async readPinned(p: Piece, buf: Uint8Array): Promise<void> {
    await this.readPiece(p, buf);
    const width = this.panelWidth(p);
    if (width) toPanelsInPlace(buf, p.r1 - p.r0, p.cols, width);
  }

  /** The bytes of the trunk pieces laid out in column panels (pinned pieces of panelled matrices). */
  get panelledBytes(): number {
    let bytes = 0;
    for (const b of this.panelWidths.keys()) for (const p of this.s.layout.matrices.get(b)!.pieces) if (this.panelWidth(p)) bytes += p.bytes;
    return bytes;
  }

  isRequantized(base: string): boolean {
    return this.q7.has(base);
  }

  get requantized(): { matrices: number; bytes: number } {
    let bytes = 0;
    for (const b of this.q7) for (const p of this.s.layout.matrices.get(b)!.pieces) bytes += p.bytes;
    return { matrices: this.q7.size, bytes };
  }

  /** Whether the plan pins piece `seq` (else it streams through the ring). */
  isPinned(seq: number): boolean {
    return this.pinnedAt[seq] === 1;
  }

  /** Every pinned piece has its buffer. */
  get buffersMade(): boolean {
    return this.pinned.size >= this.s.plan.pinnedPieces;
  }

  async acquire(p: Piece): Promise<Uint8Array> {
    const { stats } = this.s;
    if (!this.isPinned(p.seq)) {
      const t0 = performance.now();
      const buf = await this.ring.acquire(p);
      stats.ioWaitMs += performance.now() - t0;
      return buf;
    }
    let e = this.pinned.get(p.seq);
    // a read that failed is tried again, into the same buffer, by the next use
    if (!e || e.failed) {
      const m = this.s.layout.matrices.get(p.base)!;
      const whole = this.togetherBuffer(m);
      if (whole && this.q7.has(p.base)) {
        this.pinQ7Together(m, whole);
        e = this.pinned.get(p.seq)!;
      } else {
        const buf = e?.buf ?? this.pinBuffer(p, m, whole);
        e = this.pin(p, buf, this.readPinned(p, buf));
      }
    }
    const t0 = performance.now();
    await e.ready;
    stats.ioWaitMs += performance.now() - t0;
    return e.buf;
  }

  release(p: Piece): void {
    if (!this.isPinned(p.seq)) this.ring.release(p);
  }

  /**
   * A pinned piece's buffer: its own, or its rows of one buffer that holds its whole matrix (a split
   * matrix, every piece pinned, rows only: bf16 / f16 / f32 without scales; `--fast`'s requantized
   * ones go through pinQ7Together), so that the matrix is one view too and the chained dispatches
   * take it (a matrix over DEFAULT_MAX_PIECE is split: K3's KDA and MoE products, its lm_head).
   * The same bytes either way.
   */
  private pinBuffer(p: Piece, m: TrunkMatrixLayout, whole: Uint8Array | null): Uint8Array {
    if (!whole) return this.s.alloc(p.bytes);
    const i = m.pieces.indexOf(p);
    if (i < 0) throw new Error(`${p.base}: piece ${p.seq} not in its matrix`);
    return piecesIn(m, whole)[i]!;
  }

  /** The one buffer of split matrix m's pieces (allocated at the first piece's pinning), or null
   *  when m does not go in one (togetherEligible) or it did not fit where weights go now. */
  private togetherBuffer(m: TrunkMatrixLayout): Uint8Array | null {
    if (!this.togetherEligible(m)) return null;
    let buf = this.together.get(m.base);
    if (buf === undefined) {
      buf = this.allocTogether(m.pieces.reduce((n, q) => n + q.bytes, 0));
      this.together.set(m.base, buf);
    }
    return buf;
  }

  /**
   * Pins every piece of a split matrix that `--fast` requantizes, in its one buffer: the pieces'
   * bf16 rows are read there, then the whole matrix is requantized at once, so that its rows are
   * one view (the layout the kernels take). Each piece's entry is ready when the whole is. A
   * row's requantized bytes are its own (the requantizer works row by row), so they are those of
   * a piece requantized alone (streamed pieces): the same numbers at every budget.
   */
  private pinQ7Together(m: TrunkMatrixLayout, whole: Uint8Array): void {
    const bufs = piecesIn(m, whole);
    const ready = allSettledOrThrow(m.pieces.map((q, i) => this.readStored(q, bufs[i]!))).then(() => this.requant!.inPlace(whole, m.rows, m.cols));
    m.pieces.forEach((q, i) => this.pin(q, bufs[i]!, ready));
  }

  /** Records piece p as pinned in buf, its bytes there once `ready` settles (done then). */
  private pin(p: Piece, buf: Uint8Array, ready: Promise<void>): PinnedPiece {
    const entry = { buf, ready, done: false, failed: false };
    ready.then(() => void (entry.done = true), () => void (entry.failed = true));
    this.pinned.set(p.seq, entry);
    return entry;
  }

  /** A split matrix whose every piece is pinned. */
  splitPinned(m: TrunkMatrixLayout): boolean {
    return m.pieces.length > 1 && m.pieces.every((p) => this.isPinned(p.seq));
  }

  togetherEligible(m: TrunkMatrixLayout): boolean {
    return this.splitPinned(m) && m.pieces.every((p) => !p.scale);
  }

  /** Read the pinned pieces now, 8 at a time; `report` after each 8. */
  async preload(report: () => void): Promise<void> {
    const pins = this.s.layout.sequence.filter((p) => this.isPinned(p.seq));
    for (let i = 0; i < pins.length; i += 8) {
      await Promise.all(pins.slice(i, i + 8).map(async (p) => this.release((await this.acquire(p), p))));
      report();
    }
  }

  /** A trunk matrix, checked against [rows, cols]. */
  matrix(base: string, rows: number, cols: number): TrunkMatrixLayout {
    const m = this.s.layout.matrices.get(base);
    if (!m) throw new UserError(`missing tensor ${base}.weight in the checkpoint`);
    if (m.rows !== rows || m.cols !== cols) throw new UserError(`tensor ${base} is [${m.rows}, ${m.cols}], expected [${rows}, ${cols}]`);
    return m;
  }
}

/** Each piece's bytes in its matrix's one buffer (pinBuffer), the pieces in row order. */
function piecesIn(m: TrunkMatrixLayout, whole: Uint8Array): Uint8Array[] {
  let off = 0;
  return m.pieces.map((q) => whole.subarray(off, (off += q.bytes)));
}

/**
 * The panel width of trunk matrix m's pinned pieces, 0 for none: bf16 products (not read by rows)
 * wider than `from` columns that split into panels (formats/panels.ts panelWidth), in pieces of
 * fewer than `rowsMax` rows (what the panel kernels can address: PieceTransform.panelRows).
 */
export function panelEligible(m: TrunkMatrixLayout, o: PanelOptions, rowsMax: number): number {
  const rows = m.pieces[0] ? m.pieces[0].r1 - m.pieces[0].r0 : 0;
  if (m.format !== 'bf16' || m.whole || m.cols <= (o.from ?? PANEL_FROM) || rows >= rowsMax) return 0;
  return panelWidth(m.cols, o.width ?? PANEL_COLS);
}
