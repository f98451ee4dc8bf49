// The state file a chat session saves to and loads from, and the model fingerprint it carries.
//
// State file (little-endian):
//   8 bytes  magic "K3STATE\0"
//   u32      format version (1)
//   u32      header length H
//   H bytes  JSON: { fingerprint, processed, pending, open, arrays }
//   pad to a multiple of 8
//   f32      per layer in order: KDA S [H·dk·dk] and conv tails [3·(W-1)·P]; MLA latents
//            [processed·Lk] and rope keys [processed·dr]
//   u32      token ids: the `processed` ids of the state, then the `pending` ids sampled but not
//            yet run through the model
//   32 bytes sha256 of every byte before it (version 2): a flipped byte anywhere is refused, and
//            so is a NaN / inf in the arrays (a state no forward pass can have produced)
// The fingerprint is of the shapes and of the weights (`weightsFingerprint`): a state saved from
// one model is refused by another with the same shapes but other weights (another seed, another
// fine-tune), and accepted by a pack of the same checkpoint.
// A file whose fingerprint differs from the model's, or whose size is not what the header says,

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import type { ModelConfig } from '../checkpoint/config.js';
import type { Model } from '../model/model.js';
import type { SequenceState } from '../model/state.js';
import { UserError } from '../util/errors.js';
import { writeAtomic } from '../util/stale-tmp.js';

export const STATE_MAGIC = 'K3STATE\0';
export const STATE_VERSION = 2;
const DIGEST_BYTES = 32;

export interface ShapeFingerprint {
  arch: string;
  layers: number;
  hidden: number;
  vocab: number;
  /** One letter per layer: k = KDA, m = MLA. */
  attn: string;
  kda: { heads: number; headDim: number; convSize: number } | null;
  mla: { kvLoraRank: number; ropeDim: number };
  /** sha256 (first 16 hex digits) of every config field that sets a shape. */
  configHash: string;
}

export function shapeFingerprint(cfg: ModelConfig): ShapeFingerprint {
  const shapeFields = {
    arch: cfg.arch,
    vocabSize: cfg.vocabSize,
    hiddenSize: cfg.hiddenSize,
    numLayers: cfg.numLayers,
    intermediateSize: cfg.intermediateSize,
    layers: cfg.layers.map((L) => `${L.attn}/${L.ffn}`),
    mla: { heads: cfg.mla.heads, qLoraRank: cfg.mla.qLoraRank, kvLoraRank: cfg.mla.kvLoraRank, nopeDim: cfg.mla.nopeDim, ropeDim: cfg.mla.ropeDim, vDim: cfg.mla.vDim, outputGate: cfg.mla.outputGate },
    kda: cfg.kda ? { heads: cfg.kda.heads, headDim: cfg.kda.headDim, convSize: cfg.kda.convSize, fullRankGate: cfg.kda.fullRankGate } : null,
    moe: { experts: cfg.moe.experts, topK: cfg.moe.topK, shared: cfg.moe.shared, intermediate: cfg.moe.intermediate, latentDim: cfg.moe.latentDim },
    attnResBlock: cfg.attnResBlock,
  };
  return {
    arch: cfg.arch,
    layers: cfg.numLayers,
    hidden: cfg.hiddenSize,
    vocab: cfg.vocabSize,
    attn: cfg.layers.map((L) => (L.attn === 'kda' ? 'k' : 'm')).join(''),
    kda: cfg.kda ? { heads: cfg.kda.heads, headDim: cfg.kda.headDim, convSize: cfg.kda.convSize } : null,
    mla: { kvLoraRank: cfg.mla.kvLoraRank, ropeDim: cfg.mla.ropeDim },
    configHash: createHash('sha256').update(JSON.stringify(shapeFields)).digest('hex').slice(0, 16),
  };
}

/** What a state file says of its model: the shapes, and the weights. */
export type ModelFingerprint = ShapeFingerprint & { weights: string };

const weightPrints = new WeakMap<Model, string>();

/**
 * sha256 (first 16 hex digits) of the small tensors (norms, gains, biases, conv taps) as stored:
 * every trained checkpoint has its own, a pack copies them byte for byte (never coded), and they
 * are a few MB even for K3, read once per model (here, not through the checked reader: no token
 * is computed from these bytes).
 */
