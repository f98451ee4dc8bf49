// One file into its place in the pulled folder. Its bytes go to `<DIR>/.k3-pull/<path>.<etag>.part`
// (from the Hub, resumed with an HTTP Range from what the part holds; or from the Hub cache; or
// from memory), are checked against the listed checksum, and only then renamed to the final name,
// so nothing half-downloaded or unchecked ever sits there. A mismatch discards the part and
// fetches the file once more; a second mismatch is an error naming the file.

import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { UserError } from '../../util/errors.js';
import { Digest, digestRange } from './digest.js';
import type { HubEnv } from './env.js';
import { backoff, describe, hubGet, refusal, Transient, Unreachable, type RetryPolicy } from './http.js';
import { etagOf, type HubFile } from './listing.js';

export interface FileCtx {
  env: HubEnv;
  policy: RetryPolicy;
  signal: AbortSignal;
  repo: string;
  commit: string;
  dir: string;
  workDir: string;
  /** The bytes held for a file changed by `delta` (negative when a part is discarded). */
  onBytes(delta: number): void;
  /** Bytes received from the network. */
  onFetched(n: number): void;
  onNote(msg: string): void;
}

export type Source = { kind: 'hub' } | { kind: 'cache'; file: string } | { kind: 'memory'; bytes: Uint8Array };

export interface Placed {
  via: 'hub' | 'cache' | 'memory';
  /** The first bytes did not match and the file was fetched again. */
  refetched: boolean;
  retries: number;
}

export function resolveUrl(env: HubEnv, repo: string, commit: string, file: string): URL {
  const p = file.split('/').map(encodeURIComponent).join('/');
  return new URL(`${env.endpoint.pathname.replace(/\/$/, '')}/${repo}/resolve/${commit}/${p}`, env.endpoint);
}

export function partPath(workDir: string, f: HubFile): string {
  return path.join(workDir, `${encodeURIComponent(f.path)}.${etagOf(f) || 'unchecked'}.part`);
}

async function writeAt(fh: fsp.FileHandle, chunk: Uint8Array, pos: number, part: string): Promise<void> {
  try {
    for (let off = 0; off < chunk.byteLength;) {
      const { bytesWritten } = await fh.write(chunk, off, chunk.byteLength - off, pos + off);
      off += bytesWritten;
    }
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`pull: ${part}: cannot write (${code ?? String(e)}${code === 'ENOSPC' ? ': no space left on device' : ''})`, 1);
  }
}

/** Where a download stands: bytes in the part, and bytes the current request brought. */
interface Cursor {
  have: number;
  got: number;
}

/** Bring the part to the file's full size from the Hub, hashing into `d`; returns the retries. */
async function download(ctx: FileCtx, f: HubFile, part: string, d: Digest): Promise<number> {
  const what = `${ctx.repo}: ${f.path}`;
  const fh = await fsp.open(part, fs.existsSync(part) ? 'r+' : 'w+');
  let retries = 0;
  try {
    const at: Cursor = { have: await resume(ctx, fh, f, d), got: 0 };
    for (let failures = 0; at.have < f.size;) {
      at.got = 0;
      const t = await tryOnce(ctx, f, part, fh, d, at);
      if (!t) continue;
      failures = at.got > 0 ? 1 : failures + 1; // a try that brought bytes ends a streak of failures
      if (failures > ctx.policy.retries) throw new Unreachable(`pull: ${what}: gave up after ${ctx.policy.retries} retries (${t.message}); rerun to resume from byte ${at.have}`);
      retries++;
      const wait = backoff(ctx.policy, failures);
      ctx.onNote(`${f.path}: ${t.message}; resuming from byte ${at.have} in ${(wait / 1000).toFixed(1)} s`);
      await sleep(wait, undefined, { signal: ctx.signal }).catch(() => {});
      if (ctx.signal.aborted) throw ctx.signal.reason;
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  return retries;
}

/** The bytes a part already holds, hashed into `d` (none when it is longer than the file). */
async function resume(ctx: FileCtx, fh: fsp.FileHandle, f: HubFile, d: Digest): Promise<number> {
  const have = (await fh.stat()).size;
  if (have > f.size) {
    await fh.truncate(0);
    return 0;
  }
  if (have > 0) {
    await digestRange(fh, d, have);
    ctx.onBytes(have);
  }
  return have;
}

/**
 * One request for the rest of the file, aborted when no data comes for `stallMs`; returns the
 * transient failure that ended it short, or null when the part is complete.
 */
async function tryOnce(ctx: FileCtx, f: HubFile, part: string, fh: fsp.FileHandle, d: Digest, at: Cursor): Promise<Transient | null> {
  const ac = new AbortController();
  const onAbort = () => ac.abort(ctx.signal.reason);
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => ac.abort(new Transient(`no data for ${ctx.policy.stallMs / 1000} s`)), ctx.policy.stallMs);
  };
  try {
    arm();
    await fetchRest(ctx, f, part, fh, d, at, ac.signal, arm);
    if (at.have < f.size) throw new Transient(`connection closed at byte ${at.have} of ${f.size}`);
    return null;
  } catch (e) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    const t = e instanceof Transient ? e : ac.signal.reason instanceof Transient ? ac.signal.reason : null;
    if (!t) throw e;
    return t;
  } finally {
    clearTimeout(timer);
    ctx.signal.removeEventListener('abort', onAbort);
  }
}

