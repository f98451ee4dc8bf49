// Checksums of what a run streams, for VerifiedReader (verified-reader.ts):
// - a packed directory's records carry a sha256 each, and so does each expert left in place in
//   the source shards (packed.json): every byte a pack computes on;
// - a plain checkpoint has none, until `k3 verify MODEL` records one per tensor in a sidecar file
//   next to the shards, CHECKSUMS_NAME, and checks them on later runs.
//
// Sidecar (JSON, written atomically: a temporary name, fsync, rename; a killed `k3 verify`
// leaves no sidecar, only a *.tmp-<pid> that the next run removes):
//   { format: "kimi-k3-ts checksums", version: 1,
//     files: [{ file, size, header_sha256 }],          the shards as they were when recorded
//     tensors: { "<name>": { file, offset, length, sha256 } } }    offset absolute in the file
// A sidecar whose shards changed (size or header) is refused: the digests would be of other bytes.
// So is one that lacks a tensor the run would read (as `k3 verify` refuses it): no byte is
// computed on unchecked because its entry went missing.

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { MANIFEST_NAME, expertSourceDir, isPackedDir, readManifest } from '../checkpoint/packed.js';
import type { TensorEntry } from '../checkpoint/safetensors.js';
import { ReadError, UserError } from '../util/errors.js';
import { writeFileAtomic } from '../util/stale-tmp.js';
import { sameJson, shardIdentity } from './pack-io.js';
import { VerifiedReader, type ByteReader, type CheckedRange, type VerifyMode } from './verified-reader.js';

export const CHECKSUMS_NAME = 'k3-checksums.json';
const FORMAT = 'kimi-k3-ts checksums';
const VERSION = 1;
const CHUNK = 16 * 2 ** 20;

interface Sidecar {
  format: string;
  version: number;
  files: { file: string; size: number; header_sha256: string }[];
  tensors: Record<string, { file: string; offset: number; length: number; sha256: string }>;
}

/** `reader`, checking what it reads against every digest known for `dir` (unchanged when none is, or mode 'off'). */
export function withChecksums(dir: string, entries: Map<string, TensorEntry>, reader: ByteReader, mode: VerifyMode | 'off'): ByteReader {
  if (mode === 'off') return reader;
  const ranges = knownRanges(dir, entries);
  return ranges.length === 0 ? reader : new VerifiedReader(reader, ranges, mode);
}

/** Every range with a known digest among the files `entries` point into. */
export function knownRanges(dir: string, entries: Map<string, TensorEntry>): CheckedRange[] {
  const out: CheckedRange[] = [];
  if (isPackedDir(dir)) {
    // The manifest covers every byte: its records, and each in-place expert's run in the source.
    const m = readManifest(dir);
    for (const r of m.records) out.push({ what: `record ${r.name}`, file: path.join(dir, r.file), offset: r.offset, length: r.length, sha256: r.sha256 });
    const ex = m.experts;
    if (ex?.in_place) {
      const src = expertSourceDir(dir, m, ex);
      for (const [prefix, [fi, off]] of Object.entries(ex.at)) out.push({ what: `expert ${prefix}`, file: path.join(src, ex.files[fi]!), offset: off, length: ex.expert_bytes, sha256: ex.sha256![prefix]! });
    }
    return out;
  }
  // Sidecars where the tensors live (the model directory).
  const dirs = new Set([...entries.values()].map((e) => path.dirname(e.file)));
  for (const d of dirs) {
    const sc = readSidecar(d);
    if (!sc) continue;
    for (const e of entries.values()) {
      if (path.dirname(e.file) !== d) continue;
      const t = sc.tensors[e.name];
      if (!t) throw new UserError(`${path.join(d, CHECKSUMS_NAME)}: no checksum for tensor ${e.name}; k3 verify ${d} --record records them again`);
      if (t.file !== path.basename(e.file) || t.offset !== e.offset || t.length !== e.nbytes) throw new UserError(`${path.join(d, CHECKSUMS_NAME)}: the checksum of tensor ${e.name} is of other bytes (${t.file} at ${t.offset}, ${t.length} bytes); k3 verify ${d} --record records them again`);
    }
    for (const [name, t] of Object.entries(sc.tensors)) out.push({ what: `tensor ${name}`, file: path.join(d, t.file), offset: t.offset, length: t.length, sha256: t.sha256 });
  }
  return out;
}

