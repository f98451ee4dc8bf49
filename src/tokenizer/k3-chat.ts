// K3's chat protocol (XTML) as Moonshot's release renderer `encoding_k3.py` writes it
// (docs/spec/K3-CHAT.md §2-3). The prompt is a list of segments: the four control tokens
// are special segments (one id each), every other segment is encoded on its own with specials
// off, so BPE never merges across a boundary and user text can never forge a control id.
// Inputs are JSON values, plain or from pyjson's order- and number-preserving parse.

import { UserError } from '../util/errors.js';
import type { ChatMessage, ChatSegment, ContentPart, ToolCall } from './chat-types.js';
import { PyDict, PyJsonError, PyNum, deepSort, dictEntries, isDict, pyDumps, pyFloatRepr, pyLoads } from './pyjson.js';
import type { Tokenizer } from './tokenizer.js';

export const K3_OPEN = '<|open|>';
export const K3_CLOSE = '<|close|>';
export const K3_SEP = '<|sep|>';
export const K3_END = '<|end_of_msg|>';
export const K3_IMAGE_PLACEHOLDER = '<|kimi_image_placeholder|>';
export const K3_THINKING_EFFORTS = ['low', 'high', 'max'] as const;

/** A tool call: OpenAI's `{id, type, function: {name, arguments}}` or flat `{name, arguments}`;
 *  arguments a JSON string, a dict, null or "". */
export interface K3ToolCall {
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: unknown };
  name?: string;
  arguments?: unknown;
}

export interface K3Message extends Omit<ChatMessage, 'tool_calls' | 'content'> {
  content?: string | ContentPart[] | null;
  /** Fallback for reasoning_content. */
  reasoning?: string | null;
  /** On a system message: a mid-conversation tool declaration (its content is not rendered). */
  tools?: unknown;
  /** On a tool message: the tool's name (else `name`, else the matching call's). */
  tool?: string | null;
  /** On a tool message: fallback for tool_call_id. */
  id?: string;
  tool_calls?: readonly (ToolCall | K3ToolCall)[] | null;
}

export interface K3ChatRequest {
  messages: readonly K3Message[];
  tools?: unknown;
  tool_choice?: unknown;
  response_format?: unknown;
  /** Default (also for null) true. */
  thinking?: boolean | null;
  /** Absent: 'max' (the release entry point `apply_chat_template`); null: no effort message. */
  thinking_effort?: string | null;
  /** Default (also for null) true. */
  add_generation_prompt?: boolean | null;
  /** Wins over the schema inside response_format. */
  response_schema?: unknown;
  /** Replace image parts (and placeholders in text) with these, in order. */
  image_prompts?: readonly string[];
}

/** A request the release renderer refuses; `code` as in the goldens' README. */
export class K3RenderError extends UserError {
  constructor(
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(field ? `${field}: ${message}` : message);
    this.name = 'K3RenderError';
  }
}

/** Tokens of the generation prefix Moonshot leaves out of `usage.prompt_tokens`. */
export const K3_GENERATION_PREFIX_TOKENS = 3;

/** Moonshot's `prompt_tokens` for a rendered prompt: its ids less the 3-token generation prefix
 *  (checked on all 44 rows of kvv-prompt-tokens.jsonl with the real vocabulary). */
export function k3PromptTokenCount(ids: readonly number[]): number {
  return Math.max(0, ids.length - K3_GENERATION_PREFIX_TOKENS);
}

/** Ids of the segments: text encoded alone with specials off, a special segment its one id. */
export function encodeK3Segments(tok: Tokenizer, segs: readonly ChatSegment[]): number[] {
  const ids: number[] = [];
  for (const s of segs) {
    const id = s.special ? tok.specialId(s.text) : undefined;
    if (id !== undefined) ids.push(id);
    else for (const x of tok.encode(s.text, { allowSpecial: s.special })) ids.push(x);
  }
  return ids;
}

// --- Python semantics the renderer leans on -------------------------------------------------

const has = (o: unknown, k: string): boolean =>
  o instanceof PyDict ? o.has(k) : o !== null && typeof o === 'object' && !Array.isArray(o) && Object.prototype.hasOwnProperty.call(o, k);
/** `o.get(k)`. */
const get = (o: unknown, k: string): unknown => (o instanceof PyDict ? o.get(k) : has(o, k) ? (o as Record<string, unknown>)[k] : undefined);

function truthy(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof PyNum) return v.value !== 0;
  const e = dictEntries(v);
  return e ? e.length > 0 : true;
}

