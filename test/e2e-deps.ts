// Where the end-to-end tests find their client libraries: the on-demand install in test/e2e/
// (`npm --prefix test/e2e ci`; kept out of the root install, which must stay small), located as
// bench/vs-llama-cpp.ts locates node-llama-cpp. Absent: the test says so in one line and skips.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { ROOT } from './helpers.js';

export const E2E_DIR = path.join(ROOT, 'test', 'e2e');
export const E2E_INSTALL = 'npm --prefix test/e2e ci';

/** The package's entry file, or null when it is not installed in test/e2e (nor next to the repo). */
export function resolveE2e(name: string): string | null {
  for (const from of [path.join(E2E_DIR, 'package.json'), import.meta.url]) {
    try {
      return createRequire(from).resolve(name);
    } catch {
      // not installed there
    }
  }
  return null;
}

export async function importE2e<T>(name: string): Promise<T | null> {
  const file = resolveE2e(name);
  return file ? ((await import(pathToFileURL(file).href)) as T) : null;
}

/** Debian's `chromium` (or another Chromium / Chrome on PATH, or $CHROMIUM), located at run time. */
export function findChromium(): string | null {
  const env = process.env.CHROMIUM;
  if (env && fs.existsSync(env)) return env;
  const names = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'];
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    for (const n of names) {
      const p = path.join(dir, n);
      if (fs.existsSync(p)) return p;
    }
  }
  return null;
}
