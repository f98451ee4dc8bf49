// Where every weight byte of a checkpoint is, in the units the store moves them:
// - trunk pieces: each non-expert matrix split into row blocks of at most `maxPiece` bytes, in
//   the order the forward pass uses them (the streaming ring reads ahead in this order);
// - small tensors (norms, biases, conv taps, A_log): always resident, read once;
// - routed experts: gate/up/down (data + scales) per (layer, expert), read whole into a cache slot;
// - the embedding: rows read on demand.
// Pure bookkeeping: no bytes are read here.

import type { ModelConfig } from '../checkpoint/config.js';
import { resolveLinear, type LinearParts } from '../checkpoint/linear.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import type { WeightFormat, WeightView } from '../formats/weight.js';
import { expertLayout, namesOf, trunkOrder } from '../checkpoint/names.js';
import { UserError } from '../util/errors.js';

export interface Range {
  file: string;
  offset: number;
  length: number;
}

/** A row block [r0, r1) of one matrix: its data bytes, then its scale bytes, read into one buffer. */
export interface Piece {
  /** Position in the trunk sequence. */
  seq: number;
  base: string;
  format: WeightFormat;
  scaleDtype?: 'F32' | 'BF16' | 'F16';
  rows: number;
  cols: number;
  r0: number;
  r1: number;
  data: Range;
  scale: Range | null;
  bytes: number;
  /** Set when the rows are stored coded (k3 pack --compress): `data` is the stored bytes, decoded to bytes - scale. */
  code?: CodedRows;
}

/** The coded blocks of a piece's rows (k3 pack --compress): what its decoder (PieceTransform.decode) is given. */
export interface CodedRows {
  cols: number;
  /** Rows of each block, in order. */
  blockRows: number[];
  /** Stored bytes of each block, in order. */
  stored: number[];
  /** For error messages: the file and tensor. */
  where: string;
  /** File offset of the first block (for error messages). */
  offset: number;
}

export interface TrunkMatrixLayout {
  base: string;
  rows: number;
  cols: number;
  format: WeightFormat;
  whole: boolean;
  /** Kept exact under `--fast` (names.ts TrunkMatrix.exact). */
  exact: boolean;
  pieces: Piece[];
}

export interface ExpertPart {
  mat: 0 | 1 | 2; // gate, up, down
  format: WeightFormat;
  scaleDtype?: 'F32' | 'BF16' | 'F16';
  rows: number;
  cols: number;
  data: Range;
  scale: Range | null;
}

export interface Layout {
  matrices: Map<string, TrunkMatrixLayout>;
  sequence: Piece[];
  trunkBytes: number;
  maxPieceBytes: number;
  /** Largest raw block of a coded trunk matrix (0: nothing coded): sizes the decoder's memory. */
  maxCodedBlockBytes: number;
  /** Names and byte sizes of the small always-resident tensors. */
  smalls: Map<string, TensorEntry>;
  smallBytes: number;
  embed: LinearParts;
  /** Bytes of one expert (all experts are the same size), 0 for a model without MoE. */
  expertBytes: number;
  experts: (layer: number, expert: number) => ExpertPart[];
  moeLayers: number;
}

export const DEFAULT_MAX_PIECE = 32 * 2 ** 20;

function rowBytes(p: LinearParts): { data: number; scale: number } {
  return { data: p.data.nbytes / p.rows, scale: p.scale && p.format !== 'fp8' ? p.scale.nbytes / p.rows : 0 };
}

function sliceRange(e: TensorEntry, off: number, len: number): Range {
  return { file: e.file, offset: e.offset + off, length: len };
}

/** Row block [r0, r1) of a linear's parts as byte ranges. */
export function rowBlock(p: LinearParts, r0: number, r1: number): { data: Range; scale: Range | null } {
  const rb = rowBytes(p);
  const data = sliceRange(p.data, r0 * rb.data, (r1 - r0) * rb.data);
  let scale: Range | null = null;
  if (p.scale) {
    if (p.format === 'fp8') {
      const sRow = p.scale.nbytes / Math.ceil(p.rows / 128);
      scale = sliceRange(p.scale, (r0 / 128) * sRow, (Math.ceil(r1 / 128) - r0 / 128) * sRow);
    } else {
      scale = sliceRange(p.scale, r0 * rb.scale, (r1 - r0) * rb.scale);
    }
  }
  return { data, scale };
}