/** Python `str(v)` for the scalars that reach attributes and text. */
function pyStr(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'number') return Number.isInteger(v) ? pyDumps(v) : pyFloatRepr(v);
  if (v instanceof PyNum) return v.float ? pyFloatRepr(v.value) : v.text;
  return pyDumps(v);
}

/** Python's `str.isspace()` set (JS's `\s` differs: it has U+FEFF, lacks U+001C-U+001F, U+0085). */
function isPySpace(c: number): boolean {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

/** Python `str.strip()`. */
export function pyStrip(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && isPySpace(s.charCodeAt(a))) a++;
  while (b > a && isPySpace(s.charCodeAt(b - 1))) b--;
  return s.slice(a, b);
}

// --- segments ------------------------------------------------------------------------------

class Segments {
  readonly out: ChatSegment[] = [];
  private image = 0;
  constructor(private readonly imagePrompts: readonly string[] | undefined) {}
  ctl(t: string): void {
    this.out.push({ text: t, special: true });
  }
  txt(t: string): void {
    if (t.length > 0) this.out.push({ text: t, special: false });
  }
  open(tag: string, attrs: [string, unknown][] = []): void {
    this.ctl(K3_OPEN);
    this.txt(tag);
    for (const [k, v] of attrs) {
      this.txt(` ${k}`);
      this.txt('="');
      this.txt(pyStr(v).replaceAll('&', '&amp;').replaceAll('"', '&quot;'));
      this.txt('"');
    }
    this.ctl(K3_SEP);
  }
  close(tag: string): void {
    this.ctl(K3_CLOSE);
    this.txt(tag);
    this.ctl(K3_SEP);
  }
  endMessage(): void {
    this.close('message');
    this.ctl(K3_END);
  }
  nextImage(): string {
    if (this.imagePrompts === undefined) return K3_IMAGE_PLACEHOLDER;
    const p = this.imagePrompts[this.image++];
    if (p === undefined) throw new K3RenderError('image_count_mismatch', 'more images than image prompts', 'image_prompts');
    return p;
  }
  checkImages(): void {
    if (this.imagePrompts !== undefined && this.image !== this.imagePrompts.length) {
      throw new K3RenderError('image_count_mismatch', `${this.imagePrompts.length} image prompts for ${this.image} images`, 'image_prompts');
    }
  }
  /** User or tool text; with image prompts, placeholders in it become the prompts. */
  text(t: string): void {
    if (this.imagePrompts === undefined || !t.includes(K3_IMAGE_PLACEHOLDER)) return this.txt(t);
    const parts = t.split(K3_IMAGE_PLACEHOLDER);
    parts.forEach((p, i) => {
      this.txt(p);
      if (i < parts.length - 1) this.ctl(this.nextImage());
    });
  }
  content(c: unknown, field: string): void {
    if (typeof c === 'string') return this.text(c);
    if (c === null || c === undefined) return;
    if (!Array.isArray(c)) throw new K3RenderError('bad_content', 'must be a string, a list of parts or null', field);
    c.forEach((part, i) => {
      const type = get(part, 'type');
      if (type === 'image' || type === 'image_url') return this.ctl(this.nextImage());
      if (!has(part, 'text')) throw new K3RenderError('bad_content', 'a non-image part needs "text"', `${field}[${i}]`);
      this.text(pyStr(get(part, 'text')));
    });
  }
  /** An internal system message: its body stripped as Python strips. */
  system(type: string, body: string): void {
    this.open('message', [
      ['role', 'system'],
      ['type', type],
    ]);
    this.txt(pyStrip(body));
    this.endMessage();
  }
}

const compact = (v: unknown): string => pyDumps(v, { item: ',', key: ':' });

function toolDeclare(s: Segments, tools: unknown, dynamic: boolean): void {
  const head = dynamic
    ? '## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n'
    : '# Tools\nHere are the available tools, described in JSONSchema.\n\n';
  s.system('tool-declare', `${head}\`\`\`json\n${compact(tools)}\n\`\`\``);
}

const EFFORT_BODY =
  '`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=';
const RF_HEAD = 'Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.';

/** The call's function dict (`function`, or the call itself when flat). */
const callFunction = (call: unknown): unknown => (has(call, 'function') ? get(call, 'function') : call);

/** Arguments as the renderer needs them: (key, value) pairs, or a raw string for a json block. */
function callArguments(call: unknown, field: string): [string, unknown][] | string {
  const fn = get(call, 'function');
  const args = isDict(fn) ? get(fn, 'arguments') : get(call, 'arguments');
  if (args === null || args === undefined) return [];
  const entries = dictEntries(args);
  if (entries) return entries;
  if (typeof args !== 'string') throw new K3RenderError('bad_arguments', 'must be a JSON object string, an object or null', field);
  if (pyStrip(args) === '') return [];
  let parsed: unknown;
  try {
    parsed = pyLoads(args);
  } catch (e) {
    if (e instanceof PyJsonError) return args;
    throw e;
  }
  const obj = dictEntries(parsed);
  if (!obj) throw new K3RenderError('non_object_arguments', 'valid JSON but not an object', field);
  return obj;
}

