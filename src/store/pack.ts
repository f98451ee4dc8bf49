// `k3 pack`: re-lay a checkpoint out for streaming. The format, and its reader, are in
// src/checkpoint/packed.ts; verifying a pack is pack-verify.ts.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig, type ModelConfig } from '../checkpoint/config.js';
import {
  MANIFEST_NAME,
  PACK_ALIGN,
  PACK_FORMAT,
  PACK_VERSION,
  PACK_VERSION_CODED,
  manifestDigest,
  readManifest,
  readPackedDir,
  type ExpertsMode,
  type PackManifest,
  type PackedExperts,
  type PackedTensor,
} from '../checkpoint/packed.js';
import { indexCheckpointDir } from '../checkpoint/dir.js';
import { type TensorEntry } from '../checkpoint/safetensors.js';
import { UserError } from '../util/errors.js';
import { placeRecords, planPack, type PackPlan, type PlannedRecord } from './pack-plan.js';
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

export interface PackOptions {
  model: string;
  out: string;
  maxRecord?: number;
  fileSize?: number;
  experts?: ExpertsMode;
  chunkBytes?: number;
  /** Store the BF16 trunk matrices losslessly coded (formats/bf16-code.ts; a version 2 pack). */
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

/** A pack's options, checked, and the paths it reads from and writes to. */
interface PackArgs { modelAbs: string; outAbs: string; maxRecord: number; fileSize: number; mode: ExpertsMode; chunkBytes: number }

/** The source checkpoint: its config (and bytes), tensors, shard identities and `k3 verify` sidecar. */
interface PackSource { cfg: ModelConfig; configBytes: Buffer; configSha: string; entries: Map<string, TensorEntry>; sourceShards: PackManifest['source_shards']; sourceCheck: SourceCheck }

export async function packCheckpoint(opts: PackOptions): Promise<PackResult> {
  const t0 = performance.now();
  const a = packArgs(opts);
  const src = readSource(a.modelAbs);
  const options: PackManifest['options'] = { max_record: a.maxRecord, file_size: a.fileSize, experts: a.mode, ...(opts.compress ? { compress: true as const } : {}) };
  const same = existingPack(opts, a, src, options);
  if (same) return { out: a.outAbs, skipped: true, manifest: same, bytes: 0, seconds: (performance.now() - t0) / 1000 };
  const tmp = `${a.outAbs}.tmp-${process.pid}`;
  removeStaleTmp(a.outAbs);
  fs.rmSync(tmp, { recursive: true, force: true });
  try {
    fs.mkdirSync(tmp);
    const w = await writePack(opts, a, src, tmp);
    const manifest = packManifest(a, src, options, w);
    opts.signal?.throwIfAborted();
    fs.rmSync(path.join(tmp, '.coded'), { recursive: true, force: true });
    fs.writeFileSync(path.join(tmp, MANIFEST_NAME), manifestJson(manifest));
    readPackedDir(tmp); // the manifest reads back
    if (fs.existsSync(a.outAbs)) fs.rmdirSync(a.outAbs); // an empty directory (checked above)
    fs.renameSync(tmp, a.outAbs);
    const coded = w.coded ? { rawBytes: w.coded.rawBytes, storedBytes: w.coded.storedBytes, tensors: w.coded.encodings.size } : undefined;
    return { out: a.outAbs, skipped: false, manifest, bytes: w.total, seconds: (performance.now() - t0) / 1000, coded };
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}

function packArgs(opts: PackOptions): PackArgs {
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
  return { modelAbs, outAbs, maxRecord, fileSize, mode, chunkBytes };
}

function readSource(modelAbs: string): PackSource {
  const cfg = loadConfig(modelAbs);
  const configBytes = fs.readFileSync(path.join(modelAbs, 'config.json'));
  const entries = indexCheckpointDir(modelAbs);
  const shardFiles = [...new Set([...entries.values()].map((e) => e.file))].sort();
  // A `k3 verify` sidecar of the source: what the pack reads is checked against it (refused, as by
  // k3 run, when stale or lacking a tensor).
  const sourceCheck = new SourceCheck(knownRanges(modelAbs, entries));
  return { cfg, configBytes, configSha: sha256(configBytes), entries, sourceShards: shardIdentity(shardFiles), sourceCheck };
}

/** An existing OUT: the manifest of the same pack (a no-op), else refused unless empty. */
function existingPack(opts: PackOptions, a: PackArgs, src: PackSource, options: PackManifest['options']): PackManifest | null {
  const { outAbs, modelAbs } = a;
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
      const sameSource = m && m.config_sha256 === src.configSha && sameJson(m.source_shards, src.sourceShards);
      if (m && m.source === modelAbs && sameSource && sameJson(m.options, options)) {
        readPackedDir(outAbs); // data files present with their sizes
        return m;
      }
      const what = !m ? `a pack manifest this build refuses (${why})` : m.source !== modelAbs ? `a pack of ${m.source}` : !sameSource ? `a pack of an earlier version of ${m.source}` : `a pack made with other options (${JSON.stringify(m.options)})`;
      throw new UserError(`pack: ${opts.out} already holds ${what}; remove it or choose another OUT`);
    }
    if (fs.readdirSync(outAbs).length > 0) throw new UserError(`pack: ${opts.out} exists and is not a packed directory; choose another OUT`);
  }
  if (!fs.existsSync(path.dirname(outAbs))) throw new UserError(`pack: directory ${path.dirname(outAbs)} does not exist`);
  return null;
}

