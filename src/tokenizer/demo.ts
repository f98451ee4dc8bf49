// A small built-in vocabulary for the demo model: 512 ids in Kimi's layout, scaled down.
//   ids 0..255    the single bytes (rank = byte value)
//   ids 256..495  240 merges learned by byte-level BPE on the paragraph below, pre-tokenized
//                 with the Kimi regex (ties: smaller left bytes, then right)
//   ids 496..511  16 special slots named like K3's (offset = id - 496):
//                 0 [BOS], 1 [EOS], 2 <|end_of_msg|>, 3 <|open|>, 4 <|close|>, 5 <|sep|>,
//                 6 [start_header_id], 7 [end_header_id], 8 <|reserved_token_504|>, 9 [EOT],
//                 10..13 <|media_begin|> <|media_content|> <|media_end|> <|media_pad|>,
//                 14 [UNK], 15 [PAD]
// The config sets `num_reserved_special_tokens: 16` so the tokenizer registers 16 slots (the
// real files omit it and get 256). Pure and deterministic: same text every call.

import { splitPieces } from './pretokenize.js';

export const DEMO_VOCAB_SIZE = 512;
const NUM_SPECIAL = 16;
const NUM_BASE = DEMO_VOCAB_SIZE - NUM_SPECIAL;

export const DEMO_SPECIALS: Readonly<Record<number, string>> = {
  0: '[BOS]',
  1: '[EOS]',
  2: '<|end_of_msg|>',
  3: '<|open|>',
  4: '<|close|>',
  5: '<|sep|>',
  6: '[start_header_id]',
  7: '[end_header_id]',
  9: '[EOT]',
  10: '<|media_begin|>',
  11: '<|media_content|>',
  12: '<|media_end|>',
  13: '<|media_pad|>',
  14: '[UNK]',
  15: '[PAD]',
};

const CORPUS = `The model reads the text one token at a time and writes the next token. It is a small
demo, so its weights are random and what it says is not meant to make sense, but the words it
prints are real English pieces: the tokenizer was trained on this paragraph. When you ask a
question, the engine turns your words into tokens, runs them through every layer of the network,
and picks the most likely next token from the output. Then it does the same again with that token
added, and again, until it reaches the end of the message or the limit you set. A larger model
would have learned from a great deal of text and would answer you in a way that makes sense; this
one only shows that the parts are connected: the reader of the weights, the attention, the
experts, the state that is kept between the turns of a conversation, and the sampler that chooses
what comes next. Kimi is a family of models made by Moonshot AI. They are large, and they think
before they answer. This program can run them on an ordinary computer by reading their weights
from the disk as they are needed, which is slow but works when there is not enough memory to hold
everything at once. The first thing it does is to check the files, then it loads the small parts
that every step needs, and then it starts to generate. You can stop it at any time. If something
goes wrong, it tells you what happened and where, so that you can fix it and try again. Thank you
for reading this, and have a good day! Here are some numbers: 1, 2, 3, 10, 20, 100, 2025. Here are
some words that come up often in code: function, return, value, string, number, input, output,
error, file, line, list, name, type, true, false, print, test, data, state, cache, layer.`;

const toB64 = (s: string): string => Buffer.from(s, 'latin1').toString('base64');

/** Byte-level BPE training on CORPUS: returns the merged tokens as byte strings, in rank order. */
function trainMerges(count: number): string[] {
  const words = new Map<string, number>();
  for (const p of splitPieces(CORPUS)) {
    const b = Buffer.from(p, 'utf8').toString('latin1');
    words.set(b, (words.get(b) ?? 0) + 1);
  }
  const seqs: { parts: string[]; n: number }[] = [...words].map(([w, n]) => ({ parts: [...w], n }));
  const known = new Set<string>();
  for (let i = 0; i < 256; i++) known.add(String.fromCharCode(i));
  const merges: string[] = [];
  while (merges.length < count) {
    const counts = new Map<string, { l: string; r: string; n: number }>();
    for (const s of seqs) {
      for (let i = 0; i + 1 < s.parts.length; i++) {
        const l = s.parts[i]!;
        const r = s.parts[i + 1]!;
        const key = `${l.length}:${l}${r}`;
        const e = counts.get(key);
        if (e) e.n += s.n;
        else counts.set(key, { l, r, n: s.n });
      }
    }
    let best: { l: string; r: string; n: number } | undefined;
    for (const e of counts.values()) {
      if (!best || e.n > best.n || (e.n === best.n && (e.l < best.l || (e.l === best.l && e.r < best.r)))) best = e;
    }
    if (!best) throw new Error('demo tokenizer: corpus too small for the merge count');
    const joined = best.l + best.r;
    for (const s of seqs) {
      const out: string[] = [];
      for (let i = 0; i < s.parts.length; i++) {
        if (i + 1 < s.parts.length && s.parts[i] === best.l && s.parts[i + 1] === best.r) {
          out.push(joined);
          i++;
        } else out.push(s.parts[i]!);
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

/** The two tokenizer files of the demo model, as text. */
export function demoTokenizerFiles(): { 'tiktoken.model': string; 'tokenizer_config.json': string } {
  return demoTokenizerFilesFor(trainMerges(NUM_BASE - 256));
}

/** The two tokenizer files of a vocabulary in the demo's layout: the 256 bytes, `merges`
 *  (latin1 byte strings, in rank order), then the 16 special slots. The trained demo model's
 *  vocabulary (tools/train-demo/make-data.mjs) is written by this too. */
export function demoTokenizerFilesFor(merges: readonly string[]): { 'tiktoken.model': string; 'tokenizer_config.json': string } {
  const lines: string[] = [];
  for (let b = 0; b < 256; b++) lines.push(`${toB64(String.fromCharCode(b))} ${b}`);
  merges.forEach((m, i) => lines.push(`${toB64(m)} ${256 + i}`));
  const base = 256 + merges.length;
  const added: Record<string, object> = {};
  for (const [off, content] of Object.entries(DEMO_SPECIALS)) {
    added[String(base + Number(off))] = {
      content,
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: true,
    };
  }
  const config = {
    added_tokens_decoder: added,
    additional_special_tokens: ['<|end_of_msg|>'],
    bos_token: '[BOS]',
    clean_up_tokenization_spaces: false,
    eos_token: '[EOS]',
    model_max_length: 1048576,
    num_reserved_special_tokens: NUM_SPECIAL,
    pad_token: '[PAD]',
    tokenizer_class: 'TikTokenTokenizer',
    unk_token: '[UNK]',
  };
  return {
    'tiktoken.model': lines.join('\n') + '\n',
    'tokenizer_config.json': JSON.stringify(config, null, 2) + '\n',
  };
}
