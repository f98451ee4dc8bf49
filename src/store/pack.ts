// `k3 pack`: re-lay a checkpoint out for streaming, and read such a packed directory back.
//
// A packed directory OUT holds
//   config.json                  copied byte for byte (and the tokenizer files, when present)
//   packed.json                  the manifest below
//   trunk-00001.bin, ...         the non-expert weights, one record per layer (see below)
//   experts-00001.bin, ...       only when the experts are packed: one record per expert
//
// Records. A record is a contiguous, 4 KiB-aligned byte run of one data file. There is one per
// layer holding all of that layer's non-expert tensors (the trunk matrices in `trunkOrder` order,
// each with its scale / shape tensors, then the layer's small tensors: norms, biases, conv taps),
// one for the embedding and one for the head (lm_head, then the final norm and K3's
// output_attn_res tensors). Inside a record every tensor starts 4 KiB-aligned (the padding is
// zeros). A group bigger than `maxRecord` (default 512 MiB; K3's dense layer 0 is 2.3 GB) is split
// into several records at tensor boundaries, named `<group>.part<i>`; a tensor bigger than the
// limit gets a record of its own. A data file rolls over to the next at `fileSize` (16 GiB), a
// record bigger than that gets a file of its own. Each record carries the sha256 of its bytes
// (offset .. offset + length, padding included); `verifyPack` recomputes them.
//
// Experts. When every routed expert's tensors are one contiguous byte run in the source shards
// (K3 ships them so) and all experts share one relative layout, they stay where they are: the
// manifest names the source directory once (relative to OUT, and absolute as a fallback) and, per
// expert, the shard and the run's offset. Otherwise (or with experts: 'pack') each expert becomes
// one 4 KiB-aligned record `expert.<layer>.<id>` in experts-NNNNN.bin, its tensors back to back
// (gate, up, down; data, scale, shape), so one read fetches an expert.
//
// Tensors the engine never reads (vision tower, projector, MTP layers past num_hidden_layers) are
// left out and listed in `dropped`.
//
// packed.json (version 1):
// {
//   format: "kimi-k3-ts packed", version: 1, alignment: 4096,
//   source: "/abs/path/of/MODEL", config_sha256: "<hex of config.json bytes>", arch,
//   options: { max_record, file_size, experts: "auto" | "in-place" | "pack" },
//   source_shards: [{ file: "model-00001-of-00002.safetensors", size, header_sha256 }],
//   files: [{ name: "trunk-00001.bin", size }],
//   records: [{ name: "layer.3" | "layer.0.part1" | "embed" | "head" | "expert.1.7", kind, file: "trunk-00001.bin", offset, length, sha256 }],
//   tensors: { "<name>": { dtype, shape, record: <index into records>, offset_in_record, nbytes } },
//   experts_in_place: bool,
//   experts: null | {
//     in_place: bool,
//     dir: "<source dir relative to OUT>" | null, source_dir: "<absolute>" | null   (in place only)
//     files: [shard names (in place) | "experts-00001.bin", ...],
//     expert_bytes,
//     template: [{ suffix: "w1.weight_packed", dtype, shape, offset, nbytes }],  offset within the run
//     at: { "<expert prefix, e.g. language_model.model.layers.1.block_sparse_moe.experts.7.>": [file index, offset of the run] }
//   },
//   dropped: ["<tensor names left out>"], total_bytes, tensor_count
// }
// A tensor's bytes are at files[record.file] offset record.offset + offset_in_record; an expert
// tensor's at experts.files[at[prefix][0]] offset at[prefix][1] + template.offset.
//
// `indexCheckpointDir` calls `readPackedDir` when a directory holds packed.json, so every command
// that opens a model accepts a packed directory.

