// Chat formats (docs/spec/ARCHITECTURE.md §6.5-6.6, docs/spec/K3-CHAT.md):
// * K2 / Kimi Linear: the "im" envelope. The `chat_template` of tokenizer_config.json is
//   rendered with @huggingface/jinja (the engine transformers.js uses; the goldens were made
//   with it), then the whole string is encoded with every special allowed, as the reference
//   `apply_chat_template(tokenize=True)` does. Without a template, renderK2Fallback writes the
//   documented envelope in code.
// * K3: XTML, the release renderer's segments (k3-chat.ts, K3-CHAT.md), encoded segment-wise.

import { Template } from '@huggingface/jinja';
import { UserError } from '../util/errors.js';
import type { Tokenizer, TokenizerFamily } from './tokenizer.js';
import type { ChatMessage, ChatSegment, ContentPart, ToolCall } from './chat-types.js';
import { K3_CLOSE, K3_END, K3_OPEN, K3_SEP, encodeK3Segments, k3ChatSegments } from './k3-chat.js';
import { pyDumps } from './pyjson.js';

export type { ChatMessage, ChatSegment, ContentPart, ToolCall };

export interface ChatOptions {
  /** Default: the tokenizer's family. */
  format?: TokenizerFamily;
  /** Append the assistant prefix the model continues from. Default false. */
  addGenerationPrompt?: boolean;
  /** Tool schemas (keys are deep-sorted as the reference renderers do). */
  tools?: unknown[];
  /** K2: ignore the config's chat_template and use the built-in envelope. */
  ignoreTemplate?: boolean;
  /** K3: thinking mode (a think channel in every assistant message and the generation prefix,
   *  and the thinking-effort message). Default true, as the release entry point. */
  thinking?: boolean;
  /** K3 with thinking: low, high or max; undefined = max (the release entry point), null = no
   *  effort message. */
  thinkingEffort?: string | null;
}

export interface RenderedChat {
  ids: number[];
  /** The rendered string (for debugging; K3 ids are NOT the encoding of this string with
   *  specials allowed, see `segments`). */
  text: string;
  /** K3 only: the segments encoded one by one. */
  segments?: ChatSegment[];
}

export const K2_DEFAULT_SYSTEM = 'You are Kimi, an AI assistant created by Moonshot AI.';

/** Render a conversation to ids in the model's chat format. */
export function renderChat(tok: Tokenizer, messages: readonly ChatMessage[], opts: ChatOptions = {}): RenderedChat {
  const format = opts.format ?? tok.family;
  if (format === 'k3') return renderK3(tok, messages, opts);
  if (format !== 'k2') throw new UserError(`chat format must be k2 or k3, got ${JSON.stringify(format)}`);
  requireSpecials(tok, ['<|im_system|>', '<|im_user|>', '<|im_assistant|>', '<|im_middle|>', '<|im_end|>'], 'k2');
  const tools = opts.tools === undefined ? undefined : (deepSortKeys(opts.tools) as unknown[]);
  const text =
    tok.chatTemplate !== undefined && !opts.ignoreTemplate
      ? renderJinja(tok, tok.chatTemplate, messages, tools, opts.addGenerationPrompt ?? false)
      : renderK2Fallback(messages, tools, opts.addGenerationPrompt ?? false);
  return { ids: tok.encode(text, { allowSpecial: true }), text };
}

const templateCache = new Map<string, Template>();

function renderJinja(tok: Tokenizer, source: string, messages: readonly ChatMessage[], tools: unknown[] | undefined, addGen: boolean): string {
  let tpl = templateCache.get(source);
  try {
    if (tpl === undefined) {
      tpl = new Template(source);
      templateCache.set(source, tpl);
    }
    const ctx: Record<string, unknown> = {
      messages,
      add_generation_prompt: addGen,
      bos_token: tok.bosId !== undefined ? tok.specialName(tok.bosId) : '',
      eos_token: tok.eosId !== undefined ? tok.specialName(tok.eosId) : '',
    };
    if (tools !== undefined) ctx.tools = tools;
    return tpl.render(ctx);
  } catch (e) {
    throw new UserError(`chat_template (tokenizer_config.json): ${(e as Error).message}`);
  }
}

