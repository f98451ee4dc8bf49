// A packed directory (written by `k3 pack`, src/store/pack.ts): its format, and its reader.
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
//     at: { "<expert prefix: Names.expertPrefix(layer, expert)>": [file index, offset of the run] },
//     sha256: { "<expert prefix>": "<hex of the run's expert_bytes>" }   (in place only: recorded
//             at pack time from the bytes read, which a source's k3 verify sidecar checks first;
//             checked on each expert's first read, and by --verify)
//   },
//   dropped: ["<tensor names left out>"], total_bytes, tensor_count,
//   manifest_sha256: "<hex of JSON.stringify of this object without manifest_sha256>"
// }
// The manifest's own digest is checked at open (a mismatch is exit 4, as for bad weight bytes),
// and every object may hold only the keys above: a renamed or unknown key is refused, so that no
// check is turned off by a key the reader does not see. A pack without manifest_sha256 (written
// before it existed) is refused: k3 pack again.
// A tensor's bytes are at files[record.file] offset record.offset + offset_in_record; an expert
// tensor's at experts.files[at[prefix][0]] offset at[prefix][1] + template.offset.
//
// Version 2 (written by `k3 pack --compress`; otherwise packs stay version 1): a BF16 trunk matrix
// may carry `encoding: { code: "bf16-exp-nibble", block_rows, stored_bytes, blocks }` and is then
// stored coded (src/formats/bf16-code.ts): blocks of block_rows rows, back to back from
// offset_in_record, `blocks` the base64 of each block's stored length (u32 little-endian);
// nbytes stays the raw size. Records and their sha256 cover the bytes as stored.
//
// `indexCheckpointDir` (dir.ts) calls `readPackedDir` when a directory holds packed.json,
// so every command that opens a model accepts a packed directory.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ReadError, UserError } from '../util/errors.js';
import { DTYPE_BYTES, isDType, type DType } from '../formats/dtypes.js';
import type { TensorEntry } from './safetensors.js';
import { CODE_NAME } from '../formats/bf16-code.js';

export const PACK_FORMAT = 'kimi-k3-ts packed';
export const PACK_VERSION = 1;
/** The version of a pack with coded tensors (`encoding`); older builds refuse it rather than misread it. */
export const PACK_VERSION_CODED = 2;
export const MANIFEST_NAME = 'packed.json';
export const PACK_ALIGN = 4096;

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
  encoding?: TensorEncoding;
}

export interface TensorEncoding {
  code: string;
  block_rows: number;
  stored_bytes: number;
  /** Base64 of each block's stored length, u32 little-endian. */
  blocks: string;
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
  /** In place: the sha256 of each expert's run, by prefix (as `at`). */
  sha256?: Record<string, string>;
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
  options: { max_record: number; file_size: number; experts: ExpertsMode; compress?: true };
  source_shards: SourceShard[];
  files: { name: string; size: number }[];
  records: PackedRecord[];
  tensors: Record<string, PackedTensor>;
  experts_in_place: boolean;
  experts: PackedExperts | null;
  dropped: string[];
  total_bytes: number;
  tensor_count: number;
  manifest_sha256?: string;
}

/** The digest packed.json carries of itself: sha256 of its JSON without manifest_sha256 (key order as written). */
export function manifestDigest(m: PackManifest): string {
  const rest: Partial<PackManifest> = { ...m };
  delete rest.manifest_sha256;
  return createHash('sha256').update(JSON.stringify(rest)).digest('hex');
}

export function errCode(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? String(e);
}

