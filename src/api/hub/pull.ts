// `pull`: a Hub repository at a pinned commit into a folder, fit to run. The listing at the commit
// decides what is needed (select.ts), the free space is checked before any byte moves, then
// `jobs` files at a time are put in place (download.ts): from the folder itself when an earlier
// pull put them there, from the Hub cache, or from the Hub. `.k3-pull.json` records it all.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../../util/errors.js';
import { formatBytes } from '../../util/format.js';
import { cachedCopy, cachedListing, cachedRef, repoCacheDir } from './cache.js';
import { Digest, digestRange } from './digest.js';
import { placeFile, partPath, resolveUrl, type FileCtx, type Source } from './download.js';
import { hubEnv, isCommit, type HubEnv } from './env.js';
import { DEFAULT_RETRY, hubGet, refusal, retrying, Transient, Unreachable, type RetryPolicy } from './http.js';
import { etagOf, listFiles, resolveCommit, type HubFile } from './listing.js';
import { lockFolder } from './lock.js';
import { readRecord, RECORD_NAME, WORK_DIR, writeRecord, type PlacedFile, type PullRecord } from './record.js';
import { INDEX_FILE, selectFiles, type Skipped } from './select.js';

export interface PullOptions {
  repo: string;
  /** Branch, tag or commit (default 'main'). */
  revision?: string;
  /** Default: the repository's name, in the working directory. */
  dir?: string;
  include?: string[];
  exclude?: string[];
  /** Files fetched at once (default 8). */
  jobs?: number;
  /** Default process.env (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME). */
  env?: NodeJS.ProcessEnv;
  policy?: Partial<RetryPolicy>;
  signal?: AbortSignal;
  onProgress?: (p: PullProgress) => void;
  /** Retries, mismatches, a moved branch: one line each. */
  onNote?: (msg: string) => void;
  /** Free bytes where `dir` is (default: statfs); tests pass a small number. */
  freeSpace?: (dir: string) => number;
}

export interface PullProgress {
  /** Bytes of the selected files in place or in their parts. */
  done: number;
  total: number;
  /** Bytes received from the network in this run. */
  fetched: number;
  filesDone: number;
  files: number;
}

export interface PullResult {
  repo: string;
  revision: string;
  commit: string;
  dir: string;
  offline: boolean;
  files: string[];
  bytes: number;
  fetched: number;
  /** Files taken from the Hub cache. */
  fromCache: string[];
  /** Files an earlier pull had already put in place. */
  present: string[];
  skipped: Skipped[];
  /** Files whose first bytes did not match their checksum and were fetched again. */
  refetched: string[];
  retries: number;
  seconds: number;
}

function statOrNull(p: string): fs.Stats | null {
  try {
    return fs.statSync(p);
  } catch {
    return null;
  }
}

/** Free bytes on the filesystem holding `dir`. */
function freeBytes(dir: string): number {
  const s = fs.statfsSync(dir);
  return s.bavail * s.bsize;
}

async function digestFile(file: string, f: HubFile): Promise<boolean> {
  const d = new Digest(f);
  const fh = await fs.promises.open(file, 'r');
  try {
    await digestRange(fh, d, f.size);
  } finally {
    await fh.close();
  }
  return d.bytes === f.size && d.check().ok;
}

interface Pinned {
  commit: string;
  listing: HubFile[];
}

/** The commit and listing from what is at hand: the Hub cache's refs and snapshot, or DIR's record. */
function pinLocally(env: HubEnv, repo: string, revision: string, prev: PullRecord | null): Pinned | null {
  const fromPrev = prev && (prev.revision === revision || prev.commit === revision) ? prev.commit : null;
  const commit = isCommit(revision) ? revision : (cachedRef(env, repo, revision) ?? fromPrev);
  const listing = commit === null ? null : prev?.commit === commit ? prev.listing : cachedListing(env, repo, commit);
  return commit === null || listing === null ? null : { commit, listing };
}

/** Pin the revision to a commit and list it: from the Hub; offline (or, as huggingface_hub does,
 *  when the Hub cannot be reached) from the cache or an earlier pull. */
