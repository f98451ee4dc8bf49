// Every "§" citation in src/ (its code, the chat page and its READMEs alike) names a markdown file
// of this repository, and that file has the cited section as a heading: the spec the code cites
// must be readable from a clone (docs/spec/), not from a sibling directory. A § takes the file
// named nearest before it on the same line.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ROOT } from './helpers.js';

/** The text files below `dir`: TypeScript, the chat page's JavaScript, HTML and CSS, markdown. */
function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.isDirectory()) return sourceFiles(p);
    return /\.(ts|js|md|html|css)$/.test(d.name) ? [p] : [];
  });
}

/** Section numbers a markdown file has as headings ("## 1.7.4 Title", "## 3. Title"). */
function headings(file: string): Set<string> {
  const out = new Set<string>();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s/.exec(line);
    if (m) out.add(m[1]);
  }
  return out;
}

// A markdown path, or a § with an optional range end ("§2-§4", "§6.5-6.6").
const TOKEN = /([\w./-]+\.md)|§\s*(\d+(?:\.\d+)*)(?:\s*[-–]\s*§?(\d+(?:\.\d+)*))?/g;

/** Problems with the § citations of one source line; [] when all resolve. */
function checkLine(where: string, line: string, cache: Map<string, Set<string> | null>): string[] {
  const problems: string[] = [];
  let doc: string | null = null;
  for (const m of line.matchAll(TOKEN)) {
    if (m[1]) {
      doc = m[1];
      continue;
    }
    if (doc === null) {
      problems.push(`${where}: §${m[2]} names no file`);
      continue;
    }
    if (!cache.has(doc)) {
      const abs = path.join(ROOT, doc);
      cache.set(doc, !doc.startsWith('..') && fs.existsSync(abs) ? headings(abs) : null);
    }
    const secs = cache.get(doc);
    if (!secs) {
      problems.push(`${where}: ${doc} is not a file of the repository`);
      continue;
    }
    for (const s of [m[2], m[3]]) if (s !== undefined && !secs.has(s)) problems.push(`${where}: ${doc} has no section ${s}`);
  }
  return problems;
}

test('every § citation in src/ resolves to a section of a repository file', () => {
  const cache = new Map<string, Set<string> | null>();
  const problems: string[] = [];
  let citations = 0;
  for (const file of sourceFiles(path.join(ROOT, 'src'))) {
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, i) => {
      if (!line.includes('§')) return;
      citations += (line.match(/§/g) ?? []).length;
      problems.push(...checkLine(`${path.relative(ROOT, file)}:${i + 1}`, line, cache));
    });
  }
  assert.deepEqual(problems, []);
  assert.ok(citations > 50, `only ${citations} citations found: is the scan looking at src/?`);
});

test('a citation to a missing file, a missing section or no file at all is caught', () => {
  const cache = new Map<string, Set<string> | null>();
  assert.deepEqual(checkLine('x', '// (docs/spec/K3.md §6.3, §6.5)', cache), []);
  assert.deepEqual(checkLine('x', '// (docs/spec/ARCHITECTURE.md §2-§4, §6.5-6.6)', cache), []);
  assert.equal(checkLine('x', '// (§1.5)', cache).length, 1);
  assert.equal(checkLine('x', '// (../shared/spec/K3.md §1)', cache).length, 1);
  assert.equal(checkLine('x', '// (docs/spec/K3.md §99.9)', cache).length, 1);
});