function contentText(m: ChatMessage): string {
  const c = m.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => (p.type === 'text' && typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

/** The K2 "im" envelope of docs/spec/ARCHITECTURE.md §6.5 in code (used when tokenizer_config.json has no template);
 *  output identical to the golden template's. */
export function renderK2Fallback(messages: readonly ChatMessage[], tools: unknown[] | undefined, addGenerationPrompt: boolean): string {
  let s = '';
  if (tools && tools.length > 0) s += `<|im_system|>tool_declare<|im_middle|>${pyJson(deepSortKeys(tools), ',', ':')}<|im_end|>`;
  messages.forEach((m, i) => {
    if (i === 0 && m.role !== 'system') s += `<|im_system|>system<|im_middle|>${K2_DEFAULT_SYSTEM}<|im_end|>`;
    s += m.role === 'user' ? '<|im_user|>' : m.role === 'assistant' ? '<|im_assistant|>' : '<|im_system|>';
    s += m.name ? m.name : m.role;
    s += '<|im_middle|>';
    if (m.role === 'tool') s += `## Return of ${m.tool_call_id ?? ''}\n`;
    s += contentText(m);
    if (m.role === 'assistant' && m.tool_calls && m.tool_calls.length > 0) {
      s += '<|tool_calls_section_begin|>';
      for (const call of m.tool_calls) {
        const args = call.function.arguments;
        s += `<|tool_call_begin|>${call.id}<|tool_call_argument_begin|>${typeof args === 'string' ? args : pyJson(args, ', ', ': ')}<|tool_call_end|>`;
      }
      s += '<|tool_calls_section_end|>';
    }
    s += '<|im_end|>';
  });
  if (addGenerationPrompt) s += '<|im_assistant|>assistant<|im_middle|>';
  return s;
}

/** Python `json.dumps(v, ensure_ascii=False, separators=(item, key))` for JSON values. */
export function pyJson(v: unknown, item: string, key: string): string {
  return pyDumps(v, { item, key });
}

/** Objects with their keys sorted at every depth (the reference sorts `tools` so). */
export function deepSortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(deepSortKeys);
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return Object.fromEntries(
      Object.keys(o)
        .sort()
        .map((k) => [k, deepSortKeys(o[k])]),
    );
  }
  return v;
}

function requireSpecials(tok: Tokenizer, names: string[], format: string): void {
  for (const n of names) {
    if (tok.specialId(n) === undefined) throw new UserError(`chat format ${format}: the tokenizer has no ${n} token (is this a ${format === 'k2' ? 'K3' : 'K2 / Kimi Linear'} tokenizer?)`);
  }
}

function renderK3(tok: Tokenizer, messages: readonly ChatMessage[], opts: ChatOptions): RenderedChat {
  requireSpecials(tok, [K3_OPEN, K3_CLOSE, K3_SEP, K3_END], 'k3');
  const segments = k3ChatSegments({
    messages,
    tools: opts.tools,
    thinking: opts.thinking ?? true,
    thinking_effort: opts.thinkingEffort,
    add_generation_prompt: opts.addGenerationPrompt ?? false,
  });
  return { ids: encodeK3Segments(tok, segments), text: segments.map((s) => s.text).join(''), segments };
}

// ---------------------------------------------------------------------------------------------

/** Ids that end an assistant turn: the model config's eos id(s), the tokenizer's eos_token,
 *  and the family's end-of-message tokens. K3: `<|end_of_msg|>` and `[EOS]` (163586, 163585);
 *  K2 / Kimi Linear: `<|im_end|>`, `[EOS]`, `[EOT]` (163586, 163585, 163593). Sorted. */
export function stopTokenIds(tok: Tokenizer, modelEosIds?: number | readonly number[] | null): number[] {
  const out = new Set<number>();
  if (typeof modelEosIds === 'number') out.add(modelEosIds);
  else if (modelEosIds) for (const id of modelEosIds) out.add(id);
  if (tok.eosId !== undefined) out.add(tok.eosId);
  const names = tok.family === 'k3' ? [K3_END, '[EOS]'] : ['<|im_end|>', '[EOS]', '[EOT]'];
  for (const n of names) {
    const id = tok.specialId(n);
    if (id !== undefined) out.add(id);
  }
  return [...out].sort((a, b) => a - b);
}