/** The sidecar of `dir`, checked against the shards as they are now; null when there is none. */
export function readSidecar(dir: string): Sidecar | null {
  const file = path.join(dir, CHECKSUMS_NAME);
  if (!fs.existsSync(file)) return null;
  let sc: Sidecar;
  try {
    sc = JSON.parse(fs.readFileSync(file, 'utf8')) as Sidecar;
  } catch (e) {
    if (e instanceof SyntaxError) throw new UserError(`${file}: not valid JSON (delete it, then k3 verify ${dir} records it again)`);
    throw new ReadError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
  if (!sc || typeof sc !== 'object' || sc.format !== FORMAT || sc.version !== VERSION || !Array.isArray(sc.files) || typeof sc.tensors !== 'object' || sc.tensors === null) {
    throw new UserError(`${file}: not a kimi-k3-ts checksum file (version ${VERSION})`);
  }
  const now = shardIdentity(sc.files.map((f) => path.join(dir, path.basename(String(f.file)))));
  for (let i = 0; i < now.length; i++) {
    if (!sameJson(now[i], sc.files[i])) throw new UserError(`${file}: ${sc.files[i]!.file} changed since its checksums were recorded (size or header); k3 verify ${dir} --record records them again`);
  }
  for (const [name, t] of Object.entries(sc.tensors)) {
    const f = sc.files.find((x) => x.file === t.file);
    if (!f || !Number.isSafeInteger(t.offset) || !Number.isSafeInteger(t.length) || t.offset < 0 || t.length < 0 || t.offset + t.length > f.size || !/^[0-9a-f]{64}$/.test(String(t.sha256))) {
      throw new UserError(`${file}: entry of tensor ${name} is corrupt`);
    }
  }
  return sc;
}

export interface ChecksumResult {
  recorded: boolean;
  tensors: number;
  bytes: number;
  mismatches: { tensor: string; file: string; offset: number; length: number }[];
  seconds: number;
}

/** sha256 of `length` bytes of `fd` at `offset`, read in bounded chunks. */
export async function hashRange(fd: fs.promises.FileHandle, file: string, offset: number, length: number, buf: Uint8Array, onBytes: (n: number) => void): Promise<string> {
  const h = createHash('sha256');
  for (let at = 0; at < length;) {
    const want = Math.min(buf.byteLength, length - at);
    let got: number;
    try {
      got = (await fd.read(buf, 0, want, offset + at)).bytesRead;
    } catch (e) {
      throw new ReadError(`${file}: read of ${want} bytes at offset ${offset + at} failed (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 4);
    }
    if (got === 0) throw new ReadError(`${file}: short read at offset ${offset + at} (file truncated?)`, 4);
    h.update(buf.subarray(0, got));
    at += got;
    onBytes(got);
  }
  return h.digest('hex');
}

/**
 * `k3 verify` on a plain checkpoint directory: with no sidecar (or `record`), hash every tensor
 * and write the sidecar; otherwise hash every tensor and compare.
 */
export async function recordOrCheck(dir: string, entries: Map<string, TensorEntry>, opts: { record?: boolean; onProgress?: (done: number, total: number) => void } = {}): Promise<ChecksumResult> {
  const t0 = performance.now();
  if (fs.existsSync(path.join(dir, MANIFEST_NAME))) throw new Error('recordOrCheck on a packed directory');
  const existing = opts.record ? null : readSidecar(dir);
  const list = [...entries.values()].sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.offset - b.offset));
  const total = list.reduce((s, e) => s + e.nbytes, 0);
  const buf = new Uint8Array(CHUNK);
  const tensors: Sidecar['tensors'] = {};
  const mismatches: ChecksumResult['mismatches'] = [];
  let done = 0;
  const handles = new Map<string, fs.promises.FileHandle>();
  try {
    for (const e of list) {
      let fd = handles.get(e.file);
      if (!fd) {
        fd = await fs.promises.open(e.file, 'r').catch((err: NodeJS.ErrnoException) => {
          throw new ReadError(`${e.file}: cannot open (${err.code ?? String(err)})`);
        });
        handles.set(e.file, fd);
      }
      const hex = await hashRange(fd, e.file, e.offset, e.nbytes, buf, (n) => opts.onProgress?.((done += n), total));
      const rec = { file: path.basename(e.file), offset: e.offset, length: e.nbytes, sha256: hex };
      if (existing) {
        const want = existing.tensors[e.name];
        if (!want) throw new UserError(`${path.join(dir, CHECKSUMS_NAME)}: no checksum for tensor ${e.name}; k3 verify ${dir} --record records them again`);
        if (want.sha256 !== hex || want.offset !== e.offset || want.length !== e.nbytes) mismatches.push({ tensor: e.name, file: e.file, offset: e.offset, length: e.nbytes });
      } else tensors[e.name] = rec;
    }
  } finally {
    for (const fd of handles.values()) await fd.close();
  }
  if (!existing) {
    const files = shardIdentity([...new Set(list.map((e) => e.file))].sort());
    writeFileAtomic(path.join(dir, CHECKSUMS_NAME), JSON.stringify({ format: FORMAT, version: VERSION, files, tensors } satisfies Sidecar));
  }
  return { recorded: !existing, tensors: list.length, bytes: total, mismatches, seconds: (performance.now() - t0) / 1000 };
}
