// `<DIR>/.k3-pull.json`: what a pull put in its folder. The commit pinned (the sha the revision
// named), the Hub's listing at it, the files skipped and why, and every file moved into place with
// its blob id, size and mtime, so a rerun trusts those without hashing them again. Rewritten
// (atomically) after each file; `complete` is set once every file is in place.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../../util/errors.js';
import { writeFileAtomic } from '../../util/stale-tmp.js';
import type { HubFile } from './listing.js';
import type { Skipped } from './select.js';

export const RECORD_NAME = '.k3-pull.json';
/** Partial downloads (`*.part`) and the lock live here while a pull runs. */
export const WORK_DIR = '.k3-pull';

export interface PlacedFile {
  etag: string;
  size: number;
  mtime_ms: number;
}

export interface PullRecord {
  version: 1;
  repo: string;
  revision: string;
  commit: string;
  endpoint: string;
  complete: boolean;
  include: string[];
  exclude: string[];
  listing: HubFile[];
  skipped: Skipped[];
  files: Record<string, PlacedFile>;
}

export function readRecord(dir: string): PullRecord | null {
  const file = path.join(dir, RECORD_NAME);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
  let r: PullRecord;
  try {
    r = JSON.parse(text) as PullRecord;
  } catch {
    throw new UserError(`${file}: not valid JSON (remove it to pull afresh)`);
  }
  if (r.version !== 1 || typeof r.repo !== 'string' || typeof r.commit !== 'string' || !Array.isArray(r.listing) || typeof r.files !== 'object') {
    throw new UserError(`${file}: not a record this build writes (remove it to pull afresh)`);
  }
  return r;
}

export function writeRecord(dir: string, r: PullRecord): void {
  writeFileAtomic(path.join(dir, RECORD_NAME), `${JSON.stringify(r, null, 1)}\n`);
}
