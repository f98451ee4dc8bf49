// A prompt that cannot fit the context the server was planned for is refused before it is
// tokenized in full: no token holds more bytes than the vocabulary's longest, so a text of B
// bytes is at least B / longest tokens. Tokenizing a 4 MiB body takes seconds on the event
// loop (/health would wait); this bound answers such a request at once.

import type { Tokenizer } from '../api/tokens.js';
import { badField } from './errors.js';
import type { Served } from './served.js';

const longest = new WeakMap<Tokenizer, number>();

/** Bytes of the vocabulary's longest token (specials included: a prompt may spell them). */
function longestTokenBytes(tok: Tokenizer): number {
  let n = longest.get(tok);
  if (n === undefined) {
    n = 1;
    for (let id = 0; id < tok.numBase; id++) n = Math.max(n, tok.rankBytesOf(id)?.byteLength ?? 0);
    for (const s of tok.specials.keys()) n = Math.max(n, Buffer.byteLength(s));
    longest.set(tok, n);
  }
  return n;
}

/** Throws a 400 naming `field` when `texts` (what will be tokenized) surely exceed the context. */
export function refuseTextPastContext(s: Served, field: string, texts: readonly string[]): void {
  const tok = s.kimi.tokenizer;
  if (!tok) return;
  let bytes = 0;
  for (const t of texts) bytes += Buffer.byteLength(t);
  const least = Math.floor(bytes / longestTokenBytes(tok));
  if (least >= s.maxContext) throw badField(field, `the prompt is at least ${least} tokens; this server holds ${s.maxContext} tokens of context`);
}