/**
 * @param partial skip trunk matrices and experts the checkpoint lacks (block-level test
 *   fixtures hold one layer); using one then fails. Real checkpoints are checked in full.
 */
export function buildLayout(cfg: ModelConfig, entries: Map<string, TensorEntry>, maxPiece = DEFAULT_MAX_PIECE, partial = false): Layout {
  const matrices = new Map<string, TrunkMatrixLayout>();
  const sequence: Piece[] = [];
  const used = new Set<string>();
  let trunkBytes = 0;
  let maxPieceBytes = 0;
  let maxCodedBlockBytes = 0;
  const markUsed = (p: LinearParts) => {
    used.add(p.data.name);
    if (p.scale) used.add(p.scale.name);
    const ws = entries.get(`${p.base}.weight_shape`);
    if (ws) used.add(ws.name);
  };
  for (const m of trunkOrder(cfg)) {
    if (partial && !entries.has(`${m.base}.weight`) && !entries.has(`${m.base}.weight_packed`)) continue;
    const p = resolveLinear(entries, m.base, [m.rows, m.cols]);
    if (p.rows !== m.rows || p.cols !== m.cols) throw new UserError(`${p.data.file}: tensor ${p.data.name} is [${p.rows}, ${p.cols}], expected [${m.rows}, ${m.cols}]`);
    markUsed(p);
    const rb = rowBytes(p);
    const perRow = rb.data + rb.scale;
    let step = m.whole ? m.rows : Math.max(1, Math.floor(maxPiece / perRow));
    if (p.format === 'fp8' && step < m.rows) step = Math.max(128, step - (step % 128));
    const coded = p.data.coded;
    if (coded && step < m.rows) step = Math.max(coded.blockRows, step - (step % coded.blockRows)); // pieces are whole blocks
    if (coded) maxCodedBlockBytes = Math.max(maxCodedBlockBytes, 2 * coded.blockRows * m.cols);
    const pieces: Piece[] = [];
    for (let r0 = 0; r0 < m.rows; r0 += step) {
      const r1 = Math.min(m.rows, r0 + step);
      const { data, scale } = coded ? codedBlock(p.data, r0, r1) : rowBlock(p, r0, r1);
      const code = coded ? codedRun(p.data, m.cols, r0, r1, data.offset) : undefined;
      const piece: Piece = { seq: sequence.length, base: m.base, format: p.format, scaleDtype: p.scaleDtype, rows: m.rows, cols: m.cols, r0, r1, data, scale, bytes: code ? 2 * m.cols * (r1 - r0) : data.length + (scale?.length ?? 0), code };
      pieces.push(piece);
      sequence.push(piece);
      trunkBytes += piece.bytes;
      maxPieceBytes = Math.max(maxPieceBytes, piece.bytes);
    }
    matrices.set(m.base, { base: m.base, rows: m.rows, cols: m.cols, format: p.format, whole: m.whole, exact: m.exact ?? false, pieces });
  }

  const names = namesOf(cfg);
  const embedName = names.embed;
  const embed = partial && !entries.has(`${embedName}.weight`)
    ? ({ base: embedName, format: 'bf16', rows: cfg.vocabSize, cols: cfg.hiddenSize, data: { name: `${embedName}.weight`, file: '', dtype: 'BF16', shape: [cfg.vocabSize, cfg.hiddenSize], offset: 0, nbytes: 0 } } as LinearParts)
    : resolveLinear(entries, `${embedName}`, [cfg.vocabSize, cfg.hiddenSize]);
  markUsed(embed);

  const { expertBytes, expertParts } = expertsOf(cfg, entries, used, partial);
  const moeLayers = cfg.layers.filter((L) => L.ffn === 'moe').length;
  const { smalls, smallBytes } = smallTensors(cfg, entries, used);
  return { matrices, sequence, trunkBytes, maxPieceBytes, maxCodedBlockBytes, smalls, smallBytes, embed, expertBytes, experts: expertParts, moeLayers };
}

/** Each expert's parts (gate, up, down) and the bytes of one; marks every expert tensor used and
 *  checks that all experts have the same size. */