/** XTML type of an argument value (bool before number, as Python's isinstance order). */
function argType(v: unknown): string {
  if (typeof v === 'boolean') return 'boolean';
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'number' || typeof v === 'bigint' || v instanceof PyNum) return 'number';
  if (typeof v === 'string') return 'string';
  return isDict(v) ? 'object' : 'array';
}

function assistant(s: Segments, m: unknown, i: number, thinking: boolean): void {
  const attrs: [string, unknown][] = [['role', 'assistant']];
  if (truthy(get(m, 'name'))) attrs.push(['name', get(m, 'name')]);
  s.open('message', attrs);
  if (thinking) {
    const rc = get(m, 'reasoning_content');
    const reasoning = truthy(rc) ? rc : get(m, 'reasoning');
    s.open('think');
    if (reasoning !== null && reasoning !== undefined && pyStrip(pyStr(reasoning)) !== '') s.text(pyStr(reasoning));
    s.close('think');
  }
  s.open('response');
  s.content(get(m, 'content'), `messages[${i}].content`);
  s.close('response');
  const calls = get(m, 'tool_calls');
  if (truthy(calls)) {
    if (!Array.isArray(calls)) throw new K3RenderError('bad_arguments', 'must be a list', `messages[${i}].tool_calls`);
    s.open('tools');
    calls.forEach((call, k) => {
      const field = `messages[${i}].tool_calls[${k}]`;
      const fn = callFunction(call);
      if (!has(fn, 'name')) throw new K3RenderError('missing_function_name', 'a tool call needs a function name', `${field}.function.name`);
      s.open('call', [
        ['tool', get(fn, 'name')],
        ['index', k + 1],
      ]);
      const args = callArguments(call, `${field}.function.arguments`);
      if (typeof args === 'string') {
        s.open('json', [['type', 'object']]);
        s.text(args);
        s.close('json');
      } else {
        for (const [key, v] of args) {
          s.open('argument', [
            ['key', key],
            ['type', argType(v)],
          ]);
          s.text(typeof v === 'string' ? v : pyDumps(v));
          s.close('argument');
        }
      }
      s.close('call');
    });
    s.close('tools');
  }
  s.endMessage();
}

/** docs/spec/K3-CHAT.md §3.7: each run of tool messages whose every id matches a call of the last assistant is
 *  stably sorted into call order, its `tool` (and `name`, if present) set to the call's name. */
function resortToolResults(messages: readonly unknown[]): unknown[] {
  const out: unknown[] = [];
  let calls = new Map<string, [number, unknown]>();
  for (let i = 0; i < messages.length; ) {
    const m = messages[i];
    if (get(m, 'role') === 'assistant') {
      calls = new Map();
      const tc = get(m, 'tool_calls');
      if (Array.isArray(tc)) {
        tc.forEach((call, k) => {
          if (!isDict(call) || get(call, 'id') === null || get(call, 'id') === undefined) return;
          const id = pyStr(get(call, 'id'));
          const fn = get(call, 'function');
          if (!calls.has(id)) calls.set(id, [k + 1, isDict(fn) ? get(fn, 'name') : get(call, 'name')]);
        });
      }
    }
    if (get(m, 'role') !== 'tool') {
      out.push(m);
      i++;
      continue;
    }
    const run: { pos: number; off: number; m: unknown; name: unknown }[] = [];
    let unresolved = false;
    for (let off = 0; i < messages.length && get(messages[i], 'role') === 'tool'; i++, off++) {
      const t = messages[i];
      const id = has(t, 'tool_call_id') ? get(t, 'tool_call_id') : get(t, 'id');
      const hit = id === null || id === undefined ? undefined : calls.get(pyStr(id));
      if (!hit) unresolved = true;
      run.push({ pos: hit?.[0] ?? 0, off, m: t, name: hit?.[1] });
    }
    if (unresolved) {
      for (const r of run) out.push(r.m);
      continue;
    }
    run.sort((a, b) => a.pos - b.pos || a.off - b.off);
    for (const r of run) {
      if (r.name === null || r.name === undefined) out.push(r.m);
      else out.push({ ...plain(r.m), tool: r.name, ...(has(r.m, 'name') ? { name: r.name } : {}) });
    }
  }
  return out;
}

