// The engine's reference forward of the drafter (src/model/dspark-ref.ts draftBlock) on a few anchors
// of the dumped data, for check.py to compare with the numpy trainer's forward (they must agree to
// float32 rounding, or the trainer trains some other drafter than the engine runs).
//
//   node tools/train-dspark/check.mjs --drafter DIR [--data models/train-dspark-data] [--out scores.json]

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT } from '../train-demo/make-data.mjs';
import { DIST } from './dump.mjs';

/** A C-order .npy file's values (f4 or i4) and shape. */
export function readNpy(file) {
  const b = fs.readFileSync(file);
  const n = b.readUInt16LE(8);
  const h = b.toString('latin1', 10, 10 + n);
  const shape = h.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const body = b.buffer.slice(b.byteOffset + 10 + n, b.byteOffset + b.length);
  return { data: h.includes('<f4') ? new Float32Array(body) : new Int32Array(body), shape };
}

const { values } = parseArgs({
  options: {
    drafter: { type: 'string' },
    data: { type: 'string', default: path.join(ROOT, 'models', 'train-dspark-data') },
    out: { type: 'string', default: '/dev/stdout' },
    seqs: { type: 'string', default: '0,1,2' },
  },
});
const { loadDrafter } = await import(path.join(DIST, 'checkpoint', 'drafter.js'));
const { tensorsF64 } = await import(path.join(DIST, 'checkpoint', 'tensor-f64.js'));
const { draftBlock, matvec } = await import(path.join(DIST, 'model', 'dspark-ref.js'));
const d = loadDrafter(values.drafter);
const cfg = d.config;
const w = tensorsF64(d.entries, 'drafter');
const taps = readNpy(path.join(values.data, 'taps.npy'));
const tokens = readNpy(path.join(values.data, 'tokens.npy')).data;
const seqs = readNpy(path.join(values.data, 'seqs.npy')).data;
const embed = readNpy(path.join(values.data, 'embed.npy')).data;
const head = Float64Array.from(readNpy(path.join(values.data, 'lm_head.npy')).data);
const H = cfg.hiddenSize;
const W = taps.shape[1];
const out = [];
for (const i of values.seqs.split(',').map(Number)) {
  const [off, P, L, toff] = seqs.slice(4 * i, 4 * i + 4);
  const a = P + 1; // an anchor a little into the generated part
  const context = Array.from({ length: a }, (_, p) => Float64Array.from(taps.data.subarray((toff + p) * W, (toff + p + 1) * W)));
  const r = draftBlock(cfg, w, {
    context,
    contextPositions: context.map((_, p) => p),
    anchor: tokens[off + a],
    anchorPosition: a,
    embed: (id) => Float64Array.from(embed.subarray(id * H, (id + 1) * H)),
    lmHead: (h) => matvec(head, cfg.draftVocabSize, H, h),
  });
  out.push({ seq: i, anchor: a, tokens: r.tokens, confidence: r.confidence, scores: r.scores.map((s) => [...s]) });
}
fs.writeFileSync(values.out, JSON.stringify(out) + '\n');
