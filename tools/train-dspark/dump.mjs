// Training data for the demo drafter (self-distillation): prompts drawn as in the demo's training
// (tools/train-demo/conversations.mjs, training pairs only, never the held-out ones), the demo K3's
// own greedy continuation of each, and K3's tapped states at the drafter's tapped layers for every
// position, all computed by the engine's own Model.forward with taps (so they are the states the
// engine hands the drafter at run time).
//
//   node tools/train-dspark/dump.mjs --config DIR [--model models-shipped/demo-k3-trained]
//        [--out models/train-dspark-data] [--n 2000] [--seed 11] [--max-gen 48]
//
// --config: a directory with the drafter's config.json (its taps, stream and RoPE are read from it).
// Writes to --out: taps.npy (f32 [positions, taps x hidden], every sequence's positions but its
// last, back to back), tokens.npy (int32, every sequence's ids back to back), seqs.npy (int32
// [sequences, 3]: first id's offset, prompt length, total length), tap_offsets (in seqs' 4th
// column: first tap row), embed.npy / lm_head.npy (K3's tables as f32), rope.json (the drafter's
// rotary frequencies and amplitude, from the engine's makeRope) and info.json.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { rawPrompt, rng, splitPairs } from '../train-demo/conversations.mjs';
import { ROOT, drawExamples, engine, renderExample } from '../train-demo/make-data.mjs';

export const DIST = path.join(ROOT, 'dist', 'src');
export const SHARES = { raw: 0.1, chat: 0.35, call: 0.2, tool: 0.25, other: 0.1 };

/** Write a C-order .npy file (version 1.0). */
export function writeNpy(file, typed, shape) {
  const descr = typed instanceof Float32Array ? '<f4' : typed instanceof Int32Array ? '<i4' : null;
  if (!descr) throw new Error('writeNpy: Float32Array or Int32Array only');
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const pre = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(pre);
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const fd = fs.openSync(file, 'w');
  fs.writeSync(fd, pre);
  fs.writeSync(fd, Buffer.from(header, 'latin1'));
  fs.writeSync(fd, Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength));
  fs.closeSync(fd);
}

/** Prompt ids of an example: raw sums as text, chats through the engine's K3 renderer. */
export function promptIds(eng, tok, ex) {
  return ex.kind === 'raw' ? tok.encode(rawPrompt(ex.a, ex.b)) : eng.encodeK3Segments(tok, renderExample(eng, ex).prompt);
}

