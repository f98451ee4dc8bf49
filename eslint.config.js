// Lint and format rules, run by `npm test` (through `npm run lint`); `npm run format` applies the
// fixable ones. ESLint's recommended rules on TypeScript sources (parsed by typescript-eslint's
// parser, whose scope analysis knows type-only references), and @stylistic's formatting rules set
// to the code's style: two-space indent, single quotes, semicolons, trailing commas in multi-line
// literals, lines up to 250 characters. (typescript-eslint's own rule set and Prettier are left
// out to keep `npm ci` small; tsc --strict covers the type-level checks.)
import js from '@eslint/js';
import stylistic from '@stylistic/eslint-plugin';
import tsParser from '@typescript-eslint/parser';

// Layers of src/, top to bottom: a folder imports its own files and layers below it, never one
// above (synth and generate sit side by side, as do tokenizer and model). The graph is the seam
// between the model and the kernels: the model calls graph/compute.ts and never a kernel, and only
// the graph reaches into the kernels' parts; the store, checkpoint and api use kernels/fast.ts.
// The faces (cli, server) go through the library: they import api and util only, so what a
// command needs below the library is named in src/api; the binary (src/main.ts) hands the CLI the
// server `k3 serve` starts.
// Import cycles and orphan files are checked by test/imports.test.ts.
const LAYERS = ['cli', 'server', 'api', 'synth', 'generate', 'tokenizer', 'model', 'graph', 'store', 'checkpoint', 'kernels', 'formats', 'util'];
const PEERS = { synth: ['generate'], generate: ['synth'], tokenizer: ['model'], model: ['tokenizer'] };
const ABOVE_GRAPH = ['synth', 'generate', 'tokenizer', 'model'];
const FACES = { cli: ['api', 'util'], server: ['api', 'util'] };
const layerRules = LAYERS.map((layer, i) => {
  const above = FACES[layer] ? LAYERS.filter((l) => l !== layer && !FACES[layer].includes(l)) : [...LAYERS.slice(0, i), ...(PEERS[layer] ?? [])];
  const below = LAYERS.slice(i + 1).filter((l) => !above.includes(l));
  const patterns = [];
  if (above.length > 0) {
    const may = FACES[layer] ? `src/${layer} is a face and may import only ${below.join(', ')} (name what it needs in src/api)` : `src/${layer} may import only layers below it (${below.join(', ') || 'none'})`;
    patterns.push({ regex: `^(\\.\\./)+(${above.join('|')})/`, message: `${may}: see the layer list in eslint.config.js.` });
  }
  if (ABOVE_GRAPH.includes(layer)) {
    patterns.push({ regex: '^(\\.\\./)+kernels/', message: `src/${layer} reaches the kernels through src/graph (graph/compute.ts), never directly.` });
  } else if (layer !== 'kernels' && layer !== 'graph') {
    patterns.push({ regex: '^(\\.\\./)+kernels/(?!fast\\.js$)', message: 'outside src/kernels and src/graph, reach the kernels through kernels/fast.ts.' });
  }
  return { files: [`src/${layer}/**/*.ts`], rules: { 'no-restricted-imports': ['error', { patterns }] } };
});

export default [
  { ignores: ['dist/', 'node_modules/', 'bench/llama/', 'test/fixtures/', 'models/'] },
  {
    files: ['**/*.ts', 'src/server/page/*.js'], // and the chat page's browser scripts
    languageOptions: { parser: tsParser, ecmaVersion: 2022, sourceType: 'module' },
    plugins: { '@stylistic': stylistic },
    rules: {
      ...js.configs.recommended.rules,
      // tsc checks names and redeclarations (overloads, type/value pairs) better than ESLint can.
      'no-undef': 'off',
      'no-redeclare': 'off',
      'no-dupe-class-members': 'off',
      'no-unused-vars': ['error', { args: 'none', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true }],
      'no-constant-condition': ['error', { checkLoops: false }],
      'prefer-const': 'error',
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      '@stylistic/indent': ['error', 2, { SwitchCase: 1, flatTernaryExpressions: true, offsetTernaryExpressions: true, ignoredNodes: ['ConditionalExpression *'] }],
      '@stylistic/quotes': ['error', 'single', { avoidEscape: true }],
      '@stylistic/semi': ['error', 'always'],
      '@stylistic/comma-dangle': ['error', 'always-multiline'],
      '@stylistic/max-len': ['error', { code: 250, ignoreComments: true, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true }],
      '@stylistic/no-trailing-spaces': 'error',
      '@stylistic/eol-last': 'error',
      '@stylistic/no-multiple-empty-lines': ['error', { max: 1, maxEOF: 0 }],
      '@stylistic/space-before-blocks': 'error',
      '@stylistic/keyword-spacing': 'error',
      '@stylistic/space-infix-ops': 'error',
      '@stylistic/comma-spacing': 'error',
      '@stylistic/brace-style': ['error', '1tbs', { allowSingleLine: true }],
      '@stylistic/arrow-parens': ['error', 'always'],
      '@stylistic/member-delimiter-style': 'error',
      '@stylistic/type-annotation-spacing': 'error',
    },
  },
  ...layerRules,
];
