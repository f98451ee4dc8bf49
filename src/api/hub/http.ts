// HTTP to the Hub with Node's fetch. Redirects are followed by hand so that HF_TOKEN goes only to
// the endpoint's own host (a CDN's signed URL needs none, and must not see it); failures a retry
// can mend (dropped connections, 5xx, 429, a stalled body) are `Transient`, the rest are one line.

import { setTimeout as sleep } from 'node:timers/promises';
import { UserError } from '../../util/errors.js';
import type { HubEnv } from './env.js';

/** A failure worth retrying after a pause. */
export class Transient extends Error {
  override name = 'Transient';
}

/** Retries did not mend it: the Hub (or its CDN) cannot be reached now. */
export class Unreachable extends UserError {
  constructor(message: string) {
    super(message, 1);
    this.name = 'Unreachable';
  }
}

export interface RetryPolicy {
  /** Consecutive failures without progress before giving up (default 10). */
  retries: number;
  /** First pause; doubled per failure, at most 30 s (default 250 ms). */
  backoffMs: number;
  /** A body that sends nothing for this long counts as dropped (default 60 s). */
  stallMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 10, backoffMs: 250, stallMs: 60_000 };

export function backoff(policy: RetryPolicy, failures: number): number {
  return Math.min(30_000, policy.backoffMs * 2 ** Math.max(0, failures - 1));
}

const USER_AGENT = 'kimi-k3-ts/pull';

/** What a network error says, short: "ECONNRESET", "other side closed". */
export function describe(e: unknown): string {
  const err = e as { message?: string; code?: string; cause?: { message?: string; code?: string } };
  return err.cause?.code ?? err.cause?.message ?? err.code ?? err.message ?? String(e);
}

/** GET `url` (redirects followed, the token sent only to the endpoint's origin). Status >= 500,
 *  429, 408 and network errors throw Transient; any other answer is returned as is. */
export async function hubGet(env: HubEnv, url: string | URL, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
  let u = new URL(url);
  for (let hop = 0; hop < 10; hop++) {
    const h: Record<string, string> = { 'user-agent': USER_AGENT, ...headers };
    if (env.token && u.origin === env.endpoint.origin) h.authorization = `Bearer ${env.token}`;
    let res: Response;
    try {
      res = await fetch(u, { headers: h, redirect: 'manual', signal });
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      throw new Transient(`${u.host}: ${describe(e)}`);
    }
    const location = res.headers.get('location');
    if (res.status >= 300 && res.status < 400 && location) {
      await res.body?.cancel();
      u = new URL(location, u);
      continue;
    }
    if (res.status >= 500 || res.status === 429 || res.status === 408) {
      await res.body?.cancel();
      throw new Transient(`${u.host}: HTTP ${res.status}`);
    }
    return res;
  }
  throw new UserError(`${url}: more than 10 redirects`, 1);
}

/** One line for a 4xx answer about `what` (the repository, a revision or a file). */
export async function refusal(res: Response, what: string, env: HubEnv): Promise<UserError> {
  const code = res.headers.get('x-error-code');
  let msg = '';
  try {
    const body = (await res.json()) as { error?: string };
    msg = typeof body.error === 'string' ? body.error : '';
  } catch {
    // not JSON: the status says enough
  }
  const hint = env.token ? 'HF_TOKEN does not grant access' : 'gated or private: set HF_TOKEN';
  if (res.status === 401 || res.status === 403 || code === 'GatedRepo') return new UserError(`pull: ${what}: access denied (HTTP ${res.status}; ${hint})`);
  if (code === 'RevisionNotFound') return new UserError(`pull: ${what}: no such revision`);
  if (code === 'EntryNotFound') return new UserError(`pull: ${what}: not in the repository at this revision`);
  if (res.status === 404) return new UserError(`pull: ${what}: not found on ${env.endpoint.origin} (no such repository or revision, or ${hint})`);
  return new UserError(`pull: ${what}: HTTP ${res.status}${msg ? `: ${msg}` : ''}`, 1);
}

/** Run `attempt` until it succeeds, pausing with backoff after each Transient; gives up after
 *  `policy.retries` consecutive failures with one line naming `what`. */
export async function retrying<T>(what: string, policy: RetryPolicy, attempt: () => Promise<T>, opts: { signal?: AbortSignal; onRetry?: (msg: string) => void } = {}): Promise<T> {
  for (let failures = 1; ; failures++) {
    try {
      return await attempt();
    } catch (e) {
      if (!(e instanceof Transient) || opts.signal?.aborted) throw opts.signal?.aborted ? opts.signal.reason : e;
      if (failures > policy.retries) throw new Unreachable(`pull: ${what}: gave up after ${policy.retries} retries (${e.message})`);
      const wait = backoff(policy, failures);
      opts.onRetry?.(`${what}: ${e.message}; retry ${failures} in ${(wait / 1000).toFixed(1)} s`);
      await sleep(wait, undefined, { signal: opts.signal }).catch(() => {});
    }
  }
}