async function pin(env: HubEnv, policy: RetryPolicy, signal: AbortSignal, note: (m: string) => void, repo: string, revision: string, dir: string, prev: PullRecord | null): Promise<Pinned> {
  if (!env.offline) {
    // Few retries for the API: a missing network should not take minutes to say so.
    const ctx = { env, policy: { ...policy, retries: Math.min(policy.retries, 3) }, signal, onRetry: note };
    try {
      const commit = await resolveCommit(ctx, repo, revision);
      return { commit, listing: await listFiles(ctx, repo, commit) };
    } catch (e) {
      const local = e instanceof Unreachable ? pinLocally(env, repo, revision, prev) : null;
      if (!local) throw e;
      env.offline = true;
      env.offlineWhy = `${env.endpoint.host} cannot be reached`;
      note(`${(e as Error).message.replace(/^pull: /, '')}; using ${repo}@${revision} = ${local.commit.slice(0, 12)} from ${prev?.commit === local.commit ? dir : 'the Hub cache'}`);
      return local;
    }
  }
  const local = pinLocally(env, repo, revision, prev);
  if (!local) throw new UserError(`pull: ${env.offlineWhy} and ${repo}@${revision} is neither in the Hub cache (${repoCacheDir(env, repo)}) nor pulled into ${dir} before`);
  return local;
}

/** The index's weight map, read from wherever a checked copy is at hand (else fetched). */
async function readIndex(ctx: FileCtx, f: HubFile, local: string | null): Promise<{ map: Record<string, string>; bytes: Uint8Array | null }> {
  let bytes: Uint8Array | null = null;
  if (local !== null) bytes = fs.readFileSync(local);
  else {
    if (ctx.env.offline) throw new UserError(`pull: ${ctx.env.offlineWhy} and ${INDEX_FILE} of ${ctx.repo}@${ctx.commit.slice(0, 12)} is not in the Hub cache`);
    for (let attempt = 0; bytes === null; attempt++) {
      const got = await retrying(`${ctx.repo}: ${INDEX_FILE}`, ctx.policy, async () => {
        const res = await hubGet(ctx.env, resolveUrl(ctx.env, ctx.repo, ctx.commit, f.path), {}, ctx.signal);
        if (!res.ok) throw await refusal(res, `${ctx.repo}: ${f.path}`, ctx.env);
        try {
          return new Uint8Array(await res.arrayBuffer());
        } catch (e) {
          throw new Transient(`${INDEX_FILE}: ${(e as Error).message}`);
        }
      }, { signal: ctx.signal, onRetry: ctx.onNote });
      ctx.onFetched(got.byteLength);
      const d = new Digest(f);
      d.update(got);
      const { ok, got: hex } = d.check();
      if (ok) bytes = got;
      else if (attempt > 0) throw new UserError(`pull: ${ctx.repo}: ${INDEX_FILE}: the bytes fetched do not match the ${d.algorithm} the Hub lists, twice (listed ${d.expected}, got ${hex}); refused`, 1);
      else ctx.onNote(`${INDEX_FILE}: ${d.algorithm} mismatch; refused, fetching it again`);
    }
  }
  let idx: { weight_map?: unknown };
  try {
    idx = JSON.parse(Buffer.from(bytes).toString('utf8')) as { weight_map?: unknown };
  } catch {
    throw new UserError(`pull: ${ctx.repo}: ${INDEX_FILE} is not valid JSON`, 1);
  }
  if (!idx.weight_map || typeof idx.weight_map !== 'object') throw new UserError(`pull: ${ctx.repo}: ${INDEX_FILE} has no "weight_map" object`, 1);
  return { map: idx.weight_map as Record<string, string>, bytes: local === null ? bytes : null };
}

