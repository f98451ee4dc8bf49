// The Kimi tokenizer (docs/spec/ARCHITECTURE.md §6, docs/spec/K3.md §8), built from the two files every Kimi
// checkpoint ships: `tiktoken.model` (base64 token bytes + rank per line; rank = id = merge
// priority) and `tokenizer_config.json` (added_tokens_decoder, bos/eos, chat_template).
// Nothing is hard-coded to the real 163,584-rank vocabulary: special ids are "number of ranks +
// slot offset", so the small golden vocabulary and the demo vocabulary load the same way.

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { UserError } from '../util/errors.js';
import { bpe } from './bpe.js';
import { referenceChunks, specialMatcher, splitPieces, splitSpecials, type Segment } from './pretokenize.js';

export type TokenizerFamily = 'k2' | 'k3';

export const MODEL_FILE = 'tiktoken.model';
export const CONFIG_FILE = 'tokenizer_config.json';

export interface TokenizerOptions {
  /** Which special-token layout / chat format: default from the config (`<|end_of_msg|>` or
   *  `<|open|>` named means K3, else K2 / Kimi Linear). */
  family?: TokenizerFamily;
  /** Special slots registered after the ranks. Default: the config's
   *  `num_reserved_special_tokens` if present, else 256, plus 2 for the K2 family (the K2 /
   *  Kimi-Linear class registers 256 + 2; K3's registers 256). */
  registeredSlots?: number;
  /** Reproduce the reference's 400,000 / 25,000-character cuts (docs/spec/ARCHITECTURE.md §6.3 step 1). Default true:
   *  it changes ids on long runs, and the reference does it. */
  referenceSplit?: boolean;
  /** A Jinja chat template to use instead of the config's. */
  chatTemplate?: string;
}

export interface EncodeOptions {
  /** Which special strings become control ids: true (default, as the reference `encode`) =
   *  every registered one, false = none (all text), or a set of the allowed strings. */
  allowSpecial?: boolean | ReadonlySet<string>;
}

interface AddedToken {
  content: string;
  special?: boolean;
}

interface TokenizerConfig {
  added_tokens_decoder?: Record<string, AddedToken>;
  bos_token?: string | { content: string } | null;
  eos_token?: string | { content: string } | null;
  unk_token?: string | { content: string } | null;
  pad_token?: string | { content: string } | null;
  chat_template?: string | Array<{ name: string; template: string }> | null;
  num_reserved_special_tokens?: number;
}

function tokenContent(t: TokenizerConfig['bos_token']): string | undefined {
  if (t === null || t === undefined) return undefined;
  return typeof t === 'string' ? t : t.content;
}

const latin1 = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1');
const utf8Bytes = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'utf8'));

/** Parse `tiktoken.model` text: byte string (latin1) → rank, and rank → bytes. */
export function parseTiktokenModel(text: string, fileName = MODEL_FILE): { ranks: Map<string, number>; bytes: Uint8Array[] } {
  const ranks = new Map<string, number>();
  const bytes: Uint8Array[] = [];
  let lineNo = 0;
  let pos = 0;
  while (pos < text.length) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    const line = text.slice(pos, end).trim();
    pos = end + 1;
    lineNo++;
    if (line.length === 0) continue;
    const sp = line.indexOf(' ');
    const rank = sp > 0 ? Number(line.slice(sp + 1)) : NaN;
    if (!Number.isInteger(rank) || rank < 0 || !/^[A-Za-z0-9+/=]*$/.test(line.slice(0, sp))) {
      throw new UserError(`${fileName}: line ${lineNo} is not "<base64> <rank>"`);
    }
    const b = new Uint8Array(Buffer.from(line.slice(0, sp), 'base64'));
    const key = latin1(b);
    if (b.length === 0 || ranks.has(key)) throw new UserError(`${fileName}: line ${lineNo}: empty or duplicate token`);
    ranks.set(key, rank);
    bytes[rank] = b;
  }
  if (ranks.size === 0) throw new UserError(`${fileName}: no tokens`);
  return { ranks, bytes };
}

export class Tokenizer {
  /** Number of mergeable ranks (163,584 for the real vocabularies); specials start here. */
  readonly numBase: number;
  /** Embedding rows: numBase + the 256 (or `num_reserved_special_tokens`) special slots. The
   *  K2 family registers 2 ids more, which the reference can emit for the text
   *  `<|reserved_token_{numBase+256}|>`; a model must reject ids >= vocabSize. */
  readonly vocabSize: number;
  readonly family: TokenizerFamily;
  /** Every registered special string → id (named slots and `<|reserved_token_{id}|>`). */
  readonly specials: ReadonlyMap<string, number>;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly unkId: number | undefined;
  readonly padId: number | undefined;
  /** The Jinja chat template from tokenizer_config.json, if it has one. */
  readonly chatTemplate: string | undefined;
  readonly referenceSplit: boolean;

