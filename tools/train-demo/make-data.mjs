// Training data for the demo model, rendered by the engine's own K3 chat renderer (so prompts are
// exactly what `k3 serve` renders), and the demo vocabulary learned on it.
//
//   node tools/train-demo/make-data.mjs [--out models/train-demo-data] [--seed 1] [--n 60000] [--vocab 1024]
//          [--tokenizer DIR] [--shares tool=0.45,chat=0.17,...]
//
// --tokenizer keeps the vocabulary of DIR (a shipped model) instead of learning one, so that
// train.py --init DIR can go on from it; --shares changes the mix of KIND_SHARE (renormalized).
//
// Writes to --out: tiktoken.model + tokenizer_config.json (256 bytes, vocab - 272 merges learned by
// byte-level BPE on the rendered conversations, pre-tokenized with the K3 regex, never merging a
// digit, then 16 specials in the demo layout), data.jsonl (one example a line: kind, prompt ids,
// target ids = the assistant's generated part through <|end_of_msg|>) and pairs.json (held out).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { HELD_OUT, example, rawAnswer, rawPrompt, rng, splitPairs } from './conversations.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The engine's renderer and tokenizer, from its build (dist/). */
export async function engine(dist = path.join(ROOT, 'dist')) {
  const tk = (f) => import(path.join(path.resolve(dist), 'src', 'tokenizer', f));
  return { ...(await tk('k3-chat.js')), ...(await tk('pretokenize.js')), ...(await tk('tokenizer.js')), ...(await tk('demo.js')) };
}

export const NUM_SPECIAL = 16;
export const KIND_SHARE = { raw: 0.15, chat: 0.3, call: 0.175, tool: 0.175, other: 0.2 };

/** The prompt's segments and the assistant turn's (after the generation prompt, through <|end_of_msg|>). */
export function renderExample(eng, ex) {
  const { k3ChatSegments } = eng;
  const prompt = k3ChatSegments(ex.request);
  const alone = k3ChatSegments({ messages: [ex.reply], thinking: ex.request.thinking, thinking_effort: null, add_generation_prompt: false });
  const gen = k3ChatSegments({ messages: [], thinking: ex.request.thinking, thinking_effort: null });
  const same = (x, y) => x.text === y.text && x.special === y.special;
  if (!gen.every((s, i) => same(s, alone[i]) && same(s, prompt[prompt.length - gen.length + i]))) throw new Error('the assistant turn does not start with the generation prompt');
  return { prompt, target: alone.slice(gen.length) };
}

const isDigit = (c) => c >= 48 && c <= 57;

/** Byte-level BPE on the pieces' counts (demo.ts's rule: most frequent pair, ties by the smaller
 *  left then right bytes); a pair is never merged when either side holds a digit. */
function trainMerges(pieceCounts, count) {
  const seqs = [...pieceCounts].map(([w, n]) => ({ parts: [...w], n }));
  const known = new Set();
  for (let i = 0; i < 256; i++) known.add(String.fromCharCode(i));
  const merges = [];
  const digity = (s) => [...s].some((c) => isDigit(c.charCodeAt(0)));
  while (merges.length < count) {
    const counts = new Map();
    for (const s of seqs) {
      for (let i = 0; i + 1 < s.parts.length; i++) {
        const l = s.parts[i];
        const r = s.parts[i + 1];
        if (digity(l) || digity(r)) continue;
        const key = `${l.length}:${l}${r}`;
        const e = counts.get(key);
        if (e) e.n += s.n;
        else counts.set(key, { l, r, n: s.n });
      }
    }
    let best;
    for (const e of counts.values()) if (!best || e.n > best.n || (e.n === best.n && (e.l < best.l || (e.l === best.l && e.r < best.r)))) best = e;
    if (!best) throw new Error(`make-data: only ${merges.length} merges possible, asked for ${count}`);
    const joined = best.l + best.r;
    for (const s of seqs) {
      if (s.parts.length < 2) continue;
      const out = [];
      for (let i = 0; i < s.parts.length; i++) {
        if (i + 1 < s.parts.length && s.parts[i] === best.l && s.parts[i + 1] === best.r) {
          out.push(joined);
          i++;
        } else out.push(s.parts[i]);
      }
      s.parts = out;
    }
    if (!known.has(joined)) {
      known.add(joined);
      merges.push(joined);
    }
  }
  return merges;
}