export async function pull(opts: PullOptions): Promise<PullResult> {
  const t0 = performance.now();
  const env = hubEnv(opts.env);
  const policy: RetryPolicy = { ...DEFAULT_RETRY, ...opts.policy };
  const revision = opts.revision ?? 'main';
  const repo = opts.repo;
  const dir = path.resolve(opts.dir ?? repo.split('/')[1]!);
  const note = opts.onNote ?? (() => {});
  const stop = new AbortController();
  const outer = opts.signal;
  if (outer?.aborted) throw outer.reason;
  outer?.addEventListener('abort', () => stop.abort(outer.reason), { once: true });
  const signal = stop.signal;

  const dirStat = statOrNull(dir);
  if (dirStat?.isDirectory() === false) throw new UserError(`pull: ${dir} exists and is not a directory`);
  const workDir = path.join(dir, WORK_DIR);
  fs.mkdirSync(workDir, { recursive: true });
  const unlock = lockFolder(workDir, dir);
  const tally: PullProgress = { done: 0, total: 0, fetched: 0, filesDone: 0, files: 0 };
  const progress = () => opts.onProgress?.({ ...tally });
  try {
    const prev = readRecord(dir);
    if (prev && prev.repo !== repo) throw new UserError(`pull: ${dir} holds a pull of ${prev.repo}; pull ${repo} into another folder`);
    const { commit, listing } = await pin(env, policy, signal, note, repo, revision, dir, prev);
    if (prev && prev.commit !== commit) note(`${dir} was pulled at ${prev.commit.slice(0, 12)}; ${revision} is now ${commit.slice(0, 12)}: changed files are replaced`);
    const ctx: FileCtx = {
      env, policy, signal, repo, commit, dir, workDir, onNote: note,
      onBytes: (n) => {
        tally.done += n;
        progress();
      },
      onFetched: (n) => {
        tally.fetched += n;
      },
    };
    const placed: Record<string, PlacedFile> = {};
    const inPlace = inPlaceCheck(dir, prev, placed, note);
    const index = await indexOf(ctx, listing, inPlace);
    const include = opts.include ?? [];
    const exclude = opts.exclude ?? [];
    const { keep, skipped } = selectFiles(listing, index ? index.map : null, include, exclude);
    const { todo, present, need } = await sources(ctx, keep, index, placed, inPlace);
    checkRoom(ctx, todo, need, opts.freeSpace ?? freeBytes);

    const rec: PullRecord = { version: 1, repo, revision, commit, endpoint: env.endpoint.origin, complete: false, include, exclude, listing, skipped, files: placed };
    writeRecord(dir, rec);
    tally.total = keep.reduce((a, f) => a + f.size, 0);
    tally.done = present.reduce((a, p) => a + placed[p]!.size, 0);
    tally.files = keep.length;
    tally.filesDone = present.length;
    progress();

    const got = await placeAll(ctx, todo, opts.jobs ?? 8, stop, (f) => {
      rec.files[f.path] = { etag: etagOf(f), size: f.size, mtime_ms: fs.statSync(finalPath(dir, f)).mtimeMs };
      writeRecord(dir, rec);
      tally.filesDone++;
      progress();
    });
    rec.complete = true;
    writeRecord(dir, rec);
    fs.rmSync(workDir, { recursive: true, force: true }); // leftovers of other revisions' parts, and the lock
    return {
      repo, revision, commit, dir, offline: env.offline, files: keep.map((f) => f.path), bytes: tally.total, fetched: tally.fetched, fromCache: got.fromCache.sort(), present,
      skipped, refetched: got.refetched.sort(), retries: got.retries, seconds: (performance.now() - t0) / 1000,
    };
  } catch (e) {
    // A first pull that failed before it wrote anything (a mistyped name, no access) leaves no folder.
    if (dirStat === null && !fs.existsSync(path.join(dir, RECORD_NAME))) fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  } finally {
    if (fs.existsSync(workDir)) unlock();
  }
}

type Index = { map: Record<string, string>; bytes: Uint8Array | null };
type InPlace = (f: HubFile) => Promise<boolean>;
type Todo = { f: HubFile; source: Source };

const finalPath = (dir: string, f: HubFile): string => path.join(dir, ...f.path.split('/'));

/**
 * Whether a file already sits at its final name, recording it in `placed` when so. Files an earlier
 * pull moved into place are trusted when unchanged since; others are hashed, and kept if they match.
 */
function inPlaceCheck(dir: string, prev: PullRecord | null, placed: Record<string, PlacedFile>, note: (m: string) => void): InPlace {
  return async (f) => {
    const st = statOrNull(finalPath(dir, f));
    if (!st?.isFile() || st.size !== f.size) return false;
    const r = prev?.files[f.path];
    const trusted = r !== undefined && r.etag === etagOf(f) && r.size === f.size && r.mtime_ms === st.mtimeMs;
    if (!trusted && f.size >= 1 << 30) note(`${f.path}: found in ${dir} but not placed there by a pull: checking its ${f.sha256 ? 'sha256' : 'blob id'}`);
    const ok = trusted || (await digestFile(finalPath(dir, f), f));
    if (ok) placed[f.path] = { etag: etagOf(f), size: f.size, mtime_ms: st.mtimeMs };
    return ok;
  };
}