  private readonly ranks: Map<string, number>;
  private readonly rankBytes: Uint8Array[];
  private readonly specialBytes = new Map<number, Uint8Array>();
  private readonly specialText = new Map<number, string>();
  private readonly allMatcher: RegExp | null;
  private readonly matcherCache = new WeakMap<ReadonlySet<string>, RegExp | null>();

  constructor(modelText: string, config: string | object, opts: TokenizerOptions = {}) {
    const { ranks, bytes } = parseTiktokenModel(modelText);
    this.ranks = ranks;
    this.rankBytes = bytes;
    let cfg: TokenizerConfig;
    if (typeof config === 'string') {
      try {
        cfg = JSON.parse(config) as TokenizerConfig;
      } catch (e) {
        throw new UserError(`${CONFIG_FILE}: not valid JSON (${(e as Error).message})`);
      }
    } else cfg = config as TokenizerConfig;
    if (cfg === null || typeof cfg !== 'object') throw new UserError(`${CONFIG_FILE}: not a JSON object`);

    this.numBase = bytes.length;
    const named = new Map<number, string>();
    for (const [k, v] of Object.entries(cfg.added_tokens_decoder ?? {})) {
      const id = Number(k);
      if (!Number.isInteger(id) || id < 0 || typeof v?.content !== 'string') {
        throw new UserError(`${CONFIG_FILE}: added_tokens_decoder entry ${JSON.stringify(k)} is malformed`);
      }
      named.set(id, v.content);
    }
    const names = new Set(named.values());
    this.family = opts.family ?? (names.has('<|end_of_msg|>') || names.has('<|open|>') ? 'k3' : 'k2');
    const reserved = cfg.num_reserved_special_tokens ?? 256;
    const slots = opts.registeredSlots ?? reserved + (this.family === 'k2' ? 2 : 0);
    this.vocabSize = this.numBase + reserved;

    // Registered specials: slot i (numBase <= i < numBase + slots) is its named token if it has
    // one, else `<|reserved_token_{i}|>` (so a named slot has no reserved spelling). Named
    // tokens outside the slot range are registered too.
    const specials = new Map<string, number>();
    for (let id = this.numBase; id < this.numBase + slots; id++) {
      specials.set(named.get(id) ?? `<|reserved_token_${id}|>`, id);
    }
    for (const [id, s] of named) if (!specials.has(s)) specials.set(s, id);
    this.specials = specials;
    for (const [s, id] of specials) {
      if (id < this.numBase && this.rankBytes[id] !== undefined) continue; // a rank wins for decoding
      this.specialText.set(id, s);
      this.specialBytes.set(id, utf8Bytes(s));
    }
    this.allMatcher = specialMatcher(specials.keys());

    const idOf = (t: TokenizerConfig['bos_token']): number | undefined => {
      const s = tokenContent(t);
      return s === undefined ? undefined : specials.get(s);
    };
    this.bosId = idOf(cfg.bos_token);
    this.eosId = idOf(cfg.eos_token);
    this.unkId = idOf(cfg.unk_token);
    this.padId = idOf(cfg.pad_token);
    const tpl = cfg.chat_template;
    this.chatTemplate =
      opts.chatTemplate ??
      (typeof tpl === 'string' ? tpl : Array.isArray(tpl) ? (tpl.find((t) => t.name === 'default') ?? tpl[0])?.template : undefined);
    this.referenceSplit = opts.referenceSplit ?? true;
  }

  /** The id of a special string (`<|im_end|>`, `[EOS]`, `<|reserved_token_N|>`), if registered. */
  specialId(s: string): number | undefined {
    return this.specials.get(s);
  }

  /** The special string of an id, if it is one. */
  specialName(id: number): string | undefined {
    return this.specialText.get(id);
  }

  isSpecial(id: number): boolean {
    return this.specialText.has(id);
  }

  private matcher(allow: EncodeOptions['allowSpecial']): RegExp | null {
    if (allow === undefined || allow === true) return this.allMatcher;
    if (allow === false) return null;
    let m = this.matcherCache.get(allow);
    if (m === undefined) {
      m = specialMatcher([...allow].filter((s) => this.specials.has(s)));
      this.matcherCache.set(allow, m);
    }
    return m;
  }