/** Greedy continuation of `prompt` (argmax, the first maximum winning) up to eos or maxGen ids, with taps. */
export async function greedyWithTaps(model, prompt, eos, maxGen, taps) {
  const s = model.newState();
  const V = model.config.vocabSize;
  let logits = await model.forward(s, prompt, 'last', 64, taps);
  const out = [];
  for (;;) {
    let best = 0;
    for (let v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
    out.push(best);
    if (best === eos || out.length >= maxGen) break;
    logits = await model.forward(s, [best], 'last', 1, taps);
  }
  model.release(s);
  return out;
}

/** Taps for the drafter's layers and stream that keep, per position, the tapped states concatenated. */
export function tapCollector(cfg, D) {
  const rows = [];
  const W = cfg.taps.length * D;
  const take = (pos, T, states) => {
    for (let t = 0; t < T; t++) {
      const row = new Float32Array(W);
      states.forEach((st, i) => row.set(st.subarray(t * D, (t + 1) * D), i * D));
      rows[pos + t] = row;
    }
  };
  return { taps: { layers: cfg.taps, stream: cfg.stream, take }, rows };
}

async function main() {
  const { values } = parseArgs({
    options: {
      config: { type: 'string' },
      model: { type: 'string', default: path.join(ROOT, 'models-shipped', 'demo-k3-trained') },
      out: { type: 'string', default: path.join(ROOT, 'models', 'train-dspark-data') },
      n: { type: 'string', default: '2000' },
      seed: { type: 'string', default: '11' },
      'max-gen': { type: 'string', default: '48' },
      'max-len': { type: 'string', default: '320' },
    },
  });
  if (!values.config) throw new Error('dump: --config DIR (the drafter config to tap for) is required');
  const eng = await engine();
  const { Model } = await import(path.join(DIST, 'model', 'model.js'));
  const { loadDrafter } = await import(path.join(DIST, 'checkpoint', 'drafter.js'));
  const { makeRope } = await import(path.join(DIST, 'model', 'rope.js'));
  const { namesOf } = await import(path.join(DIST, 'checkpoint', 'names.js'));
  const { tensorsF64 } = await import(path.join(DIST, 'checkpoint', 'tensor-f64.js'));
  const cfg = loadDrafter(values.config).config;
  const read = (f) => fs.readFileSync(path.join(values.model, f), 'utf8');
  const tok = new eng.Tokenizer(read('tiktoken.model'), read('tokenizer_config.json'));
  const eos = tok.specialId('<|end_of_msg|>');
  const info = JSON.parse(read('train.json'));
  const [train, held] = splitPairs(info.seed);
  if (JSON.stringify(held) !== JSON.stringify(info.held_out)) throw new Error('dump: splitPairs does not give the model\'s held-out pairs');

  const model = await Model.load(values.model, { budget: Number.MAX_SAFE_INTEGER, ctx: 512, threads: 1 });
  const D = model.config.hiddenSize;
  const W = cfg.taps.length * D;
  const { taps, rows: tapRows } = tapCollector(cfg, D);
  const n = Number(values.n);
  const seed = Number(values.seed);
  const examples = drawExamples(rng(seed * 7919 + 5), train, n * 2, SHARES);
  const ids = [];
  const seqs = [];
  const allTaps = [];
  let tapCount = 0;
  const counts = {};
  const t0 = Date.now();
  for (const ex of examples) {
    if (seqs.length >= n) break;
    const p = promptIds(eng, tok, ex);
    if (p.length + Number(values['max-gen']) > Number(values['max-len'])) continue;
    tapRows.length = 0;
    const gen = await greedyWithTaps(model, p, eos, Number(values['max-gen']), taps);
    const all = [...p, ...gen];
    seqs.push([ids.length, p.length, all.length, tapCount]);
    ids.push(...all);
    for (let i = 0; i < all.length - 1; i++) allTaps.push(tapRows[i]);
    tapCount += all.length - 1;
    counts[ex.kind] = (counts[ex.kind] ?? 0) + 1;
  }
  await model.close?.();
  fs.mkdirSync(values.out, { recursive: true });
  const flat = new Float32Array(tapCount * W);
  allTaps.forEach((r, i) => flat.set(r, i * W));
  writeNpy(path.join(values.out, 'taps.npy'), flat, [tapCount, W]);
  writeNpy(path.join(values.out, 'tokens.npy'), Int32Array.from(ids), [ids.length]);
  writeNpy(path.join(values.out, 'seqs.npy'), Int32Array.from(seqs.flat()), [seqs.length, 4]);
  const tables = tensorsF64(Model.open(values.model, { ctx: 64 }).store.entries, 'target');
  const names = namesOf(model.config);
  const V = model.config.vocabSize;
  writeNpy(path.join(values.out, 'embed.npy'), Float32Array.from(tables(`${names.embed}.weight`)), [V, D]);
  writeNpy(path.join(values.out, 'lm_head.npy'), Float32Array.from(tables(`${names.lmHead}.weight`)), [V, D]);
  const dr = cfg.attn.kind === 'mla' ? cfg.attn.ropeDim : cfg.attn.headDim;
  const rope = makeRope(dr, cfg.rope.theta, cfg.rope.yarn);
  fs.writeFileSync(path.join(values.out, 'rope.json'), JSON.stringify({ freqs: [...rope.freqs], amplitude: rope.amplitude }) + '\n');
  const command = `node tools/train-dspark/dump.mjs ${process.argv.slice(2).join(' ')}`.trim();
  fs.writeFileSync(path.join(values.out, 'info.json'), JSON.stringify({ command, seed, sequences: seqs.length, positions: tapCount, kinds: counts, taps: cfg.taps, stream: cfg.stream, seconds: Math.round((Date.now() - t0) / 1000) }, null, 1) + '\n');
  process.stdout.write(`${seqs.length} sequences (${JSON.stringify(counts)}), ${tapCount} tapped positions, ${Math.round((Date.now() - t0) / 1000)} s -> ${values.out}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) await main();