/** What writing the data files made: the plan, the records in file order, the files, the in-place experts' sha256. */
interface Written { plan: PackPlan; records: PlannedRecord[]; expertRecs: PlannedRecord[]; files: { name: string; size: number }[]; expertSha: Map<string, string>; coded: CodedTensors | null; total: number }

/** Plan the pack, then copy every record into tmp's data files (and hash the experts left in place). */
async function writePack(opts: PackOptions, a: PackArgs, src: PackSource, tmp: string): Promise<Written> {
  const { cfg, entries, sourceCheck } = src;
  const stopIfAborted = () => opts.signal?.throwIfAborted();
  // --compress: the coded matrices are written to tmp/.coded first, then copied like any tensor.
  const coded: CodedTensors | null = opts.compress ? codeTrunk(cfg, entries, path.join(tmp, '.coded'), stopIfAborted, sourceCheck.feed) : null;
  const plan = planPack(cfg, coded?.entries ?? entries, a.maxRecord, a.mode, entries);
  const files: { name: string; size: number }[] = [];
  const trunkRecs = plan.records.filter((r) => r.series === 'trunk');
  const expertRecs = plan.records.filter((r) => r.series === 'experts');
  placeRecords(trunkRecs, 'trunk', a.fileSize, files);
  placeRecords(expertRecs, 'experts', a.fileSize, files);
  const records = [...trunkRecs, ...expertRecs];
  fs.writeFileSync(path.join(tmp, 'config.json'), src.configBytes);
  for (const f of COPIED_FILES) if (fs.existsSync(path.join(a.modelAbs, f))) fs.copyFileSync(path.join(a.modelAbs, f), path.join(tmp, f));
  for (const f of files) {
    const fd = fs.openSync(path.join(tmp, f.name), 'w');
    try {
      fs.ftruncateSync(fd, f.size); // padding reads as zeros
    } finally {
      fs.closeSync(fd);
    }
  }
  const { chunks, total } = recordChunks(records, a.chunkBytes);
  const { hashChunks, hashed, expertSha } = inPlaceHashes(plan, a.chunkBytes);
  let done = 0;
  opts.onProgress?.(0, total + hashed);
  const progress = (n: number) => {
    stopIfAborted();
    done += n;
    opts.onProgress?.(done, total + hashed);
  };
  await streamChunks(chunks, a.chunkBytes, files.map((f) => path.join(tmp, f.name)), progress, sourceCheck.feed);
  await streamChunks(hashChunks, a.chunkBytes, [], progress, sourceCheck.feed);
  await sourceCheck.finish();
  return { plan, records, expertRecs, files, expertSha, coded, total };
}