function expertsOf(cfg: ModelConfig, entries: Map<string, TensorEntry>, used: Set<string>, partial: boolean): { expertBytes: number; expertParts: Layout['experts'] } {
  const names = namesOf(cfg);
  const el = expertLayout(cfg);
  const expertParts = (layer: number, expert: number): ExpertPart[] => {
    return el.names(layer, expert).map((base, i) => {
      const shape = i === 2 ? el.downShape : el.gateShape;
      const p = resolveLinear(entries, base, shape);
      if (p.rows !== shape[0] || p.cols !== shape[1]) throw new UserError(`${p.data.file}: tensor ${p.data.name} is [${p.rows}, ${p.cols}], expected ${JSON.stringify(shape)}`);
      const { data, scale } = rowBlock(p, 0, p.rows);
      return { mat: i as 0 | 1 | 2, format: p.format, scaleDtype: p.scaleDtype, rows: p.rows, cols: p.cols, data, scale };
    });
  };
  let expertBytes = 0;
  cfg.layers.forEach((L, l) => {
    if (L.ffn !== 'moe') return;
    for (let e = 0; e < cfg.moe.experts; e++) {
      if (partial && !names.expert(l, e).every((b) => entries.has(`${b}.weight`) || entries.has(`${b}.weight_packed`))) continue;
      const parts = expertParts(l, e);
      const b = parts.reduce((s, q) => s + q.data.length + (q.scale?.length ?? 0), 0);
      if (expertBytes === 0) expertBytes = b;
      else if (b !== expertBytes) throw new UserError(`expert ${e} of layer ${l} is ${b} bytes, others ${expertBytes}`);
      for (const base of el.names(l, e)) for (const suf of ['.weight', '.weight_packed', '.weight_scale', '.weight_scale_inv', '.weight_shape']) used.add(base + suf);
    }
  });
  return { expertBytes, expertParts };
}

/** Everything else under the decoder's prefix: the small always-resident tensors. */
function smallTensors(cfg: ModelConfig, entries: Map<string, TensorEntry>, used: Set<string>): { smalls: Map<string, TensorEntry>; smallBytes: number } {
  const names = namesOf(cfg);
  const smalls = new Map<string, TensorEntry>();
  let smallBytes = 0;
  for (const [name, e] of entries) {
    if (used.has(name) || !names.isDecoder(name)) continue;
    const layer = /\.layers\.(\d+)\./.exec(name);
    if (layer && Number(layer[1]) >= cfg.numLayers) continue; // e.g. DeepSeek-V3's MTP layer 61
    smalls.set(name, e);
    smallBytes += e.nbytes;
  }
  return { smalls, smallBytes };
}

/** The stored blocks of rows [r0, r1) of a coded matrix (r0 and r1 on block boundaries, or r1 = rows). */
function codedBlock(e: TensorEntry, r0: number, r1: number): { data: Range; scale: null } {
  const c = e.coded!;
  const b0 = r0 / c.blockRows, b1 = Math.ceil(r1 / c.blockRows);
  let off = 0;
  for (let b = 0; b < b0; b++) off += c.stored[b]!;
  let len = 0;
  for (let b = b0; b < b1; b++) len += c.stored[b]!;
  return { data: { file: e.file, offset: e.offset + off, length: len }, scale: null };
}

function codedRun(e: TensorEntry, cols: number, r0: number, r1: number, offset: number): CodedRows {
  const c = e.coded!;
  const b0 = r0 / c.blockRows, b1 = Math.ceil(r1 / c.blockRows);
  const blockRows = Array.from({ length: b1 - b0 }, (_, i) => Math.min(r1, (b0 + i + 1) * c.blockRows) - (b0 + i) * c.blockRows);
  return { cols, blockRows, stored: c.stored.slice(b0, b1), where: `${e.file}: tensor ${e.name} rows ${r0}..${r1}`, offset };
}

/** A WeightView over a piece's buffer (data bytes, then scale bytes). */
export function pieceView(p: Piece | ExpertPart, buf: Uint8Array, name: string): WeightView {
  const dataLen = 'code' in p && p.code ? p.bytes : p.data.length; // coded: the decoded rows
  const rows = 'r0' in p ? p.r1 - p.r0 : p.rows;
  const v: WeightView = { name, format: p.format, rows, cols: p.cols, data: buf.subarray(0, dataLen) };
  if (p.scale) {
    v.scale = buf.subarray(dataLen, dataLen + p.scale.length);
    v.scaleDtype = p.scaleDtype;
  }
  return v;
}
