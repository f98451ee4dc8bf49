// `k3 pack`: re-lay a checkpoint out for streaming. The format, and its reader, are in
// src/checkpoint/packed.ts; verifying a pack is pack-verify.ts.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../checkpoint/config.js';
import { namesOf, trunkOrder } from '../checkpoint/names.js';
import {
  MANIFEST_NAME,
  PACK_ALIGN,
  PACK_FORMAT,
  PACK_VERSION,
  PACK_VERSION_CODED,
  manifestDigest,
  readManifest,
  readPackedDir,
  type ExpertTemplateItem,
  type ExpertsMode,
  type PackManifest,
  type PackedExperts,
  type PackedRecord,
  type PackedTensor,
  type RecordKind,
} from '../checkpoint/packed.js';
import { indexCheckpointDir } from '../checkpoint/dir.js';
import { type TensorEntry } from '../checkpoint/safetensors.js';
import { UserError } from '../util/errors.js';
import { buildLayout } from './layout.js';
import { codeTrunk, type CodedTensors } from './pack-code.js';
import { DEFAULT_CHUNK, pushChunks, sameJson, sha256, shardIdentity, streamChunks, type Chunk } from './pack-io.js';
import { removeStaleTmp } from '../util/stale-tmp.js';
import { knownRanges } from './checksums.js';
import { SourceCheck } from './source-check.js';

export { DEFAULT_CHUNK } from './pack-io.js';
export type { ExpertsMode, PackManifest } from '../checkpoint/packed.js';
export { verifyPack, type VerifyResult } from './pack-verify.js';

export const DEFAULT_MAX_RECORD = 512 * 2 ** 20;
export const DEFAULT_FILE_SIZE = 16 * 2 ** 30;
export const COPIED_FILES = ['tiktoken.model', 'tokenizer_config.json', 'chat_template.jinja', 'generation_config.json'];

const LINEAR_SUFFIXES = ['.weight', '.weight_packed', '.weight_scale', '.weight_scale_inv', '.weight_shape'];

export interface PackOptions {
  model: string;
  out: string;
  maxRecord?: number;
  fileSize?: number;
  experts?: ExpertsMode;
  chunkBytes?: number;
  /** Store the BF16 trunk matrices losslessly coded (kernels/bf16-code.ts; a version 2 pack). */
  compress?: boolean;
  /** Called after every chunk copied (done and total bytes). Throwing aborts the pack. */
  onProgress?: (done: number, total: number) => void;
  /**
   * Stops the pack between chunks: the temporary directory is removed and the abort's reason is
   * thrown (the CLI aborts on SIGINT / SIGTERM with an Interrupted error).
   */
  signal?: AbortSignal;
}

export interface PackResult {
  out: string;
  /** True when OUT already held this pack and nothing was written. */
  skipped: boolean;
  manifest: PackManifest;
  /** Bytes copied (0 when skipped). */
  bytes: number;
  seconds: number;
  /** With compress: raw and stored bytes of the coded matrices. */
  coded?: { rawBytes: number; storedBytes: number; tensors: number };
}

const alignUp = (n: number, a = PACK_ALIGN) => Math.ceil(n / a) * a;

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
  return namesOf(cfg).expertPrefix(l, e);
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