export function readManifest(dir: string): PackManifest {
  const file = path.join(dir, MANIFEST_NAME);
  let m: PackManifest;
  try {
    m = JSON.parse(fs.readFileSync(file, 'utf8')) as PackManifest;
  } catch (e) {
    if (e instanceof SyntaxError) throw new UserError(`${file}: not valid JSON`);
    throw new ReadError(`${file}: cannot read (${errCode(e)})`);
  }
  if (!m || typeof m !== 'object' || m.format !== PACK_FORMAT) throw new UserError(`${file}: not a kimi-k3-ts pack manifest`);
  if (m.version !== PACK_VERSION && m.version !== PACK_VERSION_CODED) throw new UserError(`${file}: pack version ${m.version} is not supported (this build reads versions ${PACK_VERSION} and ${PACK_VERSION_CODED}); repack with k3 pack`);
  if (!Array.isArray(m.files) || !Array.isArray(m.records) || typeof m.tensors !== 'object' || m.tensors === null) {
    throw new UserError(`${file}: manifest lacks files / records / tensors`);
  }
  checkKeys(file, m);
  checkManifestTypes(file, m);
  if (typeof m.manifest_sha256 !== 'string') throw new UserError(`${file}: no manifest_sha256 (a pack written before manifests carried their digest); k3 pack again`);
  if (manifestDigest(m) !== m.manifest_sha256) throw new ReadError(`${file}: the manifest fails its sha256 (manifest_sha256): edited or damaged; k3 pack again`, 4);
  return m;
}

/** The keys each object of a manifest may hold ('?' marks the optional ones). */
const KEYS = {
  top: ['format', 'version', 'alignment', 'source', 'config_sha256', 'arch', 'options', 'source_shards', 'files', 'records', 'tensors', 'experts_in_place', 'experts', 'dropped', 'total_bytes', 'tensor_count', 'manifest_sha256?'],
  options: ['max_record', 'file_size', 'experts', 'compress?'],
  source_shards: ['file', 'size', 'header_sha256'],
  files: ['name', 'size'],
  records: ['name', 'kind', 'file', 'offset', 'length', 'sha256'],
  tensors: ['dtype', 'shape', 'record', 'offset_in_record', 'nbytes', 'encoding?'],
  encoding: ['code', 'block_rows', 'stored_bytes', 'blocks'],
  experts: ['in_place', 'dir', 'source_dir', 'files', 'expert_bytes', 'template', 'at', 'sha256?'],
  template: ['suffix', 'dtype', 'shape', 'offset', 'nbytes'],
};

/** Every object holds its required keys and no other (a renamed key must not silently skip a check). */
function checkKeys(file: string, m: PackManifest): void {
  const check = (where: string, o: unknown, keys: string[]): void => {
    if (!isObj(o)) return; // the type checks name it
    const all = new Set(keys.map((k) => k.replace('?', '')));
    for (const k of Object.keys(o)) if (!all.has(k)) throw new UserError(`${file}: unknown key ${JSON.stringify(k)} in ${where} (damaged or edited manifest; k3 pack again)`);
    for (const k of keys) if (!k.endsWith('?') && !(k in o)) throw new UserError(`${file}: ${where} lacks key ${JSON.stringify(k)} (damaged or edited manifest; k3 pack again)`);
  };
  check('the manifest', m, KEYS.top);
  check('options', m.options, KEYS.options);
  const each = (name: 'source_shards' | 'files' | 'records', list: unknown) => Array.isArray(list) && list.forEach((x, i) => check(`${name}[${i}]`, x, KEYS[name]));
  each('source_shards', m.source_shards);
  each('files', m.files);
  each('records', m.records);
  for (const [name, t] of Object.entries(m.tensors)) {
    check(`tensor ${name}`, t, KEYS.tensors);
    if (isObj(t) && t.encoding !== undefined) check(`tensor ${name}'s encoding`, t.encoding, KEYS.encoding);
  }
  const ex = m.experts as unknown;
  if (isObj(ex)) {
    check('experts', ex, KEYS.experts);
    if (Array.isArray(ex.template)) ex.template.forEach((t, i) => check(`experts.template[${i}]`, t, KEYS.template));
  }
}