/** The copy chunks of every record, in record order; runs of tensors adjacent in both source and destination are merged. */
function recordChunks(records: PlannedRecord[], chunkBytes: number): { chunks: Chunk[]; total: number } {
  const chunks: Chunk[] = [];
  let total = 0;
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
  return { chunks, total };
}

/** Experts left in place: each run's sha256, from the bytes read now (a later run checks each
 *  expert's first read against it, and pack --verify all of them). */
function inPlaceHashes(plan: PackPlan, chunkBytes: number): { hashChunks: Chunk[]; hashed: number; expertSha: Map<string, string> } {
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
  return { hashChunks, hashed, expertSha };
}

function packManifest(a: PackArgs, src: PackSource, options: PackManifest['options'], w: Written): PackManifest {
  const { plan, records, files, coded } = w;
  const tensors: Record<string, PackedTensor> = {};
  records.forEach((r, ri) => {
    if (r.rec.kind === 'expert') return;
    for (const t of r.tensors) {
      const encoding = coded?.encodings.get(t.entry.name);
      const nbytes = encoding ? src.entries.get(t.entry.name)!.nbytes : t.entry.nbytes;
      tensors[t.entry.name] = { dtype: t.entry.dtype, shape: t.entry.shape, record: ri, offset_in_record: t.offsetInRecord, nbytes, ...(encoding ? { encoding } : {}) };
    }
  });
  const manifest: PackManifest = {
    format: PACK_FORMAT,
    version: coded && coded.encodings.size > 0 ? PACK_VERSION_CODED : PACK_VERSION,
    alignment: PACK_ALIGN,
    source: a.modelAbs,
    config_sha256: src.configSha,
    arch: src.cfg.arch,
    options,
    source_shards: src.sourceShards,
    files,
    records: records.map((r) => r.rec),
    tensors,
    experts_in_place: plan.inPlace,
    experts: plan.expertGroups.length > 0 ? expertsEntry(a, w) : null,
    dropped: plan.dropped,
    total_bytes: files.reduce((s, f) => s + f.size, 0),
    tensor_count: src.entries.size - plan.dropped.length,
  };
  manifest.manifest_sha256 = manifestDigest(manifest);
  return manifest;
}

/** The manifest's experts: where each one's run lies (in the source, or in the pack's expert files). */
function expertsEntry(a: PackArgs, w: Written): PackedExperts {
  const { plan, expertRecs, files } = w;
  if (plan.inPlace) {
    const exFiles = [...new Set([...plan.inPlaceAt.values()].map((x) => path.basename(x.file)))].sort();
    const at: Record<string, [number, number]> = {};
    for (const [prefix, x] of plan.inPlaceAt) at[prefix] = [exFiles.indexOf(path.basename(x.file)), x.offset];
    const sha256 = Object.fromEntries([...plan.inPlaceAt.keys()].map((prefix) => [prefix, w.expertSha.get(prefix)!]));
    return { in_place: true, dir: path.relative(a.outAbs, a.modelAbs) || '.', source_dir: a.modelAbs, files: exFiles, expert_bytes: plan.template.reduce((s, t) => Math.max(s, t.offset + t.nbytes), 0), template: plan.template, at, sha256 };
  }
  const exFiles = [...new Set(expertRecs.map((r) => r.fileIndex))].sort((x, y) => x - y);
  const at: Record<string, [number, number]> = {};
  expertRecs.forEach((r, i) => {
    at[plan.expertGroups[i]!.prefix] = [exFiles.indexOf(r.fileIndex), r.rec.offset];
  });
  return { in_place: false, dir: null, source_dir: null, files: exFiles.map((i) => files[i]!.name), expert_bytes: plan.template.reduce((s, t) => s + t.nbytes, 0), template: plan.template, at };
}
