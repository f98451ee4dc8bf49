// The Hugging Face Hub cache (huggingface_hub's layout), read only:
//   <cache>/models--<owner>--<name>/refs/<branch>             the commit sha a branch last pointed to
//   <cache>/models--<owner>--<name>/blobs/<etag>              a file's bytes (etag: sha256 for LFS
//                                                             files, else the git blob id)
//   <cache>/models--<owner>--<name>/snapshots/<sha>/<path>    a symlink to ../../blobs/<etag>
// A file found there is reused instead of fetched (and checked like a fetched one).

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { HubEnv } from './env.js';
import { etagOf, type HubFile } from './listing.js';

export function repoCacheDir(env: HubEnv, repo: string): string {
  return path.join(env.cacheDir, `models--${repo.split('/').join('--')}`);
}

/** The commit a branch or tag last resolved to in the cache, or null. */
export function cachedRef(env: HubEnv, repo: string, revision: string): string | null {
  try {
    const sha = fs.readFileSync(path.join(repoCacheDir(env, repo), 'refs', ...revision.split('/')), 'utf8').trim();
    return /^[0-9a-f]{40}$/.test(sha) ? sha : null;
  } catch {
    return null;
  }
}

function sizeIs(file: string, size: number): boolean {
  try {
    const st = fs.statSync(file);
    return st.isFile() && st.size === size;
  } catch {
    return false;
  }
}

/** A cached copy of `f` (its blob, or the snapshot's file at `commit`) of the right size, or null. */
export function cachedCopy(env: HubEnv, repo: string, commit: string, f: HubFile): string | null {
  const dir = repoCacheDir(env, repo);
  const etag = etagOf(f);
  const candidates = [...(etag ? [path.join(dir, 'blobs', etag)] : []), path.join(dir, 'snapshots', commit, ...f.path.split('/'))];
  return candidates.find((c) => sizeIs(c, f.size)) ?? null;
}

/** The files of a cached snapshot, their hashes from the blob names the symlinks point to
 *  (oid '' where the cache holds a plain copy and no hash is known); null if not cached. */
export function cachedListing(env: HubEnv, repo: string, commit: string): HubFile[] | null {
  const root = path.join(repoCacheDir(env, repo), 'snapshots', commit);
  if (!fs.existsSync(root)) return null;
  const files: HubFile[] = [];
  const walk = (rel: string) => {
    for (const d of fs.readdirSync(path.join(root, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${d.name}` : d.name;
      const abs = path.join(root, r);
      if (d.isDirectory()) {
        walk(r);
        continue;
      }
      let st: fs.Stats;
      try {
        st = fs.statSync(abs);
      } catch {
        continue; // a dangling link: the blob was removed
      }
      if (st.isDirectory()) {
        walk(r);
        continue;
      }
      const blob = d.isSymbolicLink() ? path.basename(fs.readlinkSync(abs)) : '';
      if (/^[0-9a-f]{64}$/.test(blob)) files.push({ path: r, size: st.size, oid: '', sha256: blob });
      else files.push({ path: r, size: st.size, oid: /^[0-9a-f]{40}$/.test(blob) ? blob : '' });
    }
  };
  walk('');
  return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
