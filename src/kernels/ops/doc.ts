// docs/KERNELS.md, generated from the registry (`npm run kernels-doc` rewrites it; the registry
// test fails when the committed file differs), so the calling rules cannot drift from the code.

import { OPS, RANGE_AT, OP_WORDS, opCode } from './registry.js';
import type { ArgDecl, OpDef } from './op.js';

const HEAD = `# Kernel ops

Generated from \`src/kernels/ops/registry.ts\` by \`npm run kernels-doc\`; do not edit by hand.

Every op of the kernel pool is one file under \`src/kernels/ops/\`: its arguments, how threads split
it, what must lie in kernel memory, the TypeScript reference it reproduces byte for byte, and its
WebAssembly emitter. An op's code is its place in the registry; in the control block it takes
${OP_WORDS} i32 words: the code, its arguments in the order below, then its range [a, b), which the
threads claim in pieces (src/kernels/pool.ts). Pointers are byte offsets into the kernel memory.

Adding an op: write \`src/kernels/ops/<op>.ts\` (declaration, reference, emitter) and add it to
\`OPS\` in \`registry.ts\`; \`Chain.op(def, args)\` runs it, \`test/kernels/ops.test.ts\` compares it
with its reference, and this file lists it after \`npm run kernels-doc\`.
`;

function argText(a: ArgDecl): string {
  const what = a.kind === 'int' ? 'i32'
    : a.kind === 'bytes' ? `byte stride (${a.value})`
    : a.kind === 'table' ? `i32 offsets [${a.count}], each of f32 [${a.shape}]`
    : `${a.kind} [${a.shape}]`;
  return `| \`${a.name}\` | ${what} | ${a.io ?? ''} | ${a.doc ?? ''} |`;
}

function opText(d: OpDef): string {
  return [
    `## ${d.name}`,
    '',
    `${d.summary}. Code ${opCode(d)}; range in words ${RANGE_AT[opCode(d)]}, ${RANGE_AT[opCode(d)]! + 1}.`,
    '',
    '| argument | kind | use | note |',
    '| --- | --- | --- | --- |',
    ...d.args.map(argText),
    '',
    `- Split: ${d.split.unit}, [0, ${d.split.range}).`,
    `- Placement: ${d.place}.`,
    `- Reference: ${d.ref ? `${d.ref.name}; test/kernels/ops.test.ts draws and compares it` : d.refNote}.`,
    '',
  ].join('\n');
}

/** The text of docs/KERNELS.md. */
export function kernelsDoc(): string {
  return [HEAD, ...OPS.map(opText)].join('\n');
}
