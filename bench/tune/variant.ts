// A build of the kernels with some tuned constants set otherwise, loaded beside the real one so
// that a tuning table's variants are measured in one process, taking turns. The constants are
// compile-time values of the Wasm generator, so a variant is a copy of dist/src/ (as `npm run
// build` left it) in a temporary folder with the constants' declarations rewritten, imported from
// there: its own module graph, its own generated module and its own worker threads. The engine
// itself is never changed; each variant's products are checked to give the real build's bytes.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createHash } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Fast from '../../src/kernels/fast.js';

/** file under dist/src (compiled .js, e.g. 'kernels/wasm/mm1.js') -> constant name -> new value. */
export type Overrides = Record<string, Record<string, unknown>>;

const DIST_SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/** Rewrite `const NAME = ...;` (exported or not, on one line) to the given value. */
export function setConst(js: string, name: string, value: unknown): string {
  const re = new RegExp(`^((?:export )?const ${name} = ).*;$`, 'm');
  const hits = js.split('\n').filter((l) => re.test(l)).length;
  if (hits !== 1) throw new Error(`tune: 'const ${name} = ...;' found ${hits} times, need one line`);
  return js.replace(re, (_m, head: string) => `${head}${JSON.stringify(value)};`);
}

/** The kernels module of the real build (no overrides) or of a patched copy. */
export async function loadKernels(over: Overrides = {}): Promise<typeof Fast> {
  if (Object.keys(over).length === 0) return import(pathToFileURL(path.join(DIST_SRC, 'kernels/fast.js')).href) as Promise<typeof Fast>;
  const key = createHash('sha256').update(JSON.stringify(over)).digest('hex').slice(0, 12);
  const root = path.join(os.tmpdir(), `k3-tune-${process.pid}-${key}`);
  if (!fs.existsSync(root)) {
    fs.cpSync(DIST_SRC, root, { recursive: true, filter: (p) => !p.endsWith('.map') && !p.endsWith('.d.ts') });
    for (const [file, consts] of Object.entries(over)) {
      const f = path.join(root, file);
      let js = fs.readFileSync(f, 'utf8');
      for (const [name, value] of Object.entries(consts)) js = setConst(js, name, value);
      fs.writeFileSync(f, js);
    }
    process.once('exit', () => fs.rmSync(root, { recursive: true, force: true }));
  }
  return import(pathToFileURL(path.join(root, 'kernels/fast.js')).href) as Promise<typeof Fast>;
}