/** Examples of every kind in the shares of KIND_SHARE, for the given pairs. */
export function drawExamples(r, pairs, n, shares = KIND_SHARE) {
  const out = [];
  const total = Object.values(shares).reduce((x, y) => x + y, 0);
  const kinds = Object.entries(shares).map(([k, v]) => [k, v / total]);
  for (let i = 0; i < n; i++) {
    let x = r.next();
    let kind = kinds[kinds.length - 1][0];
    for (const [k, share] of kinds) {
      if (x < share) {
        kind = k;
        break;
      }
      x -= share;
    }
    const [a, b] = r.pick(pairs);
    out.push(kind === 'raw' ? { kind, a, b } : { ...example(kind, r, a, b), a, b });
  }
  return out;
}

/** The demo vocabulary learned on the first 6000 rendered examples (the engine's demo layout). */
function learnedTokenizer(eng, rendered, vocab) {
  const counts = new Map();
  for (const x of rendered.slice(0, 6000)) {
    const texts = x.text ?? [...x.prompt, ...x.target].filter((s) => !s.special).map((s) => s.text);
    for (const t of texts) for (const p of eng.splitPieces(t)) {
      const b = Buffer.from(p, 'utf8').toString('latin1');
      counts.set(b, (counts.get(b) ?? 0) + 1);
    }
  }
  return eng.demoTokenizerFilesFor(trainMerges(counts, vocab - 256 - NUM_SPECIAL));
}

/** The vocabulary files of an existing model, unchanged. */
function keptTokenizer(dir) {
  const read = (name) => fs.readFileSync(path.join(dir, name), 'utf8');
  return { 'tiktoken.model': read('tiktoken.model'), 'tokenizer_config.json': read('tokenizer_config.json') };
}

async function main() {
  const { values } = parseArgs({
    options: {
      out: { type: 'string', default: path.join(ROOT, 'models', 'train-demo-data') },
      seed: { type: 'string', default: '1' },
      n: { type: 'string', default: '60000' },
      vocab: { type: 'string', default: '1024' },
      'max-len': { type: 'string', default: '320' },
      dist: { type: 'string', default: path.join(ROOT, 'dist') },
      tokenizer: { type: 'string' },
      shares: { type: 'string' },
    },
  });
  const shares = { ...KIND_SHARE };
  for (const part of values.shares ? values.shares.split(',') : []) {
    const [k, v] = part.split('=');
    if (!(k in shares) || !(Number(v) >= 0)) throw new Error(`make-data: --shares: '${part}' is not KIND=NUMBER with KIND one of ${Object.keys(shares).join(', ')}`);
    shares[k] = Number(v);
  }
  const eng = await engine(values.dist);
  const { Tokenizer, encodeK3Segments } = eng;
  const seed = Number(values.seed);
  const vocab = Number(values.vocab);
  const maxLen = Number(values['max-len']);
  const [train, held] = splitPairs(seed);
  const r = rng(seed * 7919 + 1);
  const examples = drawExamples(r, train, Number(values.n), shares);
  const rendered = examples.map((ex) => (ex.kind === 'raw' ? { text: [rawPrompt(ex.a, ex.b), rawAnswer(ex.a, ex.b)] } : renderExample(eng, ex)));

  const files = values.tokenizer ? keptTokenizer(values.tokenizer) : learnedTokenizer(eng, rendered, vocab);
  fs.mkdirSync(values.out, { recursive: true });
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(values.out, name), text);
  const tok = new Tokenizer(files['tiktoken.model'], files['tokenizer_config.json']);
  const eos = tok.specialId('<|end_of_msg|>');

  const lines = [];
  const lens = {};
  for (let i = 0; i < examples.length; i++) {
    const x = rendered[i];
    const p = x.text ? tok.encode(x.text[0]) : encodeK3Segments(tok, x.prompt);
    const t = x.text ? [...tok.encode(x.text[1]), eos] : encodeK3Segments(tok, x.target);
    if (p.length + t.length > maxLen) continue;
    lines.push(JSON.stringify({ k: examples[i].kind, p, t }));
    (lens[examples[i].kind] ??= []).push(p.length + t.length);
  }
  fs.writeFileSync(path.join(values.out, 'data.jsonl'), lines.join('\n') + '\n');
  fs.writeFileSync(path.join(values.out, 'pairs.json'), JSON.stringify({ seed, held_out: held }) + '\n');
  for (const [k, ls] of Object.entries(lens)) {
    ls.sort((a, b) => a - b);
    process.stdout.write(`${k}: ${ls.length} examples, length median ${ls[ls.length >> 1]}, max ${ls[ls.length - 1]}\n`);
  }
  process.stdout.write(`${lines.length} of ${examples.length} examples (<= ${maxLen} tokens) and a ${vocab}-id vocabulary to ${values.out}; ${HELD_OUT} pairs held out\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