  /** Text → ids. No BOS/EOS is added (docs/spec/ARCHITECTURE.md §6.3 step 4). */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    const out: number[] = [];
    this.split(text, opts, (special) => out.push(this.specials.get(special)!), (piece) => bpe(Buffer.from(piece, 'utf8').toString('latin1'), this.ranks, out));
    return out;
  }

  /** Text → ids with every special string treated as text. */
  encodeOrdinary(text: string): number[] {
    return this.encode(text, { allowSpecial: false });
  }

  /** The pre-token split (debugging and tests): regex pieces and special matches, in order. */
  pretokenize(text: string, opts: EncodeOptions = {}): Segment[] {
    const out: Segment[] = [];
    this.split(text, opts, (special) => out.push({ text: special, special: true }), (piece) => out.push({ text: piece, special: false }));
    return out;
  }

  /** The pre-token split, in order: each special string matched, and each regex piece of the text between. */
  private split(text: string, opts: EncodeOptions, onSpecial: (text: string) => void, onPiece: (piece: string) => void): void {
    const matcher = this.matcher(opts.allowSpecial);
    const chunks = this.referenceSplit ? referenceChunks(text) : [text];
    for (const chunk of chunks) {
      for (const seg of splitSpecials(chunk, matcher)) {
        if (seg.special) onSpecial(seg.text);
        else for (const piece of splitPieces(seg.text)) onPiece(piece);
      }
    }
  }

  /** The bytes of one id (a special decodes to its string). Throws UserError for unknown ids. */
  tokenBytes(id: number): Uint8Array {
    const b = this.rankBytes[id] ?? this.specialBytes.get(id);
    if (b === undefined) throw new UserError(`token id ${id} is not in the vocabulary (${this.numBase} ranks, specials ${this.numBase}..${this.numBase + this.specials.size - 1})`);
    return b;
  }

  /** The bytes of an ordinary (mergeable) id, or undefined for specials and unused ids. */
  rankBytesOf(id: number): Uint8Array | undefined {
    return id >= 0 && id < this.numBase ? this.rankBytes[id] : undefined;
  }

  /** Ids → the exact bytes. */
  decodeBytes(ids: Iterable<number>): Uint8Array {
    const parts: Uint8Array[] = [];
    let len = 0;
    for (const id of ids) {
      const b = this.tokenBytes(id);
      parts.push(b);
      len += b.length;
    }
    const out = new Uint8Array(len);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }

  /** Ids → text; invalid UTF-8 becomes U+FFFD (one per maximal invalid subsequence); a leading
   *  byte-order mark is kept (TextDecoder would drop it by default). */
  decode(ids: Iterable<number>): string {
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(this.decodeBytes(ids));
  }

  /** A decoder for ids arriving one at a time that never emits half a UTF-8 character. */
  streamDecoder(): StreamDecoder {
    return new StreamDecoder(this);
  }
}

/** Incremental decode: concatenating every push() and the final flush() gives exactly
 *  `tokenizer.decode(allIds)`; bytes of an unfinished character are held back. */
export class StreamDecoder {
  private dec = new TextDecoder('utf-8', { ignoreBOM: true });
  constructor(private readonly tok: Tokenizer) {}

  /** Feed one id or several; returns the text that is now complete (maybe ''). */
  push(ids: number | Iterable<number>): string {
    const bytes = typeof ids === 'number' ? this.tok.tokenBytes(ids) : this.tok.decodeBytes(ids);
    return this.dec.decode(bytes, { stream: true });
  }

  /** End of stream: held-back bytes of an unfinished character come out as U+FFFD. */
  flush(): string {
    return this.dec.decode();
  }
}

async function readText(dir: string, name: string): Promise<string> {
  const path = join(dir, name);
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new UserError(`tokenizer: ${path} not found (a Kimi tokenizer directory holds ${MODEL_FILE} and ${CONFIG_FILE})`);
    throw new UserError(`tokenizer: cannot read ${path}: ${(e as Error).message}`, 1);
  }
}

export const TEMPLATE_FILE = 'chat_template.jinja';

/** Load `tiktoken.model` + `tokenizer_config.json` from a directory (a checkpoint or a
 *  tokenizer-only folder). A missing file is a UserError naming it. Newer checkpoints ship the
 *  chat template as `chat_template.jinja` instead of inside the config; it is read if the
 *  config has none. */
export async function loadTokenizer(dir: string, opts: TokenizerOptions = {}): Promise<Tokenizer> {
  const [model, config] = await Promise.all([readText(dir, MODEL_FILE), readText(dir, CONFIG_FILE)]);
  let template = opts.chatTemplate;
  if (template === undefined && !/"chat_template"\s*:\s*[["]/.test(config)) {
    template = await readFile(join(dir, TEMPLATE_FILE), 'utf8').catch(() => undefined);
  }
  try {
    return new Tokenizer(model, config, template === undefined ? opts : { ...opts, chatTemplate: template });
  } catch (e) {
    if (e instanceof UserError) throw new UserError(`tokenizer in ${dir}: ${e.message}`, e.exitCode);
    throw e;
  }
}