const plain = (m: unknown): Record<string, unknown> => Object.fromEntries(dictEntries(m) ?? []);

/** The response schema: an explicit `response_schema` wins, else `json_schema.schema`, else
 *  `json_schema.json_schema`, else `json_schema` itself. */
function responseSchema(req: K3ChatRequest): unknown {
  if (req.response_schema !== undefined) return req.response_schema;
  const js = get(req.response_format, 'json_schema');
  if (js === null || js === undefined) return null;
  if (!isDict(js)) return js;
  return has(js, 'schema') ? get(js, 'schema') : has(js, 'json_schema') ? get(js, 'json_schema') : js;
}

/** The prompt's segments, in order (docs/spec/K3-CHAT.md §3.2). */
export function k3ChatSegments(req: K3ChatRequest): ChatSegment[] {
  if (!Array.isArray(req.messages)) throw new K3RenderError('bad_content', 'must be a list of messages', 'messages');
  const thinking = req.thinking === undefined || req.thinking === null ? true : truthy(req.thinking);
  const effort = req.thinking_effort === undefined ? 'max' : req.thinking_effort;
  if (thinking && effort !== null && effort !== undefined && !(K3_THINKING_EFFORTS as readonly unknown[]).includes(effort)) {
    throw new K3RenderError('invalid_thinking_effort', `must be one of ${K3_THINKING_EFFORTS.join(', ')}, got ${JSON.stringify(effort)}`, 'thinking_effort');
  }
  const s = new Segments(req.image_prompts);
  const tools = deepSort(req.tools);
  if (truthy(tools)) toolDeclare(s, tools, false);
  if (thinking && typeof effort === 'string') s.system('thinking-effort', `${EFFORT_BODY}${effort}\`.`);

  let lastCalls: unknown = undefined;
  let toolIndex = 0;
  resortToolResults(req.messages).forEach((m, i) => {
    const role = get(m, 'role');
    const named = (r: string): [string, unknown][] => (truthy(get(m, 'name')) ? [['role', r], ['name', get(m, 'name')]] : [['role', r]]);
    if (role === 'user' || (role === 'system' && !truthy(get(m, 'tools')))) {
      s.open('message', named(role));
      s.content(get(m, 'content'), `messages[${i}].content`);
      s.endMessage();
    } else if (role === 'system') {
      toolDeclare(s, deepSort(get(m, 'tools')), true);
    } else if (role === 'tool') {
      toolIndex++;
      let name = has(m, 'tool') ? get(m, 'tool') : get(m, 'name');
      if ((name === null || name === undefined) && Array.isArray(lastCalls) && toolIndex <= lastCalls.length) {
        const fn = callFunction(lastCalls[toolIndex - 1]);
        if (!has(fn, 'name')) throw new K3RenderError('missing_function_name', 'a tool call needs a function name', `messages[${i}]`);
        name = get(fn, 'name');
      }
      if (name === null || name === undefined) {
        throw new K3RenderError('unresolvable_tool_name', 'a tool message needs "tool" or "name", or a matching assistant tool call', `messages[${i}]`);
      }
      s.open('message', [
        ['role', 'tool'],
        ['tool', name],
        ['index', toolIndex],
      ]);
      s.content(get(m, 'content'), `messages[${i}].content`);
      s.endMessage();
    } else if (role === 'assistant') {
      lastCalls = get(m, 'tool_calls');
      toolIndex = 0;
      assistant(s, m, i, thinking);
    } else {
      throw new K3RenderError('unknown_role', `must be system, user, assistant or tool, got ${JSON.stringify(role ?? null)}`, `messages[${i}].role`);
    }
  });

  if (req.tool_choice === 'required') s.system('tool-choice', 'The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.');
  else if (req.tool_choice === 'none') s.system('tool-choice', 'The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.');

  const rf = req.response_format;
  const rfType = isDict(rf) ? (has(rf, 'type') ? get(rf, 'type') : rf) : rf;
  if (rfType === 'json_object') s.system('response-format', `The system is invoked with \`response_format=json_object\`.\n${RF_HEAD}`);
  else if (rfType === 'json_schema') {
    const schema = compact(deepSort(responseSchema(req)));
    s.system('response-format', `The system is invoked with \`response_format=json_schema\`.\n${RF_HEAD}\nThe JSON data must match the following schema:\n\`\`\`json\n${schema}\n\`\`\``);
  }

  if (req.add_generation_prompt === undefined || req.add_generation_prompt === null || truthy(req.add_generation_prompt)) {
    s.open('message', [['role', 'assistant']]);
    s.open(thinking ? 'think' : 'response');
  }
  s.checkImages();
  return s.out;
}
