// The import graph of src/: no cycles (static, type-only and dynamic imports all count), and no
// orphan files (every file but the entry points is imported by another). The layer order itself is
// an ESLint rule (eslint.config.js, no-restricted-imports). The graph comes from TypeScript's own
// pre-processor, so it sees exactly the imports the compiler sees.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { ROOT } from './helpers.js';

const SRC = path.join(ROOT, 'src');
const ENTRY_POINTS = ['main.ts', 'api/index.ts']; // the binary and the library (package.json bin, exports)

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.isDirectory()) return sourceFiles(p);
    return d.name.endsWith('.ts') && !d.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** file (relative to src/) -> the src files it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const info = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
    const deps: string[] = [];
    for (const { fileName } of info.importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = path.resolve(path.dirname(file), fileName.replace(/\.js$/, '.ts'));
      assert.ok(fs.existsSync(target), `${path.relative(ROOT, file)} imports ${fileName}, which does not exist`);
      deps.push(path.relative(SRC, target));
    }
    graph.set(path.relative(SRC, file), deps);
  }
  return graph;
}

/** The first import cycle found (depth-first, files in sorted order), as a path, or null. */
function findCycle(graph: Map<string, string[]>): string[] | null {
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (f: string): string[] | null => {
    state.set(f, 'open');
    stack.push(f);
    for (const d of graph.get(f) ?? []) {
      if (state.get(d) === 'open') return [...stack.slice(stack.indexOf(d)), d];
      if (!state.has(d)) {
        const c = visit(d);
        if (c) return c;
      }
    }
    stack.pop();
    state.set(f, 'done');
    return null;
  };
  for (const f of [...graph.keys()].sort()) {
    if (state.has(f)) continue;
    const c = visit(f);
    if (c) return c;
  }
  return null;
}

test('src/ has no import cycles', () => {
  const graph = importGraph();
  assert.ok(graph.size > 50, `expected the whole source tree, found ${graph.size} files`);
  const cycle = findCycle(graph);
  assert.equal(cycle, null, `import cycle: ${cycle?.join(' -> ')}`);
});

test('src/ has no orphan files: each is an entry point or imported by another', () => {
  const graph = importGraph();
  const imported = new Set([...graph.values()].flat());
  for (const e of ENTRY_POINTS) assert.ok(graph.has(e), `entry point src/${e} is missing`);
  const orphans = [...graph.keys()].filter((f) => !imported.has(f) && !ENTRY_POINTS.includes(f)).sort();
  assert.deepEqual(orphans, [], 'files nothing imports');
});

test('the faces go through the library: src/cli imports only server, api, util and itself; src/server only api, util and itself', () => {
  const MAY: Record<string, string[]> = { cli: ['cli', 'server', 'api', 'util'], server: ['server', 'api', 'util'] };
  const wrong = [...importGraph()].flatMap(([f, deps]) => {
    const may = MAY[f.split(path.sep)[0]!];
    return may ? deps.filter((d) => !may.includes(d.split(path.sep)[0]!)).map((d) => `${f} -> ${d}`) : [];
  });
  assert.deepEqual(wrong, [], 'a face imports below the library: name what it needs in src/api');
});

test('the import scan sees type-only, dynamic and re-export imports; the cycle search finds a loop', () => {
  const info = ts.preProcessFile("import type { A } from './a.js';\nconst m = await import('./b.js');\nexport * from './c.js';\n", true, true);
  assert.deepEqual(info.importedFiles.map((f) => f.fileName), ['./a.js', './b.js', './c.js']);
  const loop = new Map([['a.ts', ['b.ts']], ['b.ts', ['c.ts']], ['c.ts', ['a.ts']], ['d.ts', ['a.ts']]]);
  assert.deepEqual(findCycle(loop), ['a.ts', 'b.ts', 'c.ts', 'a.ts']);
  assert.equal(findCycle(new Map([['a.ts', ['b.ts']], ['b.ts', []]])), null);
});
