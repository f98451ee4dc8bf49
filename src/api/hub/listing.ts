// A repository's files at a commit, from the Hub's API: `GET /api/models/{repo}/revision/{rev}`
// pins a branch or tag to its commit sha, `GET /api/models/{repo}/tree/{sha}?recursive=true`
// lists every file (pages linked by `Link: <...>; rel="next"`) with its size, git blob id and, for
// LFS files, the sha256 of the content (`lfs.oid`).

import { UserError } from '../../util/errors.js';
import type { HubEnv } from './env.js';
import { hubGet, refusal, retrying, type RetryPolicy } from './http.js';

export interface HubFile {
  /** Path in the repository, '/'-separated. */
  path: string;
  size: number;
  /** The git blob id (sha1 of "blob <size>\0" + content). */
  oid: string;
  /** LFS files: the sha256 of the content. */
  sha256?: string;
}

/** What the Hub cache names a file's blob: the sha256 for LFS files, else the git blob id. */
export function etagOf(f: HubFile): string {
  return f.sha256 ?? f.oid;
}

interface Ctx {
  env: HubEnv;
  policy: RetryPolicy;
  signal?: AbortSignal;
  onRetry?: (msg: string) => void;
}

async function getJson(ctx: Ctx, url: URL, what: string): Promise<{ body: unknown; next: string | null }> {
  return retrying(what, ctx.policy, async () => {
    const res = await hubGet(ctx.env, url, { accept: 'application/json' }, ctx.signal);
    if (!res.ok) throw await refusal(res, what, ctx.env);
    const link = res.headers.get('link');
    const next = link ? (/<([^>]+)>\s*;\s*rel="?next"?/.exec(link)?.[1] ?? null) : null;
    let body: unknown;
    try {
      body = await res.json();
    } catch {
      throw new UserError(`pull: ${what}: the Hub's answer is not JSON`, 1);
    }
    return { body, next: next === null ? null : new URL(next, url).href };
  }, ctx);
}

function apiUrl(env: HubEnv, repo: string, kind: 'revision' | 'tree', rev: string): URL {
  return new URL(`${env.endpoint.pathname.replace(/\/$/, '')}/api/models/${repo}/${kind}/${encodeURIComponent(rev)}`, env.endpoint);
}

/** The commit sha a branch, tag or sha names. */
export async function resolveCommit(ctx: Ctx, repo: string, revision: string): Promise<string> {
  const { body } = await getJson(ctx, apiUrl(ctx.env, repo, 'revision', revision), `${repo}@${revision}`);
  const sha = (body as { sha?: unknown }).sha;
  if (typeof sha !== 'string' || !/^[0-9a-f]{40}$/.test(sha)) throw new UserError(`pull: ${repo}@${revision}: the Hub's answer has no commit sha`, 1);
  return sha;
}

/** A listed path must stay inside the folder it is written to. */
function safePath(p: string, repo: string): string {
  const parts = p.split('/');
  if (p.startsWith('/') || p.includes('\\') || parts.some((s) => s === '' || s === '.' || s === '..')) throw new UserError(`pull: ${repo}: the listing holds an unsafe path ${JSON.stringify(p)}`, 1);
  return p;
}

interface TreeEntry {
  type?: string;
  path?: string;
  size?: number;
  oid?: string;
  lfs?: { oid?: string; sha256?: string; size?: number };
}

/** Every file of the repository at `commit`. */
export async function listFiles(ctx: Ctx, repo: string, commit: string): Promise<HubFile[]> {
  const files: HubFile[] = [];
  const first = apiUrl(ctx.env, repo, 'tree', commit);
  first.searchParams.set('recursive', 'true');
  let url: string | null = first.href;
  for (let page = 0; url !== null; page++) {
    if (page > 10_000) throw new UserError(`pull: ${repo}: the listing does not end`, 1);
    const got: { body: unknown; next: string | null } = await getJson(ctx, new URL(url), `${repo}@${commit.slice(0, 12)} (file list)`);
    if (!Array.isArray(got.body)) throw new UserError(`pull: ${repo}: the file list is not an array`, 1);
    for (const e of got.body as TreeEntry[]) {
      if (e.type !== 'file') continue;
      if (typeof e.path !== 'string' || typeof e.size !== 'number' || typeof e.oid !== 'string') throw new UserError(`pull: ${repo}: a file list entry lacks path, size or oid`, 1);
      const sha = e.lfs ? (e.lfs.oid ?? e.lfs.sha256 ?? '').replace(/^sha256:/, '') : undefined;
      if (sha !== undefined && !/^[0-9a-f]{64}$/.test(sha)) throw new UserError(`pull: ${repo}: ${e.path}: the listed LFS sha256 is malformed`, 1);
      files.push({ path: safePath(e.path, repo), size: e.lfs?.size ?? e.size, oid: e.oid, ...(sha ? { sha256: sha } : {}) });
    }
    url = got.next;
  }
  return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
