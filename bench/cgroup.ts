// A memory cgroup for a benchmark's child process (v2 memory.max, else v1 memory.limit_in_bytes),
// so that neither the page cache nor anything else holds more of a checkpoint than the cap. Needs
// root; where none can be made the caller says so and runs uncapped.

import * as fs from 'node:fs';
import * as path from 'node:path';

export interface MemoryCap {
  kind: 'v1' | 'v2';
  /** The command, wrapped so that it starts inside the cgroup. */
  wrap: (cmd: string[]) => string[];
  /** The most memory the cgroup saw (page cache included); removes the cgroup. */
  finish: () => number;
}

function made(dir: string, files: Record<string, string>): boolean {
  try {
    fs.mkdirSync(dir);
    for (const [f, v] of Object.entries(files)) fs.writeFileSync(path.join(dir, f), v);
    return true;
  } catch {
    try {
      fs.rmdirSync(dir);
    } catch {
      /* never made */
    }
    return false;
  }
}

function number(file: string): number {
  try {
    return Number(fs.readFileSync(file, 'utf8').trim());
  } catch {
    return 0;
  }
}

function removed(dir: string, peak: number): number {
  try {
    fs.rmdirSync(dir);
  } catch {
    /* best effort: a process may still be leaving */
  }
  return peak;
}

/** A cgroup limited to `limit` bytes, without swap where that is accounted; null where none can be made. */
export function memoryCap(limit: number, tag: string): MemoryCap | null {
  const root = '/sys/fs/cgroup';
  const name = `k3bench-${process.pid}-${tag}`;
  const wrapIn = (dir: string) => (cmd: string[]) => ['/bin/sh', '-c', `echo $$ > ${dir}/cgroup.procs && exec "$0" "$@"`, ...cmd];
  const controllers = path.join(root, 'cgroup.controllers');
  if (fs.existsSync(controllers) && fs.readFileSync(controllers, 'utf8').includes('memory')) {
    const dir = path.join(root, name);
    if (made(dir, { 'memory.max': String(limit), 'memory.swap.max': '0' }) || made(dir, { 'memory.max': String(limit) })) {
      return { kind: 'v2', wrap: wrapIn(dir), finish: () => removed(dir, number(path.join(dir, 'memory.peak'))) };
    }
  }
  const dir = path.join(root, 'memory', name);
  if (fs.existsSync(path.dirname(dir)) && made(dir, { 'memory.limit_in_bytes': String(limit) })) {
    try {
      fs.writeFileSync(path.join(dir, 'memory.memsw.limit_in_bytes'), String(limit));
    } catch {
      /* swap accounting off */
    }
    return { kind: 'v1', wrap: wrapIn(dir), finish: () => removed(dir, number(path.join(dir, 'memory.max_usage_in_bytes'))) };
  }
  return null;
}