export function weightsFingerprint(model: Model): string {
  let fp = weightPrints.get(model);
  if (fp !== undefined) return fp;
  const h = createHash('sha256');
  const smalls = [...model.store.layout.smalls.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const fds = new Map<string, number>();
  try {
    for (const e of smalls) {
      let fd = fds.get(e.file);
      if (fd === undefined) fds.set(e.file, (fd = fs.openSync(e.file, 'r')));
      const b = Buffer.alloc(e.nbytes);
      if (fs.readSync(fd, b, 0, e.nbytes, e.offset) !== e.nbytes) throw new UserError(`${e.file}: short read of tensor ${e.name}`);
      h.update(`${e.name}\0${e.dtype}\0${e.shape.join(',')}\0`).update(b);
    }
  } finally {
    for (const fd of fds.values()) fs.closeSync(fd);
  }
  fp = h.digest('hex').slice(0, 16);
  weightPrints.set(model, fp);
  return fp;
}

function modelFingerprint(model: Model): ModelFingerprint {
  return { ...shapeFingerprint(model.config), weights: weightsFingerprint(model) };
}

function describe(f: ModelFingerprint): string {
  return `${f.arch}, ${f.layers} layers, hidden ${f.hidden}, vocab ${f.vocab}, config ${f.configHash}, weights ${f.weights ?? 'unknown'}`;
}

interface StateHeader {
  fingerprint: ModelFingerprint;
  processed: number;
  pending: number;
  /** The last reply was cut (no stop id): the next turn closes it first. */
  open: boolean;
  /** Float32 count of every array, in file order (a check of the layout). */
  arrays: number[];
}

/** The f32 arrays of a state in file order (MLA views cover `length` positions). */
function stateArrays(state: SequenceState): Float32Array[] {
  const out: Float32Array[] = [];
  for (let i = 0; i < state.cfg.layers.length; i++) {
    const k = state.kda[i];
    const m = state.mla[i];
    if (k) out.push(k.S, k.conv);
    if (m) out.push(m.lat.subarray(0, m.length * m.Lk), m.rope.subarray(0, m.length * m.dr));
  }
  return out;
}

function asBytes(a: ArrayBufferView): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** Write `state` of `model` (+ `pending` ids) to `file` atomically. */
export function saveState(file: string, model: Model, state: SequenceState, pending: readonly number[] = [], open = false): number {
  if (os.endianness() !== 'LE') throw new UserError('state files are little-endian; this machine is not');
  for (const m of state.mla) {
    if (m && m.length !== state.position) throw new Error(`MLA cache holds ${m.length} positions, state ${state.position}`);
  }
  const arrays = stateArrays(state);
  const header: StateHeader = { fingerprint: modelFingerprint(model), processed: state.position, pending: pending.length, open, arrays: arrays.map((a) => a.length) };
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const pre = Buffer.alloc(16);
  pre.write(STATE_MAGIC, 0, 'latin1');
  pre.writeUInt32LE(STATE_VERSION, 8);
  pre.writeUInt32LE(json.length, 12);
  const pad = Buffer.alloc((8 - ((16 + json.length) % 8)) % 8);
  const ids = Uint32Array.from([...state.tokens, ...pending]);

  let total = 0;
  writeAtomic(
    file,
    (fd) => {
      const hash = createHash('sha256');
      const write = (b: Buffer): void => {
        let off = 0;
        while (off < b.length) off += fs.writeSync(fd, b, off, b.length - off);
        total += b.length;
      };
      for (const b of [pre, json, pad, ...arrays.map(asBytes), asBytes(ids)]) {
        hash.update(b);
        write(b);
      }
      write(hash.digest());
    },
    'write the state',
  );
  return total;
}

export interface LoadedState {
  state: SequenceState;
  pending: number[];
  open: boolean;
  bytes: number;
}

/** The file's last 32 bytes must be the sha256 of the bytes before them. */
function checkDigest(file: string, fd: number, size: number): void {
  if (size < 16 + DIGEST_BYTES) throw new UserError(`${file}: state file is truncated`);
  const hash = createHash('sha256');
  const buf = Buffer.alloc(Math.min(16 * 2 ** 20, size));
  for (let at = 0; at < size - DIGEST_BYTES;) {
    const n = fs.readSync(fd, buf, 0, Math.min(buf.length, size - DIGEST_BYTES - at), at);
    if (n === 0) throw new UserError(`${file}: state file is truncated`);
    hash.update(buf.subarray(0, n));
    at += n;
  }
  const want = Buffer.alloc(DIGEST_BYTES);
  if (fs.readSync(fd, want, 0, DIGEST_BYTES, size - DIGEST_BYTES) !== DIGEST_BYTES || !hash.digest().equals(want)) {
    throw new UserError(`${file}: state file fails its checksum (damaged, truncated or edited)`);
  }
}

/** Read a state file for `model`; UserError naming the file if it is not one, is for another
 *  model, or is truncated. */
export function loadState(file: string, model: Model): LoadedState {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${file}: cannot open the state file (${code === 'ENOENT' ? 'not found' : (code ?? String(e))})`);
  }
  try {
    const size = fs.fstatSync(fd).size;
    const readAt = (into: ArrayBufferView, pos: number): void => {
      const b = asBytes(into);
      let off = 0;
      while (off < b.length) {
        const n = fs.readSync(fd, b, off, b.length - off, pos + off);
        if (n === 0) throw new UserError(`${file}: state file is truncated`);
        off += n;
      }
    };
    if (size < 16) throw new UserError(`${file}: not a k3 state file (too short)`);
    const pre = Buffer.alloc(16);
    readAt(pre, 0);
    if (pre.toString('latin1', 0, 8) !== STATE_MAGIC) throw new UserError(`${file}: not a k3 state file (bad magic)`);
    const version = pre.readUInt32LE(8);
    if (version !== STATE_VERSION) throw new UserError(`${file}: state file version ${version}, this build reads version ${STATE_VERSION}`);
    checkDigest(file, fd, size);
    const hlen = pre.readUInt32LE(12);
    if (16 + hlen > size) throw new UserError(`${file}: state file is truncated (header)`);
    const jb = Buffer.alloc(hlen);
    readAt(jb, 16);
    let h: StateHeader;
    try {
      h = JSON.parse(jb.toString('utf8')) as StateHeader;
    } catch {
      throw new UserError(`${file}: state file header is corrupt`);
    }
    if (!h || typeof h !== 'object' || !h.fingerprint || !Number.isInteger(h.processed) || !Number.isInteger(h.pending) || h.processed < 0 || h.pending < 0 || !Array.isArray(h.arrays)) {
      throw new UserError(`${file}: state file header is corrupt`);
    }
    const mine = modelFingerprint(model);
    if (JSON.stringify(h.fingerprint) !== JSON.stringify(mine)) {
      throw new UserError(`${file}: state was saved from a different model (${describe(h.fingerprint)}; this model: ${describe(mine)})`);
    }
    const state = model.newState();
    // Bound the positions by the file's size before reserving memory for them (a damaged count
    // must not allocate a petabyte).
    const perPosition = state.mla.reduce((n, m) => n + (m ? 4 * (m.Lk + m.dr) : 0), 4);
    if (!Number.isSafeInteger(h.processed * perPosition) || h.processed * perPosition + 4 * h.pending > size) {
      throw new UserError(`${file}: state file header is corrupt (${h.processed} positions do not fit in ${size} bytes)`);
    }
    for (const m of state.mla) {
      if (m) {
        m.reserve(h.processed);
        m.length = h.processed;
      }
    }
    const arrays = stateArrays(state);
    if (arrays.length !== h.arrays.length || arrays.some((a, i) => a.length !== h.arrays[i])) throw new UserError(`${file}: state file layout does not match the model`);
    let pos = 16 + hlen;
    pos += (8 - (pos % 8)) % 8;
    const expected = pos + arrays.reduce((s, a) => s + a.byteLength, 0) + 4 * (h.processed + h.pending) + DIGEST_BYTES;
    if (size < expected) throw new UserError(`${file}: state file is truncated (${size} bytes, header says ${expected})`);
    if (size > expected) throw new UserError(`${file}: state file has ${size - expected} unexpected trailing bytes`);
    for (const [i, a] of arrays.entries()) {
      readAt(a, pos);
      pos += a.byteLength;
      for (let j = 0; j < a.length; j++) if (!Number.isFinite(a[j]!)) throw new UserError(`${file}: state array ${i} holds ${a[j]} at element ${j} (a damaged state)`);
    }
    const ids = new Uint32Array(h.processed + h.pending);
    readAt(ids, pos);
    for (const id of ids) if (id >= model.config.vocabSize) throw new UserError(`${file}: token id ${id} is outside the vocabulary`);
    state.tokens.push(...ids.subarray(0, h.processed));
    return { state, pending: Array.from(ids.subarray(h.processed)), open: h.open === true, bytes: size };
  } finally {
    fs.closeSync(fd);
  }
}
