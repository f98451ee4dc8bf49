// K3 markup on ids (docs/spec/K3-CHAT.md §2, §3.1, §7): the four control tokens are single ids; a tag's
// name and attributes are ordinary text between `<|open|>` / `<|close|>` and `<|sep|>`. The same
// characters written as ordinary BPE pieces are text, which is why the parser works on ids.

import type { Tokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';

export type Control = 'open' | 'close' | 'sep' | 'end';

const NAMES: ReadonlyArray<[Control, string]> = [
  ['open', '<|open|>'],
  ['close', '<|close|>'],
  ['sep', '<|sep|>'],
  ['end', '<|end_of_msg|>'],
];

/** id -> control kind, for one tokenizer's K3 control ids. */
export function k3Controls(tok: Tokenizer): ReadonlyMap<number, Control> {
  const m = new Map<number, Control>();
  for (const [kind, name] of NAMES) {
    const id = tok.specialId(name);
    if (id === undefined) throw new UserError(`tokenizer has no ${name} token: K3 replies need a K3 tokenizer (family ${tok.family})`);
    m.set(id, kind);
  }
  return m;
}

export interface Tag {
  name: string;
  attrs: ReadonlyMap<string, string>;
}

const ATTR = /([^\s="]+)="([^"]*)"/g;

/** `call tool="f" index="1"` -> name and attributes; values unescaped `&quot;` first, then
 *  `&amp;` (the reverse of the renderer's escape, so `&amp;quot;` stays `&quot;`). */
export function parseTag(text: string): Tag {
  const t = text.trimStart();
  const sp = t.search(/\s/);
  const name = sp < 0 ? t : t.slice(0, sp);
  const attrs = new Map<string, string>();
  if (sp >= 0) for (const m of t.slice(sp).matchAll(ATTR)) attrs.set(m[1]!, m[2]!.replaceAll('&quot;', '"').replaceAll('&amp;', '&'));
  return { name, attrs };
}

/** Whether an unfinished tag's text may still turn out to be named `name`. */
export function mayBeNamed(text: string, name: string): boolean {
  const t = text.trimStart();
  return t.length <= name.length ? name.startsWith(t) : t.startsWith(name) && /\s/.test(t[name.length]!);
}
