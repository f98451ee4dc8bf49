// Writers put their output at `<out>.tmp-<pid>` and rename it when complete. A process killed
// outright (SIGKILL, power loss) cannot clean up after itself, so the next writer of the same
// output removes what such runs left: every `<out>.tmp-<pid>` whose process is gone.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from './errors.js';

/** The temporary name a writer of `out` uses in this process. */
export function tmpPath(out: string): string {
  return `${out}.tmp-${process.pid}`;
}

/** Remove `<out>.tmp-<pid>` files or directories whose process no longer runs; returns their names. */
export function removeStaleTmp(out: string): string[] {
  const abs = path.resolve(out);
  const parent = path.dirname(abs);
  const base = path.basename(abs);
  let names: string[];
  try {
    names = fs.readdirSync(parent);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const n of names) {
    const m = /^(.*)\.tmp-(\d+)$/.exec(n);
    if (!m || m[1] !== base) continue;
    const pid = Number(m[2]);
    if (pid === process.pid) continue;
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch (e) {
      alive = (e as NodeJS.ErrnoException).code !== 'ESRCH';
    }
    if (alive) continue;
    fs.rmSync(path.join(parent, n), { recursive: true, force: true });
    removed.push(n);
  }
  return removed;
}

/**
 * Write a file so that it only ever appears complete: `fill` writes `<file>.tmp-<pid>`, which is
 * flushed to disk, then renamed (a stale temporary from a killed run is removed first). Failure is
 * one UserError, "<file>: cannot <what> (<code>)"; a UserError from `fill` passes through.
 */
export function writeAtomic(file: string, fill: (fd: number) => void, what = 'write'): void {
  const dir = path.dirname(path.resolve(file));
  if (!fs.existsSync(dir)) throw new UserError(`${file}: directory ${dir} does not exist`);
  removeStaleTmp(file);
  const tmp = tmpPath(file);
  try {
    const fd = fs.openSync(tmp, 'w');
    try {
      fill(fd);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    if (e instanceof UserError) throw e;
    throw new UserError(`${file}: cannot ${what} (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 1);
  }
}

/** writeAtomic of one buffer or string. */
export function writeFileAtomic(file: string, data: Uint8Array | string): void {
  writeAtomic(file, (fd) => fs.writeFileSync(fd, data));
}