/** The listing's index, from the folder, the Hub cache or the Hub; null when the repository has none. */
async function indexOf(ctx: FileCtx, listing: HubFile[], inPlace: InPlace): Promise<Index | null> {
  const entry = listing.find((f) => f.path === INDEX_FILE);
  if (!entry) return null;
  const cached = cachedCopy(ctx.env, ctx.repo, ctx.commit, entry);
  const local = (await inPlace(entry)) ? finalPath(ctx.dir, entry) : cached !== null && (await digestFile(cached, entry)) ? cached : null;
  return readIndex(ctx, entry, local);
}

/** Where each file comes from (an index fetched already, the Hub cache, the Hub), and the space the new bytes need. */
async function sources(ctx: FileCtx, keep: HubFile[], index: Index | null, placed: Record<string, PlacedFile>, inPlace: InPlace): Promise<{ todo: Todo[]; present: string[]; need: number }> {
  const todo: Todo[] = [];
  const present: string[] = [];
  let need = 0;
  const devOfDir = fs.statSync(ctx.dir).dev;
  for (const f of keep) {
    if (placed[f.path] || (await inPlace(f))) {
      present.push(f.path);
      continue;
    }
    const cached = cachedCopy(ctx.env, ctx.repo, ctx.commit, f);
    if (f.path === INDEX_FILE && index?.bytes) {
      todo.push({ f, source: { kind: 'memory', bytes: index.bytes } });
      need += f.size;
    } else if (cached !== null) {
      todo.push({ f, source: { kind: 'cache', file: cached } });
      if (fs.statSync(cached).dev !== devOfDir) need += f.size;
    } else {
      todo.push({ f, source: { kind: 'hub' } });
      need += f.size - Math.min(f.size, statOrNull(partPath(ctx.workDir, f))?.size ?? 0);
    }
  }
  return { todo, present, need };
}

/** Refuses, before any byte moves, a pull that needs the network offline or more space than there is. */
function checkRoom(ctx: FileCtx, todo: Todo[], need: number, freeSpace: (dir: string) => number): void {
  const { env, repo, commit, dir } = ctx;
  const missing = todo.filter((t) => t.source.kind === 'hub');
  if (env.offline && missing.length > 0) {
    const names = missing.map((t) => t.f.path);
    throw new UserError(`pull: ${env.offlineWhy} and ${names.length} file(s) of ${repo}@${commit.slice(0, 12)} are not in the Hub cache: ${names.slice(0, 5).join(', ')}${names.length > 5 ? ', ...' : ''}`);
  }
  const free = freeSpace(dir);
  if (need > free) throw new UserError(`pull: ${dir}: ${repo}@${commit.slice(0, 12)} needs ${formatBytes(need)} more but the filesystem has ${formatBytes(free)} free`, 1);
}

/** Places the files `jobs` at a time, small ones first; the first failure stops the others. */
async function placeAll(ctx: FileCtx, todo: Todo[], jobs: number, stop: AbortController, onPlaced: (f: HubFile) => void): Promise<{ fromCache: string[]; refetched: string[]; retries: number }> {
  // Small files first (the config is there early), then in path order.
  todo.sort((a, b) => (a.f.size < 1 << 20) !== (b.f.size < 1 << 20) ? (a.f.size < 1 << 20 ? -1 : 1) : a.f.path < b.f.path ? -1 : 1);
  const fromCache: string[] = [];
  const refetched: string[] = [];
  let retries = 0;
  let failure: unknown = null;
  let next = 0;
  const worker = async () => {
    while (next < todo.length && failure === null) {
      const { f, source } = todo[next++]!;
      try {
        const r = await placeFile(ctx, f, source);
        if (r.via === 'cache') fromCache.push(f.path);
        if (r.refetched) refetched.push(f.path);
        retries += r.retries;
        onPlaced(f);
      } catch (e) {
        if (failure === null) {
          failure = e;
          stop.abort(e);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(jobs, todo.length)) }, worker));
  if (failure !== null) throw failure;
  return { fromCache, refetched, retries };
}