const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
const isName = (x: unknown): x is string => typeof x === 'string' && x.length > 0 && !x.includes('/') && !x.includes('\\');
const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/** Every field the reader uses has its type and range (a hand-edited or damaged manifest stops here). Extra fields are allowed. */
function checkManifestTypes(file: string, m: PackManifest): void {
  const bad = (what: string): never => {
    throw new UserError(`${file}: ${what} (damaged or edited manifest; k3 pack again)`);
  };
  m.files.forEach((f, i) => (isObj(f) && isName(f.name) && isCount(f.size)) || bad(`files[${i}] is not {name, size}`));
  m.records.forEach((r, i) => {
    if (!isObj(r) || typeof r.name !== 'string' || !isName(r.file) || !isCount(r.offset) || !isCount(r.length) || typeof r.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(r.sha256)) {
      bad(`records[${i}] is not {name, kind, file, offset, length, sha256}`);
    }
  });
  for (const [name, t] of Object.entries(m.tensors)) {
    if (!isObj(t) || !isCount(t.record) || !isCount(t.offset_in_record) || !isCount(t.nbytes)) bad(`tensor ${name} is not {dtype, shape, record, offset_in_record, nbytes}`);
  }
  // Inside a record every tensor starts aligned and none overlaps another: an edited offset that
  // points at other bytes of the same record (whose checksum would still match) is refused.
  const byRecord = new Map<number, [string, PackedTensor][]>();
  for (const [name, t] of Object.entries(m.tensors)) {
    if (t.offset_in_record % PACK_ALIGN !== 0) bad(`tensor ${name} is not ${PACK_ALIGN}-aligned in its record`);
    let list = byRecord.get(t.record);
    if (!list) byRecord.set(t.record, (list = []));
    list.push([name, t]);
  }
  // A coded tensor (pack --compress) occupies its stored bytes, not its decoded size.
  const stored = (t: PackedTensor) => (isObj(t.encoding) && isCount(t.encoding.stored_bytes) ? t.encoding.stored_bytes : t.nbytes);
  for (const list of byRecord.values()) {
    list.sort((x, y) => x[1].offset_in_record - y[1].offset_in_record);
    for (let i = 1; i < list.length; i++) {
      if (list[i]![1].offset_in_record < list[i - 1]![1].offset_in_record + stored(list[i - 1]![1])) bad(`tensors ${list[i - 1]![0]} and ${list[i]![0]} overlap`);
    }
  }
  if (!Array.isArray(m.source_shards) || !m.source_shards.every((x) => isObj(x) && typeof x.file === 'string' && isCount(x.size))) bad('source_shards is not a list of {file, size, header_sha256}');
  const ex = m.experts as unknown;
  if (ex === null || ex === undefined) return;
  if (!isObj(ex)) return bad('experts is not an object or null');
  const e = ex as unknown as PackedExperts;
  const okDir = (d: unknown) => d === null || typeof d === 'string';
  if (typeof e.in_place !== 'boolean' || !okDir(e.dir) || !okDir(e.source_dir) || !Array.isArray(e.files) || !e.files.every(isName) || !isCount(e.expert_bytes) || !Array.isArray(e.template) || !isObj(e.at)) {
    bad('experts is not {in_place, dir, source_dir, files, expert_bytes, template, at}');
  }
  e.template.forEach((t, i) => (isObj(t) && typeof t.suffix === 'string' && isCount(t.offset) && isCount(t.nbytes)) || bad(`experts.template[${i}] is not {suffix, dtype, shape, offset, nbytes}`));
  for (const [prefix, at] of Object.entries(e.at)) {
    if (!Array.isArray(at) || at.length !== 2 || !isCount(at[0]) || !isCount(at[1])) bad(`experts.at[${JSON.stringify(prefix)}] is not [file index, offset]`);
  }
  // Experts left in the source are covered by a digest each (the pack's records cover packed ones).
  if (e.in_place) {
    if (!isObj(e.sha256)) bad('experts.sha256 is missing: the in-place experts have no digests');
    const sha = e.sha256 as Record<string, unknown>;
    for (const prefix of Object.keys(e.at)) if (typeof sha[prefix] !== 'string' || !/^[0-9a-f]{64}$/.test(sha[prefix])) bad(`experts.sha256 has no digest of expert ${prefix}`);
    if (Object.keys(sha).length !== Object.keys(e.at).length) bad('experts.sha256 names experts that experts.at does not');
  } else if (e.sha256 !== undefined) bad('experts.sha256 is only for experts left in place');
  for (const f of e.in_place ? e.files : []) if (!m.source_shards.some((s) => s.file === f)) bad(`source_shards does not list ${f}, which holds experts`);
}

