// Import rules for src/ (run by `npm test` through `npm run lint`). Layers, top to bottom; a
// folder may import its own files and any layer below it, never one above:
//   cli -> synth, generate -> tokenizer, model -> store -> checkpoint -> kernels -> formats -> util
// Outside src/kernels, the kernels are reached only through kernels/dispatch.ts (the model's
// Compute object: WebAssembly or the TypeScript reference) and kernels/fast.ts' option types.
const LAYERS = ['cli', 'synth', 'generate', 'tokenizer', 'model', 'store', 'checkpoint', 'kernels', 'formats', 'util'];

// synth and generate sit side by side, as do tokenizer and model: neither of a pair imports the other.
const PEERS = { synth: ['generate'], generate: ['synth'], tokenizer: ['model'], model: ['tokenizer'] };

const layerRules = LAYERS.map((layer, i) => {
  const above = [...LAYERS.slice(0, i), ...(PEERS[layer] ?? [])];
  if (above.length === 0) return null;
  return {
    name: `layer-${layer}`,
    comment: `src/${layer} may import only layers below it (${LAYERS.slice(i + 1).filter((l) => !(PEERS[layer] ?? []).includes(l)).join(', ') || 'none'})`,
    severity: 'error',
    from: { path: `^src/${layer}/` },
    to: { path: `^src/(${above.join('|')})/` },
  };
}).filter(Boolean);

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'no import cycles, inside a layer or across',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    ...layerRules,
    {
      name: 'kernels-through-dispatch',
      comment: 'outside src/kernels, kernels are reached through kernels/dispatch.ts (and the option types of kernels/fast.ts)',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/kernels/' },
      to: { path: '^src/kernels/', pathNot: '^src/kernels/(dispatch|fast)\\.ts$' },
    },
    {
      name: 'no-orphans',
      comment: 'every source file is used by something',
      severity: 'error',
      from: { orphan: true, path: '^src/', pathNot: '^src/cli/main\\.ts$|\\.d\\.ts$' },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
  },
};