import { createHash, type Hash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../checkpoint/config.js';
import { DTYPE_BYTES, isDType, type DType } from '../checkpoint/dtypes.js';
import { indexCheckpointDir, type TensorEntry } from '../checkpoint/safetensors.js';
import { expertNames, layerPrefix, lmHeadName, modelPrefix, trunkOrder } from '../model/weights.js';
import { ReadError, UserError } from '../util/errors.js';
import { buildLayout } from './layout.js';

export const PACK_FORMAT = 'kimi-k3-ts packed';
export const PACK_VERSION = 1;
export const MANIFEST_NAME = 'packed.json';
export const PACK_ALIGN = 4096;
export const DEFAULT_MAX_RECORD = 512 * 2 ** 20;
export const DEFAULT_FILE_SIZE = 16 * 2 ** 30;
/** Bytes per read / write; three such buffers are in flight at most. */
export const DEFAULT_CHUNK = 16 * 2 ** 20;
export const COPIED_FILES = ['tiktoken.model', 'tokenizer_config.json', 'chat_template.jinja', 'generation_config.json'];

const LINEAR_SUFFIXES = ['.weight', '.weight_packed', '.weight_scale', '.weight_scale_inv', '.weight_shape'];

export type ExpertsMode = 'auto' | 'in-place' | 'pack';
export type RecordKind = 'embed' | 'layer' | 'head' | 'expert';

export interface PackedRecord {
  name: string;
  kind: RecordKind;
  /** Data file name (one of `files`). */
  file: string;
  offset: number;
  length: number;
  sha256: string;
}

export interface PackedTensor {
  dtype: DType;
  shape: number[];
  record: number;
  offset_in_record: number;
  nbytes: number;
}

export interface ExpertTemplateItem {
  suffix: string;
  dtype: DType;
  shape: number[];
  offset: number;
  nbytes: number;
}

export interface PackedExperts {
  in_place: boolean;
  dir: string | null;
  source_dir: string | null;
  files: string[];
  expert_bytes: number;
  template: ExpertTemplateItem[];
  at: Record<string, [number, number]>;
}

export interface SourceShard {
  file: string;
  size: number;
  header_sha256: string;
}

export interface PackManifest {
  format: string;
  version: number;
  alignment: number;
  source: string;
  config_sha256: string;
  arch: string;
  options: { max_record: number; file_size: number; experts: ExpertsMode };
  source_shards: SourceShard[];
  files: { name: string; size: number }[];
  records: PackedRecord[];
  tensors: Record<string, PackedTensor>;
  experts_in_place: boolean;
  experts: PackedExperts | null;
  dropped: string[];
  total_bytes: number;
  tensor_count: number;
}

export interface PackOptions {
  model: string;
  out: string;
  maxRecord?: number;
  fileSize?: number;
  experts?: ExpertsMode;
  chunkBytes?: number;
  /** Called after every chunk copied (done and total bytes). Throwing aborts the pack. */
  onProgress?: (done: number, total: number) => void;
  /** Remove the temporary directory on SIGINT / SIGTERM (the CLI sets this). */
  handleSignals?: boolean;
}

export interface PackResult {
  out: string;
  /** True when OUT already held this pack and nothing was written. */
  skipped: boolean;
  manifest: PackManifest;
  /** Bytes copied (0 when skipped). */
  bytes: number;
  seconds: number;
}

const alignUp = (n: number, a = PACK_ALIGN) => Math.ceil(n / a) * a;

function sha256(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

function errCode(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? String(e);
}

// ---------------------------------------------------------------------------------------------
// Reading a packed directory

function readManifest(dir: string): PackManifest {
  const file = path.join(dir, MANIFEST_NAME);
  let m: PackManifest;
  try {
    m = JSON.parse(fs.readFileSync(file, 'utf8')) as PackManifest;
  } catch (e) {
    if (e instanceof SyntaxError) throw new UserError(`${file}: not valid JSON`);
    throw new ReadError(`${file}: cannot read (${errCode(e)})`);
  }
  if (!m || typeof m !== 'object' || m.format !== PACK_FORMAT) throw new UserError(`${file}: not a kimi-k3-ts pack manifest`);
  if (m.version !== PACK_VERSION) throw new UserError(`${file}: pack version ${m.version} is not supported (this build reads version ${PACK_VERSION}); repack with k3 pack`);
  if (!Array.isArray(m.files) || !Array.isArray(m.records) || typeof m.tensors !== 'object' || m.tensors === null) {
    throw new UserError(`${file}: manifest lacks files / records / tensors`);
  }
  return m;
}

function checkTensorShape(where: string, name: string, dtype: unknown, shape: unknown, nbytes: unknown): asserts dtype is DType {
  if (typeof dtype !== 'string' || !isDType(dtype)) throw new UserError(`${where}: tensor ${name}: unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new UserError(`${where}: tensor ${name}: bad shape ${JSON.stringify(shape)}`);
  const want = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
  if (nbytes !== want) throw new UserError(`${where}: tensor ${name}: ${String(nbytes)} bytes != shape ${JSON.stringify(shape)} x ${dtype} (${want})`);
}

/** Where the in-place experts' shards are: relative to OUT first (moved together), then the absolute source. */
function expertSourceDir(dir: string, m: PackManifest, ex: PackedExperts): string {
  const candidates = [ex.dir !== null ? path.resolve(dir, ex.dir) : null, ex.source_dir].filter((c): c is string => c !== null);
  for (const c of candidates) if (ex.files.every((f) => fs.existsSync(path.join(c, f)))) return c;
  throw new UserError(`${path.join(dir, MANIFEST_NAME)}: the experts stay in the source checkpoint ${m.source}, which is missing (looked in ${[...new Set(candidates)].join(', ')})`);
}

/** The name -> entry map of a packed directory: trunk tensors in the packed files, experts in the packed files or the source shards. */
export function readPackedDir(dir: string): Map<string, TensorEntry> {
  const m = readManifest(dir);
  const where = path.join(dir, MANIFEST_NAME);
  const fileIndex = new Map(m.files.map((f, i) => [f.name, i]));
  const files = m.files.map((f) => {
    if (typeof f.name !== 'string' || f.name.includes('/') || f.name.includes('\\')) throw new UserError(`${where}: bad data file name ${JSON.stringify(f.name)}`);
    const p = path.join(dir, f.name);
    let size: number;
    try {
      size = fs.statSync(p).size;
    } catch (e) {
      throw new UserError(`${where}: data file ${f.name} is missing (${errCode(e)})`);
    }
    if (size !== f.size) throw new UserError(`${p}: ${size} bytes, the manifest says ${f.size} (truncated or replaced; k3 pack --verify ${dir})`);
    return p;
  });
  const recFile = m.records.map((r) => {
    const fi = fileIndex.get(r.file);
    if (fi === undefined || !(r.offset >= 0) || r.offset + r.length > m.files[fi]!.size) throw new UserError(`${where}: record ${r.name} lies outside its data file`);
    return files[fi]!;
  });
  const map = new Map<string, TensorEntry>();
  for (const [name, t] of Object.entries(m.tensors)) {
    checkTensorShape(where, name, t.dtype, t.shape, t.nbytes);
    const r = m.records[t.record];
    if (!r || t.offset_in_record < 0 || t.offset_in_record + t.nbytes > r.length) throw new UserError(`${where}: tensor ${name} lies outside its record`);
    map.set(name, { name, file: recFile[t.record]!, dtype: t.dtype, shape: t.shape, offset: r.offset + t.offset_in_record, nbytes: t.nbytes });
  }
  const ex = m.experts;
  if (ex) {
    let exFiles: string[];
    let sizes: number[];
    if (ex.in_place) {
      const src = expertSourceDir(dir, m, ex);
      exFiles = ex.files.map((f) => path.join(src, f));
      sizes = ex.files.map((f, i) => {
        const size = fs.statSync(exFiles[i]!).size;
        const rec = m.source_shards.find((s) => s.file === f);
        if (rec && rec.size !== size) throw new UserError(`${exFiles[i]}: ${size} bytes, but ${rec.size} when packed: the source checkpoint changed; repack`);
        return size;
      });
    } else {
      exFiles = ex.files.map((f) => path.join(dir, f));
      sizes = ex.files.map((f) => m.files.find((x) => x.name === f)?.size ?? -1);
      if (sizes.some((s) => s < 0)) throw new UserError(`${where}: an experts file is not listed in files`);
    }
    for (const t of ex.template) {
      checkTensorShape(where, `experts.*.${t.suffix}`, t.dtype, t.shape, t.nbytes);
      if (t.offset < 0 || t.offset + t.nbytes > ex.expert_bytes) throw new UserError(`${where}: expert tensor ${t.suffix} lies outside the expert`);
    }
    for (const [prefix, [fi, off]] of Object.entries(ex.at)) {
      const file = exFiles[fi];
      if (file === undefined || off + ex.expert_bytes > sizes[fi]!) throw new UserError(`${where}: expert ${prefix} lies outside its file`);
      for (const t of ex.template) {
        const name = prefix + t.suffix;
        map.set(name, { name, file, dtype: t.dtype, shape: t.shape, offset: off + t.offset, nbytes: t.nbytes });
      }
    }
  }
  return map;
}

// ---------------------------------------------------------------------------------------------
// Streaming copy / hash with bounded memory

interface Chunk {
  src: string;
  srcOff: number;
  /** Destination file index and offset; -1 for hash only. */
  dstFile: number;
  dstOff: number;
  len: number;
  /** Zeros to hash before these bytes (alignment padding inside a record). */
  zerosBefore: number;
  hash: Hash;
  /** Set on the last chunk of a record: called with the record's digest. */
  done?: (hex: string) => void;
}

class Files {
  private readonly fds = new Map<string, number>();
  constructor(private readonly flags: string) {}
  fd(file: string): number {
    let fd = this.fds.get(file);
    if (fd === undefined) {
      try {
        fd = fs.openSync(file, this.flags);
      } catch (e) {
        throw new ReadError(`${file}: cannot open (${errCode(e)})`);
      }
      this.fds.set(file, fd);
    }
    return fd;
  }
  close(sync = false): void {
    for (const [file, fd] of this.fds) {
      try {
        if (sync) fs.fsyncSync(fd);
      } catch (e) {
        throw new ReadError(`${file}: fsync failed (${errCode(e)})`);
      } finally {
        fs.closeSync(fd);
      }
    }
    this.fds.clear();
  }
}

function readFull(fd: number, file: string, buf: Uint8Array, len: number, pos: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let done = 0;
    const step = () => {
      fs.read(fd, buf, done, len - done, pos + done, (err, n) => {
        if (err) return reject(new ReadError(`${file}: read of ${len - done} bytes at offset ${pos + done} failed (${err.code ?? err.message})`));
        if (n === 0) return reject(new ReadError(`${file}: short read at offset ${pos + done}: got ${done} of ${len} bytes (file truncated?)`));
        done += n;
        if (done < len) step();
        else resolve();
      });
    };
    if (len === 0) resolve();
    else step();
  });
}

function writeFull(fd: number, file: string, buf: Uint8Array, len: number, pos: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let done = 0;
    const step = () => {
      fs.write(fd, buf, done, len - done, pos + done, (err, n) => {
        if (err) return reject(new ReadError(`${file}: write of ${len - done} bytes at offset ${pos + done} failed (${err.code ?? err.message})`));
        done += n;
        if (done < len) step();
        else resolve();
      });
    };
    if (len === 0) resolve();
    else step();
  });
}

const ZEROS = new Uint8Array(PACK_ALIGN);

function hashZeros(h: Hash, n: number): void {
  while (n > 0) {
    const k = Math.min(n, ZEROS.length);
    h.update(ZEROS.subarray(0, k));
    n -= k;
  }
}

/**
 * Read every chunk, hash it, and write it (when it has a destination). Three buffers: the read of
 * chunk i+1 and the write of chunk i-1 run while chunk i is hashed.
 */
async function streamChunks(chunks: Chunk[], chunkBytes: number, dstPaths: string[], onBytes: (n: number) => void): Promise<void> {
  if (chunks.length === 0) return;
  const src = new Files('r');
  const dst = new Files('r+');
  const maxLen = Math.max(...chunks.map((c) => c.len));
  const bufs = [0, 1, 2].map(() => Buffer.allocUnsafe(Math.min(chunkBytes, Math.max(1, maxLen))));
  const writes: (Promise<void> | null)[] = [null, null, null];
  const startRead = (i: number) => {
    const c = chunks[i]!;
    return readFull(src.fd(c.src), c.src, bufs[i % 3]!, c.len, c.srcOff);
  };
  let ok = false;
  let reading: Promise<void> | null = null;
  try {
    reading = startRead(0);
    for (let i = 0; i < chunks.length; i++) {
      await reading;
      const c = chunks[i]!;
      if (i + 1 < chunks.length) {
        const w = writes[(i + 1) % 3];
        if (w) await w;
        writes[(i + 1) % 3] = null;
        reading = startRead(i + 1);
        reading.catch(() => {}); // surfaced when awaited
      }
      const buf = bufs[i % 3]!;
      hashZeros(c.hash, c.zerosBefore);
      c.hash.update(buf.subarray(0, c.len));
      if (c.done) c.done(c.hash.digest('hex'));
      if (c.dstFile >= 0) {
        const p = dstPaths[c.dstFile]!;
        const w = writeFull(dst.fd(p), p, buf, c.len, c.dstOff);
        w.catch(() => {});
        writes[i % 3] = w;
      }
      onBytes(c.zerosBefore + c.len);
    }
    for (const w of writes) if (w) await w;
    ok = true;
  } finally {
    // Settle any read or write still in flight before closing its file.
    await Promise.allSettled([reading, ...writes].filter((w): w is Promise<void> => w !== null));
    src.close();
    dst.close(ok);
  }
}

/** Split a copy of [srcOff, srcOff+len) to dstOff into chunks of at most chunkBytes. */
function pushChunks(out: Chunk[], src: string, srcOff: number, dstFile: number, dstOff: number, len: number, zerosBefore: number, hash: Hash, chunkBytes: number): void {
  let first = true;
  for (let o = 0; o < len || (first && len === 0); o += chunkBytes) {
    out.push({ src, srcOff: srcOff + o, dstFile, dstOff: dstOff + o, len: Math.min(chunkBytes, len - o), zerosBefore: first ? zerosBefore : 0, hash });
    first = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Planning a pack

interface PlannedTensor {
  entry: TensorEntry;
  offsetInRecord: number;
}

interface PlannedRecord {
  rec: PackedRecord;
  tensors: PlannedTensor[];
  /** Index of its data file in the manifest's `files`. */
  fileIndex: number;
  /** Data file series this record goes to. */
  series: 'trunk' | 'experts';
}

interface ExpertGroup {
  prefix: string;
  tensors: TensorEntry[]; // gate, up, down x suffix order
}

/** Split one group of tensors into records of at most maxRecord bytes, at tensor boundaries. */
function splitGroup(name: string, kind: RecordKind, tensors: TensorEntry[], maxRecord: number, align: number): PlannedRecord[] {
  const parts: PlannedTensor[][] = [];
  let cur: PlannedTensor[] = [];
  let len = 0;
  for (const e of tensors) {
    const at = alignUp(len, align);
    if (cur.length > 0 && at + e.nbytes > maxRecord) {
      parts.push(cur);
      cur = [];
      len = 0;
    }
    const off = alignUp(len, align);
    cur.push({ entry: e, offsetInRecord: off });
    len = off + e.nbytes;
  }
  if (cur.length > 0) parts.push(cur);
  return parts.map((ts, i) => {
    const last = ts[ts.length - 1]!;
    return {
      rec: { name: parts.length > 1 ? `${name}.part${i}` : name, kind, file: '', offset: -1, length: last.offsetInRecord + last.entry.nbytes, sha256: '' },
      tensors: ts,
      fileIndex: -1,
      series: kind === 'expert' ? 'experts' : 'trunk',
    };
  });
}

function linearTensors(entries: Map<string, TensorEntry>, base: string): TensorEntry[] {
  return LINEAR_SUFFIXES.map((s) => entries.get(base + s)).filter((e): e is TensorEntry => e !== undefined);
}

function expertPrefix(cfg: ModelConfig, l: number, e: number): string {
  const b = expertNames(cfg, l, e)[0];
  return b.slice(0, b.lastIndexOf('.') + 1);
}

function sameTemplate(a: ExpertTemplateItem[], b: ExpertTemplateItem[]): boolean {
  return a.length === b.length && a.every((x, i) => {
    const y = b[i]!;
    return x.suffix === y.suffix && x.dtype === y.dtype && x.offset === y.offset && x.nbytes === y.nbytes && JSON.stringify(x.shape) === JSON.stringify(y.shape);
  });
}

interface Plan {
  records: PlannedRecord[];
  expertGroups: ExpertGroup[];
  inPlace: boolean;
  template: ExpertTemplateItem[];
  inPlaceAt: Map<string, { file: string; offset: number }>;
  dropped: string[];
}

function planPack(cfg: ModelConfig, entries: Map<string, TensorEntry>, maxRecord: number, mode: ExpertsMode): Plan {
  const layout = buildLayout(cfg, entries); // validates every tensor the engine uses
  const assigned = new Set<string>();
  const take = (es: TensorEntry[]) => {
    for (const e of es) assigned.add(e.name);
    return es;
  };
  const records: PlannedRecord[] = [];
  const embedBase = `${modelPrefix(cfg)}embed_tokens`;
  const embed = take(linearTensors(entries, embedBase));
  records.push(...splitGroup('embed', 'embed', embed, maxRecord, PACK_ALIGN));

  const byOffset = (a: TensorEntry, b: TensorEntry) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.offset - b.offset);
  const order = trunkOrder(cfg);
  const smalls = [...layout.smalls.values()].sort(byOffset);
  for (let l = 0; l < cfg.numLayers; l++) {
    const ts: TensorEntry[] = [];
    for (const m of order) if (m.layer === l) ts.push(...take(linearTensors(entries, m.base)));
    const lp = layerPrefix(cfg, l);
    ts.push(...take(smalls.filter((e) => e.name.startsWith(lp) && !assigned.has(e.name))));
    records.push(...splitGroup(`layer.${l}`, 'layer', ts, maxRecord, PACK_ALIGN));
  }
  const head = take(linearTensors(entries, lmHeadName(cfg)));
  head.push(...take(smalls.filter((e) => !assigned.has(e.name))));
  records.push(...splitGroup('head', 'head', head, maxRecord, PACK_ALIGN));

  // Experts: one group per (layer, expert), tensors in gate, up, down order.
  const expertGroups: ExpertGroup[] = [];
  cfg.layers.forEach((L, l) => {
    if (L.ffn !== 'moe') return;
    for (let e = 0; e < cfg.moe.experts; e++) {
      const ts = take(expertNames(cfg, l, e).flatMap((b) => linearTensors(entries, b)));
      if (ts.length > 0) expertGroups.push({ prefix: expertPrefix(cfg, l, e), tensors: ts });
    }
  });

  // In place: each expert one contiguous run in one shard, with the same relative layout for all.
  let inPlace = mode !== 'pack' && expertGroups.length > 0;
  let template: ExpertTemplateItem[] = [];
  const inPlaceAt = new Map<string, { file: string; offset: number }>();
  let why = '';
  for (const g of expertGroups) {
    if (!inPlace) break;
    const s = [...g.tensors].sort(byOffset);
    const base = s[0]!.offset;
    let ok = s.every((t, i) => t.file === s[0]!.file && (i === 0 || t.offset === s[i - 1]!.offset + s[i - 1]!.nbytes));
    if (!ok) why = `expert ${g.prefix} is not one contiguous run in its shard`;
    const tpl = s.map((t) => ({ suffix: t.name.slice(g.prefix.length), dtype: t.dtype, shape: t.shape, offset: t.offset - base, nbytes: t.nbytes }));
    if (ok && template.length > 0 && !sameTemplate(template, tpl)) {
      ok = false;
      why = `expert ${g.prefix} is laid out differently from ${expertGroups[0]!.prefix}`;
    }
    if (!ok) {
      inPlace = false;
      break;
    }
    if (template.length === 0) template = tpl;
    inPlaceAt.set(g.prefix, { file: s[0]!.file, offset: base });
  }
  if (mode === 'in-place' && !inPlace && expertGroups.length > 0) throw new UserError(`pack: --experts in-place: ${why}`);
  if (!inPlace) {
    inPlaceAt.clear();
    template = [];
    for (const g of expertGroups) {
      let off = 0;
      const tpl = g.tensors.map((t) => {
        const item = { suffix: t.name.slice(g.prefix.length), dtype: t.dtype, shape: t.shape, offset: off, nbytes: t.nbytes };
        off += t.nbytes;
        return item;
      });
      if (template.length === 0) template = tpl;
      else if (!sameTemplate(template, tpl)) throw new UserError(`pack: expert ${g.prefix} has other tensors than ${expertGroups[0]!.prefix}`);
      const m = /layers\.(\d+)\..*experts\.(\d+)\.$/.exec(g.prefix);
      const name = m ? `expert.${m[1]}.${m[2]}` : `expert.${g.prefix}`;
      // Back to back inside the record (alignment 1): one read fetches the expert.
      records.push(...splitGroup(name, 'expert', g.tensors, Number.MAX_SAFE_INTEGER, 1));
    }
  }
  const dropped = [...entries.keys()].filter((n) => !assigned.has(n)).sort();
  return { records, expertGroups, inPlace, template, inPlaceAt, dropped };
}

/** Assign records to data files of one series, rolling over at fileSize. */
function placeRecords(recs: PlannedRecord[], series: 'trunk' | 'experts', fileSize: number, files: { name: string; size: number }[]): void {
  let fi = -1;
  let pos = 0;
  let n = 0;
  for (const r of recs) {
    if (fi < 0 || (pos > 0 && pos + r.rec.length > fileSize)) {
      n++;
      files.push({ name: `${series}-${String(n).padStart(5, '0')}.bin`, size: 0 });
      fi = files.length - 1;
      pos = 0;
    }
    r.fileIndex = fi;
    r.rec.file = files[fi]!.name;
    r.rec.offset = pos;
    pos = alignUp(pos + r.rec.length);
    files[fi]!.size = pos; // files end 4 KiB-aligned
  }
}

function shardIdentity(files: string[]): SourceShard[] {
  return files.map((f) => {
    const fd = fs.openSync(f, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const lb = Buffer.alloc(8);
      fs.readSync(fd, lb, 0, 8, 0);
      const n = Math.min(Number(lb.readBigUInt64LE(0)), size - 8);
      const hb = Buffer.alloc(n);
      fs.readSync(fd, hb, 0, n, 8);
      return { file: path.basename(f), size, header_sha256: sha256(hb) };
    } finally {
      fs.closeSync(fd);
    }
  });
}

/** JSON with one line per top-level field, per record, per tensor and per expert (readable, and small for 82k experts). */
export function manifestJson(m: PackManifest): string {
  const fmt = (v: unknown, depth: number, indent: string): string => {
    const compact = JSON.stringify(v);
    if (v === null || typeof v !== 'object' || (depth >= 2 && compact.length <= 1000) || depth >= 3) return compact;
    const inner = indent + ' ';
    if (Array.isArray(v)) return v.length === 0 ? '[]' : `[\n${v.map((x) => inner + fmt(x, depth + 1, inner)).join(',\n')}\n${indent}]`;
    const ks = Object.keys(v);
    return ks.length === 0 ? '{}' : `{\n${ks.map((k) => `${inner}${JSON.stringify(k)}: ${fmt((v as Record<string, unknown>)[k], depth + 1, inner)}`).join(',\n')}\n${indent}}`;
  };
  return fmt(m, 0, '') + '\n';
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Remove `<out>.tmp-<pid>` directories left by packs whose process is gone. */
function removeStaleTmp(outAbs: string): void {
  const parent = path.dirname(outAbs);
  const base = path.basename(outAbs);
  let names: string[] = [];
  try {
    names = fs.readdirSync(parent);
  } catch {
    return;
  }
  for (const n of names) {
    const m = /^(.*)\.tmp-(\d+)$/.exec(n);
    if (!m || m[1] !== base) continue;
    const pid = Number(m[2]);
    if (pid === process.pid) continue;
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch (e) {
      alive = errCode(e) !== 'ESRCH';
    }
    if (!alive) fs.rmSync(path.join(parent, n), { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Writing a pack

export async function packCheckpoint(opts: PackOptions): Promise<PackResult> {
  const t0 = performance.now();
  const modelAbs = path.resolve(opts.model);
  const outAbs = path.resolve(opts.out);
  const maxRecord = opts.maxRecord ?? DEFAULT_MAX_RECORD;
  const fileSize = opts.fileSize ?? DEFAULT_FILE_SIZE;
  const mode = opts.experts ?? 'auto';
  const chunkBytes = Math.max(PACK_ALIGN, opts.chunkBytes ?? DEFAULT_CHUNK);
  if (!Number.isSafeInteger(maxRecord) || maxRecord < 1) throw new UserError('pack: --max-record must be a positive size');
  if (!Number.isSafeInteger(fileSize) || fileSize < 1) throw new UserError('pack: --file-size must be a positive size');
  if (!['auto', 'in-place', 'pack'].includes(mode)) throw new UserError(`pack: --experts must be auto, in-place or pack, got ${JSON.stringify(mode)}`);
  if (!fs.existsSync(modelAbs) || !fs.statSync(modelAbs).isDirectory()) throw new UserError(`pack: model directory ${opts.model} does not exist`);
  if (fs.existsSync(path.join(modelAbs, MANIFEST_NAME))) throw new UserError(`pack: ${opts.model} is already a packed directory`);
  if (outAbs === modelAbs || outAbs.startsWith(modelAbs + path.sep)) throw new UserError(`pack: OUT must not be inside the model directory ${opts.model}`);

  const configPath = path.join(modelAbs, 'config.json');
  const cfg = loadConfig(modelAbs);
  const configBytes = fs.readFileSync(configPath);
  const configSha = sha256(configBytes);
  const entries = indexCheckpointDir(modelAbs);
  const shardFiles = [...new Set([...entries.values()].map((e) => e.file))].sort();
  const sourceShards = shardIdentity(shardFiles);
  const options = { max_record: maxRecord, file_size: fileSize, experts: mode };

  // An existing OUT: the same pack is a no-op; anything else is refused.
  if (fs.existsSync(outAbs)) {
    if (!fs.statSync(outAbs).isDirectory()) throw new UserError(`pack: ${opts.out} exists and is not a directory`);
    if (fs.existsSync(path.join(outAbs, MANIFEST_NAME))) {
      let m: PackManifest | null = null;
      try {
        m = readManifest(outAbs);
      } catch {
        m = null;
      }
      if (m && m.source === modelAbs && m.config_sha256 === configSha && sameJson(m.source_shards, sourceShards) && sameJson(m.options, options)) {
        readPackedDir(outAbs); // data files present with their sizes
        return { out: outAbs, skipped: true, manifest: m, bytes: 0, seconds: (performance.now() - t0) / 1000 };
      }
      const what = !m ? 'an unreadable pack manifest' : m.source !== modelAbs ? `a pack of ${m.source}` : m.config_sha256 !== configSha || !sameJson(m.source_shards, sourceShards) ? `a pack of an earlier version of ${m.source}` : `a pack made with other options (${JSON.stringify(m.options)})`;
      throw new UserError(`pack: ${opts.out} already holds ${what}; remove it or choose another OUT`);
    }
    if (fs.readdirSync(outAbs).length > 0) throw new UserError(`pack: ${opts.out} exists and is not a packed directory; choose another OUT`);
  }
  if (!fs.existsSync(path.dirname(outAbs))) throw new UserError(`pack: directory ${path.dirname(outAbs)} does not exist`);

  const plan = planPack(cfg, entries, maxRecord, mode);
  const files: { name: string; size: number }[] = [];
  const trunkRecs = plan.records.filter((r) => r.series === 'trunk');
  const expertRecs = plan.records.filter((r) => r.series === 'experts');
  placeRecords(trunkRecs, 'trunk', fileSize, files);
  placeRecords(expertRecs, 'experts', fileSize, files);
  const records = [...trunkRecs, ...expertRecs];

  const tmp = `${outAbs}.tmp-${process.pid}`;
  removeStaleTmp(outAbs);
  fs.rmSync(tmp, { recursive: true, force: true });
  const cleanup = () => fs.rmSync(tmp, { recursive: true, force: true });
  const onSignal = (sig: NodeJS.Signals) => {
    cleanup();
    process.stderr.write(`\nk3: pack interrupted (${sig}); nothing written\n`);
    process.exit(130);
  };
  if (opts.handleSignals) {
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  }
  let total = 0;
  try {
    fs.mkdirSync(tmp);
    fs.writeFileSync(path.join(tmp, 'config.json'), configBytes);
    for (const f of COPIED_FILES) if (fs.existsSync(path.join(modelAbs, f))) fs.copyFileSync(path.join(modelAbs, f), path.join(tmp, f));
    const dstPaths = files.map((f) => path.join(tmp, f.name));
    for (const f of files) {
      const fd = fs.openSync(path.join(tmp, f.name), 'w');
      try {
        fs.ftruncateSync(fd, f.size); // padding reads as zeros
      } finally {
        fs.closeSync(fd);
      }
    }

    // Chunks in record order; runs of tensors adjacent in both source and destination are merged.
    const chunks: Chunk[] = [];
    for (const r of records) {
      const hash = createHash('sha256');
      let cursor = 0; // bytes of the record hashed so far
      let run: { src: string; srcOff: number; dstRel: number; len: number; zeros: number } | null = null;
      const flush = () => {
        if (run) pushChunks(chunks, run.src, run.srcOff, r.fileIndex, r.rec.offset + run.dstRel, run.len, run.zeros, hash, chunkBytes);
        run = null;
      };
      for (const t of r.tensors) {
        const e = t.entry;
        if (run && run.src === e.file && run.srcOff + run.len === e.offset && run.dstRel + run.len === t.offsetInRecord && run.len + e.nbytes <= chunkBytes * 64) {
          run.len += e.nbytes;
        } else {
          flush();
          run = { src: e.file, srcOff: e.offset, dstRel: t.offsetInRecord, len: e.nbytes, zeros: t.offsetInRecord - cursor };
        }
        cursor = t.offsetInRecord + e.nbytes;
      }
      flush();
      const last = chunks[chunks.length - 1]!;
      last.done = (hex) => {
        r.rec.sha256 = hex;
      };
      total += r.rec.length;
    }
    let done = 0;
    opts.onProgress?.(0, total);
    await streamChunks(chunks, chunkBytes, dstPaths, (n) => {
      done += n;
      opts.onProgress?.(done, total);
    });

    const tensors: Record<string, PackedTensor> = {};
    records.forEach((r, ri) => {
      if (r.rec.kind === 'expert') return;
      for (const t of r.tensors) tensors[t.entry.name] = { dtype: t.entry.dtype, shape: t.entry.shape, record: ri, offset_in_record: t.offsetInRecord, nbytes: t.entry.nbytes };
    });
    let experts: PackedExperts | null = null;
    if (plan.expertGroups.length > 0) {
      if (plan.inPlace) {
        const exFiles = [...new Set([...plan.inPlaceAt.values()].map((a) => path.basename(a.file)))].sort();
        const at: Record<string, [number, number]> = {};
        for (const [prefix, a] of plan.inPlaceAt) at[prefix] = [exFiles.indexOf(path.basename(a.file)), a.offset];
        experts = { in_place: true, dir: path.relative(outAbs, modelAbs) || '.', source_dir: modelAbs, files: exFiles, expert_bytes: plan.template.reduce((s, t) => Math.max(s, t.offset + t.nbytes), 0), template: plan.template, at };
      } else {
        const exFiles = [...new Set(expertRecs.map((r) => r.fileIndex))].sort((a, b) => a - b);
        const at: Record<string, [number, number]> = {};
        expertRecs.forEach((r, i) => {
          at[plan.expertGroups[i]!.prefix] = [exFiles.indexOf(r.fileIndex), r.rec.offset];
        });
        experts = { in_place: false, dir: null, source_dir: null, files: exFiles.map((i) => files[i]!.name), expert_bytes: plan.template.reduce((s, t) => s + t.nbytes, 0), template: plan.template, at };
      }
    }
    const manifest: PackManifest = {
      format: PACK_FORMAT,
      version: PACK_VERSION,
      alignment: PACK_ALIGN,
      source: modelAbs,
      config_sha256: configSha,
      arch: cfg.arch,
      options,
      source_shards: sourceShards,
      files,
      records: records.map((r) => r.rec),
      tensors,
      experts_in_place: plan.inPlace,
      experts,
      dropped: plan.dropped,
      total_bytes: files.reduce((s, f) => s + f.size, 0),
      tensor_count: entries.size - plan.dropped.length,
    };
    fs.writeFileSync(path.join(tmp, MANIFEST_NAME), manifestJson(manifest));
    readPackedDir(tmp); // the manifest reads back
    if (fs.existsSync(outAbs)) fs.rmdirSync(outAbs); // an empty directory (checked above)
    fs.renameSync(tmp, outAbs);
    return { out: outAbs, skipped: false, manifest, bytes: total, seconds: (performance.now() - t0) / 1000 };
  } catch (e) {
    cleanup();
    throw e;
  } finally {
    if (opts.handleSignals) {
      process.removeListener('SIGINT', onSignal);
      process.removeListener('SIGTERM', onSignal);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Verifying a pack

export interface VerifyResult {
  dir: string;
  records: number;
  bytes: number;
  /** Records whose bytes no longer hash to the manifest's sha256. */
  mismatches: { record: string; file: string; offset: number; length: number; expected: string; actual: string }[];
  /** Other problems: missing / resized files, changed source shards of in-place experts. */
  problems: string[];
  seconds: number;
}

export async function verifyPack(dir: string, opts: { chunkBytes?: number; onProgress?: (done: number, total: number) => void } = {}): Promise<VerifyResult> {
  const t0 = performance.now();
  const m = readManifest(dir);
  const problems: string[] = [];
  const mismatches: VerifyResult['mismatches'] = [];
  const chunkBytes = Math.max(PACK_ALIGN, opts.chunkBytes ?? DEFAULT_CHUNK);
  const sizes = new Map<string, number>();
  for (const f of m.files) {
    try {
      const s = fs.statSync(path.join(dir, f.name)).size;
      if (s !== f.size) problems.push(`${f.name}: ${s} bytes, the manifest says ${f.size}`);
      sizes.set(f.name, s);
    } catch (e) {
      problems.push(`${f.name}: missing (${errCode(e)})`);
    }
  }
  const chunks: Chunk[] = [];
  let total = 0;
  for (const r of m.records) {
    const size = sizes.get(r.file);
    if (size === undefined || size < r.offset + r.length) {
      if (size !== undefined) problems.push(`record ${r.name}: lies past the end of ${r.file}`);
      mismatches.push({ record: r.name, file: r.file, offset: r.offset, length: r.length, expected: r.sha256, actual: 'unreadable' });
      continue;
    }
    const hash = createHash('sha256');
    pushChunks(chunks, path.join(dir, r.file), r.offset, -1, 0, r.length, 0, hash, chunkBytes);
    chunks[chunks.length - 1]!.done = (hex) => {
      if (hex !== r.sha256) mismatches.push({ record: r.name, file: r.file, offset: r.offset, length: r.length, expected: r.sha256, actual: hex });
    };
    total += r.length;
  }
  if (m.experts?.in_place) {
    try {
      const src = expertSourceDir(dir, m, m.experts);
      const ids = shardIdentity(m.experts.files.map((f) => path.join(src, f)));
      for (const id of ids) {
        const rec = m.source_shards.find((s) => s.file === id.file);
        if (!rec || !sameJson(rec, id)) problems.push(`source shard ${path.join(src, id.file)} changed since packing (size or header); repack`);
      }
    } catch (e) {
      problems.push(e instanceof Error ? e.message : String(e));
    }
  }
  let done = 0;
  await streamChunks(chunks, chunkBytes, [], (n) => {
    done += n;
    opts.onProgress?.(done, total);
  });
  return { dir, records: m.records.length, bytes: total, mismatches, problems, seconds: (performance.now() - t0) / 1000 };
}

/** True when `dir` is a packed directory. */
export function isPackedDir(dir: string): boolean {
  return fs.existsSync(path.join(dir, MANIFEST_NAME));
}
