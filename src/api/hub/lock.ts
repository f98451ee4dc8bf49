// One pull at a time per folder: `<DIR>/.k3-pull/lock` holds the pid of the pull running there.
// A lock whose process is gone (killed) is taken over.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../../util/errors.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** Take the lock of `workDir`; returns its release. */
export function lockFolder(workDir: string, dir: string): () => void {
  const file = path.join(workDir, 'lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      return () => fs.rmSync(file, { force: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new UserError(`pull: ${file}: cannot create (${(e as NodeJS.ErrnoException).code ?? String(e)})`, 1);
    }
    const pid = Number(fs.readFileSync(file, 'utf8').trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) throw new UserError(`pull: ${dir} is being pulled by process ${pid} (${file})`);
    fs.rmSync(file, { force: true });
  }
  throw new UserError(`pull: ${file}: cannot take the lock`, 1);
}
