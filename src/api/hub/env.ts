// Where the Hub is and who we are to it, read as huggingface_hub reads it: HF_ENDPOINT (default
// https://huggingface.co), HF_TOKEN (else HF_TOKEN_PATH or HF_HOME/token), HF_HUB_OFFLINE, and
// the cache folder (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub).

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { UserError } from '../../util/errors.js';

export interface HubEnv {
  endpoint: URL;
  token?: string;
  offline: boolean;
  /** Why there is no network: 'HF_HUB_OFFLINE is set', or the error that made the pull fall back. */
  offlineWhy: string;
  cacheDir: string;
}

/** huggingface_hub's truthy spellings of a boolean variable. */
function isTrue(v: string | undefined): boolean {
  return v !== undefined && ['1', 'on', 'yes', 'true'].includes(v.trim().toLowerCase());
}

export function hubEnv(env: NodeJS.ProcessEnv = process.env): HubEnv {
  const raw = (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, '');
  let endpoint: URL;
  try {
    endpoint = new URL(raw);
  } catch {
    throw new UserError(`HF_ENDPOINT: not a URL: ${JSON.stringify(raw)}`);
  }
  if (endpoint.protocol !== 'https:' && endpoint.protocol !== 'http:') throw new UserError(`HF_ENDPOINT: must be an http(s) URL, got ${JSON.stringify(raw)}`);
  const home = env.HF_HOME || path.join(env.XDG_CACHE_HOME || path.join(env.HOME || os.homedir(), '.cache'), 'huggingface');
  // As huggingface_hub: HF_TOKEN, else the file `huggingface-cli login` writes.
  let token = env.HF_TOKEN?.trim() || undefined;
  if (token === undefined) {
    try {
      token = fs.readFileSync(env.HF_TOKEN_PATH || path.join(home, 'token'), 'utf8').trim() || undefined;
    } catch {
      // no saved token: public repositories only
    }
  }
  return { endpoint, token, offline: isTrue(env.HF_HUB_OFFLINE), offlineWhy: 'HF_HUB_OFFLINE is set', cacheDir: env.HF_HUB_CACHE || path.join(home, 'hub') };
}

export interface RepoSpec {
  /** owner/name */
  repo: string;
  /** A branch, tag or commit; 'main' when not given. */
  revision: string;
}

/** `owner/name[@revision]`; also accepts the repo's Hub URL (https://huggingface.co/owner/name). */
export function parseRepoSpec(spec: string): RepoSpec {
  const s = spec.replace(/^https?:\/\/(huggingface\.co|hf\.co)\//, '').replace(/\/+$/, '');
  const at = s.indexOf('@');
  const repo = at < 0 ? s : s.slice(0, at);
  const revision = at < 0 ? 'main' : s.slice(at + 1);
  if (!/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(repo) || repo.includes('..')) throw new UserError(`pull: ${JSON.stringify(spec)} is not a model repository (owner/name[@revision])`);
  if (revision === '') throw new UserError(`pull: ${JSON.stringify(spec)}: empty revision after @`);
  return { repo, revision };
}

/** Whether a revision is a full commit sha (then it never moves). */
export function isCommit(rev: string): boolean {
  return /^[0-9a-f]{40}$/.test(rev);
}