/** `layoutEntries`: the source's entries, for validation (`entries` may point coded tensors at their coded bytes). */
function planPack(cfg: ModelConfig, entries: Map<string, TensorEntry>, maxRecord: number, mode: ExpertsMode, layoutEntries = entries): Plan {
  const layout = buildLayout(cfg, layoutEntries); // validates every tensor the engine uses
  const assigned = new Set<string>();
  const take = (es: TensorEntry[]) => {
    for (const e of es) assigned.add(e.name);
    return es;
  };
  const records: PlannedRecord[] = [];
  const names = namesOf(cfg);
  const embedBase = names.embed;
  const embed = take(linearTensors(entries, embedBase));
  records.push(...splitGroup('embed', 'embed', embed, maxRecord, PACK_ALIGN));

  const byOffset = (a: TensorEntry, b: TensorEntry) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.offset - b.offset);
  const order = trunkOrder(cfg);
  const smalls = [...layout.smalls.values()].sort(byOffset);
  for (let l = 0; l < cfg.numLayers; l++) {
    const ts: TensorEntry[] = [];
    for (const m of order) if (m.layer === l) ts.push(...take(linearTensors(entries, m.base)));
    const lp = names.layer(l);
    ts.push(...take(smalls.filter((e) => e.name.startsWith(lp) && !assigned.has(e.name))));
    records.push(...splitGroup(`layer.${l}`, 'layer', ts, maxRecord, PACK_ALIGN));
  }
  const head = take(linearTensors(entries, names.lmHead));
  head.push(...take(smalls.filter((e) => !assigned.has(e.name))));
  records.push(...splitGroup('head', 'head', head, maxRecord, PACK_ALIGN));

  // Experts: one group per (layer, expert), tensors in gate, up, down order.
  const expertGroups: ExpertGroup[] = [];
  cfg.layers.forEach((L, l) => {
    if (L.ffn !== 'moe') return;
    for (let e = 0; e < cfg.moe.experts; e++) {
      const ts = take(names.expert(l, e).flatMap((b) => linearTensors(entries, b)));
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
  // A `k3 verify` sidecar of the source: what the pack reads is checked against it (refused, as by
  // k3 run, when stale or lacking a tensor).
  const sourceCheck = new SourceCheck(knownRanges(modelAbs, entries));
  const options: PackManifest['options'] = { max_record: maxRecord, file_size: fileSize, experts: mode, ...(opts.compress ? { compress: true as const } : {}) };

  // An existing OUT: the same pack is a no-op; anything else is refused.
  if (fs.existsSync(outAbs)) {
    if (!fs.statSync(outAbs).isDirectory()) throw new UserError(`pack: ${opts.out} exists and is not a directory`);
    if (fs.existsSync(path.join(outAbs, MANIFEST_NAME))) {
      let m: PackManifest | null;
      let why = '';
      try {
        m = readManifest(outAbs);
      } catch (e) {
        m = null;
        why = e instanceof Error ? e.message : String(e);
      }
      if (m && m.source === modelAbs && m.config_sha256 === configSha && sameJson(m.source_shards, sourceShards) && sameJson(m.options, options)) {
        readPackedDir(outAbs); // data files present with their sizes
        return { out: outAbs, skipped: true, manifest: m, bytes: 0, seconds: (performance.now() - t0) / 1000 };
      }
      const what = !m ? `a pack manifest this build refuses (${why})` : m.source !== modelAbs ? `a pack of ${m.source}` : m.config_sha256 !== configSha || !sameJson(m.source_shards, sourceShards) ? `a pack of an earlier version of ${m.source}` : `a pack made with other options (${JSON.stringify(m.options)})`;
      throw new UserError(`pack: ${opts.out} already holds ${what}; remove it or choose another OUT`);
    }
    if (fs.readdirSync(outAbs).length > 0) throw new UserError(`pack: ${opts.out} exists and is not a packed directory; choose another OUT`);
  }
  if (!fs.existsSync(path.dirname(outAbs))) throw new UserError(`pack: directory ${path.dirname(outAbs)} does not exist`);

  const tmp = `${outAbs}.tmp-${process.pid}`;
  removeStaleTmp(outAbs);
  fs.rmSync(tmp, { recursive: true, force: true });
  const cleanup = () => fs.rmSync(tmp, { recursive: true, force: true });
  const stopIfAborted = () => opts.signal?.throwIfAborted();
  let total = 0;
  try {
    fs.mkdirSync(tmp);
    // --compress: the coded matrices are written to tmp/.coded first, then copied like any tensor.
    const codedDir = path.join(tmp, '.coded');
    const coded: CodedTensors | null = opts.compress ? codeTrunk(cfg, entries, codedDir, stopIfAborted, sourceCheck.feed) : null;
    const plan = planPack(cfg, coded?.entries ?? entries, maxRecord, mode, entries);
    const files: { name: string; size: number }[] = [];
    const trunkRecs = plan.records.filter((r) => r.series === 'trunk');
    const expertRecs = plan.records.filter((r) => r.series === 'experts');
    placeRecords(trunkRecs, 'trunk', fileSize, files);
    placeRecords(expertRecs, 'experts', fileSize, files);
    const records = [...trunkRecs, ...expertRecs];
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
    // Experts left in place: each run's sha256, from the bytes read now (a later run checks each
    // expert's first read against it, and pack --verify all of them).
    const expertSha = new Map<string, string>();
    const hashChunks: Chunk[] = [];
    let hashed = 0;
    if (plan.inPlace) {
      const runBytes = plan.template.reduce((s, t) => Math.max(s, t.offset + t.nbytes), 0);
      for (const [prefix, a] of plan.inPlaceAt) {
        pushChunks(hashChunks, a.file, a.offset, -1, 0, runBytes, 0, createHash('sha256'), chunkBytes);
        hashChunks[hashChunks.length - 1]!.done = (hex) => void expertSha.set(prefix, hex);
        hashed += runBytes;
      }
    }
    let done = 0;
    opts.onProgress?.(0, total + hashed);
    const progress = (n: number) => {
      stopIfAborted();
      done += n;
      opts.onProgress?.(done, total + hashed);
    };
    await streamChunks(chunks, chunkBytes, dstPaths, progress, sourceCheck.feed);
    await streamChunks(hashChunks, chunkBytes, [], progress, sourceCheck.feed);
    await sourceCheck.finish();

    const tensors: Record<string, PackedTensor> = {};
    records.forEach((r, ri) => {
      if (r.rec.kind === 'expert') return;
      for (const t of r.tensors) {
        const encoding = coded?.encodings.get(t.entry.name);
        const nbytes = encoding ? entries.get(t.entry.name)!.nbytes : t.entry.nbytes;
        tensors[t.entry.name] = { dtype: t.entry.dtype, shape: t.entry.shape, record: ri, offset_in_record: t.offsetInRecord, nbytes, ...(encoding ? { encoding } : {}) };
      }
    });
    let experts: PackedExperts | null = null;
    if (plan.expertGroups.length > 0) {
      if (plan.inPlace) {
        const exFiles = [...new Set([...plan.inPlaceAt.values()].map((a) => path.basename(a.file)))].sort();
        const at: Record<string, [number, number]> = {};
        for (const [prefix, a] of plan.inPlaceAt) at[prefix] = [exFiles.indexOf(path.basename(a.file)), a.offset];
        const sha256 = Object.fromEntries([...plan.inPlaceAt.keys()].map((prefix) => [prefix, expertSha.get(prefix)!]));
        experts = { in_place: true, dir: path.relative(outAbs, modelAbs) || '.', source_dir: modelAbs, files: exFiles, expert_bytes: plan.template.reduce((s, t) => Math.max(s, t.offset + t.nbytes), 0), template: plan.template, at, sha256 };
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
      version: coded && coded.encodings.size > 0 ? PACK_VERSION_CODED : PACK_VERSION,
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
    manifest.manifest_sha256 = manifestDigest(manifest);
    stopIfAborted();
    fs.rmSync(codedDir, { recursive: true, force: true });
    fs.writeFileSync(path.join(tmp, MANIFEST_NAME), manifestJson(manifest));
    readPackedDir(tmp); // the manifest reads back
    if (fs.existsSync(outAbs)) fs.rmdirSync(outAbs); // an empty directory (checked above)
    fs.renameSync(tmp, outAbs);
    const codedStats = coded ? { rawBytes: coded.rawBytes, storedBytes: coded.storedBytes, tensors: coded.encodings.size } : undefined;
    return { out: outAbs, skipped: false, manifest, bytes: total, seconds: (performance.now() - t0) / 1000, coded: codedStats };
  } catch (e) {
    cleanup();
    throw e;
  }
}
