// GET / and GET /assets/NAME: the chat page. Its files are static (src/server/page/: HTML, CSS and
// plain browser JavaScript, no build step) plus the browser builds of marked and DOMPurify from
// their installed packages; all are read once at server start, so the page needs no network.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { ServerResponse } from 'node:http';

/** The page's folder, found from this file (dist/src/server/ -> the package root). */
export const PAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'src', 'server', 'page');

const TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.css': 'text/css; charset=utf-8', '.js': 'text/javascript; charset=utf-8' };

// Scripts only from this server and no inline handlers: markup a model writes cannot run code even
// past the sanitizer. Images only from here too, so a reply cannot leak the chat through an image URL.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

interface Asset {
  type: string;
  body: Buffer;
}

export type PageAssets = ReadonlyMap<string, Asset>;

/** URL path -> file, for the page's own files and the two libraries. */
function assetFiles(): [string, string][] {
  const req = createRequire(import.meta.url);
  const own = fs.readdirSync(PAGE_DIR).filter((f) => f !== 'index.html' && path.extname(f) in TYPES);
  return [
    ['/', path.join(PAGE_DIR, 'index.html')],
    ...own.map((f): [string, string] => [`/assets/${f}`, path.join(PAGE_DIR, f)]),
    ['/assets/marked.js', path.join(path.dirname(req.resolve('marked/package.json')), 'lib', 'marked.umd.js')],
    ['/assets/purify.js', req.resolve('dompurify/purify.min.js')],
  ];
}

export function loadPage(): PageAssets {
  return new Map(assetFiles().map(([url, file]) => [url, { type: TYPES[path.extname(file)]!, body: stripSourceMap(fs.readFileSync(file)) }]));
}

/** Answer `pathname` from the page's files; false when it is none of them. */
export function servePage(assets: PageAssets, pathname: string, res: ServerResponse): boolean {
  const a = assets.get(pathname);
  if (!a) return false;
  res.writeHead(200, { 'content-type': a.type, 'content-length': a.body.length, 'cache-control': 'no-cache', 'content-security-policy': CSP, 'x-content-type-options': 'nosniff' });
  res.end(a.body);
  return true;
}

// The packages' builds name a .map file that is not served; the browser would ask for it in vain.
function stripSourceMap(b: Buffer): Buffer {
  const s = b.toString('utf8');
  const i = s.lastIndexOf('//# sourceMappingURL=');
  return i >= 0 ? Buffer.from(s.slice(0, i), 'utf8') : b;
}