/** GET from byte `at.have` on, appending to the part and hashing; `arm` restarts the stall timer. */
async function fetchRest(ctx: FileCtx, f: HubFile, part: string, fh: fsp.FileHandle, d: Digest, at: Cursor, signal: AbortSignal, arm: () => void): Promise<void> {
  const url = resolveUrl(ctx.env, ctx.repo, ctx.commit, f.path);
  const what = `${ctx.repo}: ${f.path}`;
  const res = await hubGet(ctx.env, url, { range: `bytes=${at.have}-`, 'accept-encoding': 'identity' }, signal);
  if (res.status === 200 && at.have > 0) {
    // The server ignored the range: its body starts at byte 0.
    await fh.truncate(0);
    ctx.onBytes(-at.have);
    at.have = 0;
    d.reset();
  } else if (res.status === 206) {
    const start = /^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '');
    if (!start || Number(start[1]) !== at.have) {
      await res.body?.cancel();
      throw new Transient(`answer to a range from byte ${at.have} starts at ${start?.[1] ?? '?'}`);
    }
  } else if (res.status !== 200) {
    throw await refusal(res, what, ctx.env);
  }
  if (!res.body) throw new Transient('no body');
  const reader = res.body.getReader();
  for (;;) {
    let r: ReadableStreamReadResult<Uint8Array>;
    try {
      r = await reader.read();
    } catch (e) {
      throw signal.reason instanceof Transient ? signal.reason : new Transient(`${url.host}: ${describe(e)}`);
    }
    if (r.done) return;
    arm();
    if (at.have + r.value.byteLength > f.size) {
      await reader.cancel();
      throw new UserError(`pull: ${what}: the Hub sent more than the ${f.size} bytes it lists`, 1);
    }
    await writeAt(fh, r.value, at.have, part);
    d.update(r.value);
    at.have += r.value.byteLength;
    at.got += r.value.byteLength;
    ctx.onBytes(r.value.byteLength);
    ctx.onFetched(r.value.byteLength);
  }
}

/** Fill the part from a cached copy: a hard link when the filesystem allows, else a copy. */
async function fromCache(ctx: FileCtx, f: HubFile, src: string, part: string, d: Digest): Promise<void> {
  try {
    fs.linkSync(src, part);
  } catch {
    await fsp.copyFile(src, part);
  }
  const fh = await fsp.open(part, 'r');
  try {
    await digestRange(fh, d, f.size);
  } finally {
    await fh.close();
  }
  ctx.onBytes(f.size);
}

async function fromMemory(ctx: FileCtx, bytes: Uint8Array, part: string, d: Digest): Promise<void> {
  const fh = await fsp.open(part, 'w');
  try {
    await writeAt(fh, bytes, 0, part);
    await fh.sync();
  } finally {
    await fh.close();
  }
  d.update(bytes);
  ctx.onBytes(bytes.byteLength);
}

/** Put `f` at `<DIR>/<path>`, checked, from `source` (a cached or in-memory copy that does not
 *  match falls back to the Hub). */
export async function placeFile(ctx: FileCtx, f: HubFile, source: Source): Promise<Placed> {
  const part = partPath(ctx.workDir, f);
  const final = path.join(ctx.dir, ...f.path.split('/'));
  const d = new Digest(f);
  let via: Placed['via'] = source.kind;
  let refetched = false;
  let retries = 0;
  if (source.kind !== 'hub') {
    fs.rmSync(part, { force: true }); // a copy at hand beats resuming a download
    if (source.kind === 'cache') await fromCache(ctx, f, source.file, part, d);
    else await fromMemory(ctx, source.bytes, part, d);
    if (!d.check().ok) {
      fs.rmSync(part, { force: true });
      if (ctx.env.offline) throw new UserError(`pull: ${ctx.env.offlineWhy} and the Hub cache's ${source.kind === 'cache' ? source.file : 'copy'} of ${f.path} does not match its ${d.algorithm}`, 1);
      ctx.onNote(`${f.path}: the copy in ${source.kind === 'cache' ? source.file : 'memory'} does not match its ${d.algorithm}; fetching it`);
      ctx.onBytes(-f.size);
      via = 'hub';
      d.reset();
    }
  }
  if (via === 'hub') {
    for (;;) {
      retries += await download(ctx, f, part, d);
      const { ok, got } = d.check();
      if (ok) break;
      fs.rmSync(part, { force: true });
      ctx.onBytes(-f.size);
      if (refetched) throw new UserError(`pull: ${ctx.repo}: ${f.path}: the bytes fetched do not match the ${d.algorithm} the Hub lists, twice (listed ${d.expected}, got ${got}); refused`, 1);
      ctx.onNote(`${f.path}: ${d.algorithm} mismatch (listed ${d.expected.slice(0, 12)}, got ${got.slice(0, 12)}); refused, fetching it again`);
      refetched = true;
      d.reset();
    }
  }
  fs.mkdirSync(path.dirname(final), { recursive: true });
  fs.renameSync(part, final);
  return { via, refetched, retries };
}