function checkTensorShape(where: string, name: string, dtype: unknown, shape: unknown, nbytes: unknown): asserts dtype is DType {
  if (typeof dtype !== 'string' || !isDType(dtype)) throw new UserError(`${where}: tensor ${name}: unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new UserError(`${where}: tensor ${name}: bad shape ${JSON.stringify(shape)}`);
  const want = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
  if (nbytes !== want) throw new UserError(`${where}: tensor ${name}: ${String(nbytes)} bytes != shape ${JSON.stringify(shape)} x ${dtype} (${want})`);
}

/** A coded tensor's block table, checked: every block no bigger stored than raw, the lengths adding up. */
function checkEncoding(where: string, name: string, t: PackedTensor): NonNullable<TensorEntry['coded']> {
  const enc = t.encoding!;
  const bad = (what: string): never => {
    throw new UserError(`${where}: tensor ${name}: ${what}`);
  };
  if (enc === null || typeof enc !== 'object' || enc.code !== CODE_NAME) bad(`unknown encoding ${JSON.stringify(enc)}`);
  if (t.dtype !== 'BF16' || t.shape.length !== 2) bad('only 2-D BF16 tensors can be coded');
  const [rows, cols] = t.shape as [number, number];
  if (!Number.isSafeInteger(enc.block_rows) || enc.block_rows < 1) bad(`bad block_rows ${JSON.stringify(enc.block_rows)}`);
  const raw = typeof enc.blocks === 'string' ? Buffer.from(enc.blocks, 'base64') : Buffer.alloc(1);
  const nBlocks = Math.ceil(rows / enc.block_rows);
  if (raw.byteLength !== 4 * nBlocks) bad(`block table holds ${Math.floor(raw.byteLength / 4)} blocks, ${rows} rows in blocks of ${enc.block_rows} make ${nBlocks}`);
  const stored: number[] = [];
  let sum = 0;
  for (let b = 0; b < nBlocks; b++) {
    const s = raw.readUInt32LE(4 * b);
    const rawBytes = 2 * cols * (Math.min(rows, (b + 1) * enc.block_rows) - b * enc.block_rows);
    if (s > rawBytes) bad(`block ${b} is stored in ${s} bytes, more than its ${rawBytes} raw bytes`);
    stored.push(s);
    sum += s;
  }
  if (sum !== enc.stored_bytes) bad(`blocks add up to ${sum} bytes, stored_bytes says ${enc.stored_bytes}`);
  return { blockRows: enc.block_rows, stored, storedBytes: sum };
}

/** Where the in-place experts' shards are: relative to OUT first (moved together), then the absolute source. */
export function expertSourceDir(dir: string, m: PackManifest, ex: PackedExperts): string {
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
    const coded = t.encoding !== undefined ? checkEncoding(where, name, t) : undefined;
    if (!r || t.offset_in_record < 0 || t.offset_in_record + (coded?.storedBytes ?? t.nbytes) > r.length) throw new UserError(`${where}: tensor ${name} lies outside its record`);
    map.set(name, { name, file: recFile[t.record]!, dtype: t.dtype, shape: t.shape, offset: r.offset + t.offset_in_record, nbytes: t.nbytes, ...(coded ? { coded } : {}) });
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
        const rec = m.source_shards.find((s) => s.file === f)!; // listed (checkManifestTypes)
        if (rec.size !== size) throw new UserError(`${exFiles[i]}: ${size} bytes, but ${rec.size} when packed: the source checkpoint changed; repack`);
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

/** True when `dir` is a packed directory. */
export function isPackedDir(dir: string): boolean {
  return fs.existsSync(path.join(dir, MANIFEST_NAME));
}
