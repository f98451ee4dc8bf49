// K2 tool calls, parsed from the reply's tool-call section as K2's chat template writes it
// (docs/spec/ARCHITECTURE.md §6.5; the same grammar vLLM's kimi_k2 tool parser reads):
//   <|tool_calls_section_begin|>
//     <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|> ...
//   <|tool_calls_section_end|>
// Text before the section is the message content.

import { heldPrefix } from './held-prefix.js';

const SECTION_BEGIN = '<|tool_calls_section_begin|>';
const SECTION_END = '<|tool_calls_section_end|>';
const CALL = /<\|tool_call_begin\|>\s*([^<]*?)\s*<\|tool_call_argument_begin\|>([\s\S]*?)<\|tool_call_end\|>/g;

export interface ParsedToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** The content before the section and the calls in it (none when there is no section). */
export function parseK2ToolCalls(text: string): { content: string; calls: ParsedToolCall[] } {
  const at = text.indexOf(SECTION_BEGIN);
  if (at < 0) return { content: text, calls: [] };
  const end = text.indexOf(SECTION_END, at);
  const section = text.slice(at + SECTION_BEGIN.length, end < 0 ? undefined : end);
  const calls: ParsedToolCall[] = [];
  for (const m of section.matchAll(CALL)) {
    const ref = m[1]!; // "functions.get_weather:0"
    const colon = ref.lastIndexOf(':');
    const qualified = colon >= 0 ? ref.slice(0, colon) : ref;
    const name = qualified.startsWith('functions.') ? qualified.slice('functions.'.length) : qualified;
    calls.push({ id: ref, type: 'function', function: { name, arguments: m[2]!.trim() } });
  }
  return { content: text.slice(0, at), calls };
}

/** Streaming: content up to a tool-call section is released at once; from the section on, the
 *  text is held for parseK2ToolCalls at the end. */
export class ToolSectionHold {
  private held = '';
  private inSection = false;
  all = '';

  push(text: string): string {
    this.all += text;
    if (this.inSection) return '';
    const p = this.held + text;
    const at = p.indexOf(SECTION_BEGIN);
    if (at >= 0) {
      this.inSection = true;
      this.held = '';
      return p.slice(0, at);
    }
    const hold = heldPrefix(p, SECTION_BEGIN);
    this.held = p.slice(p.length - hold);
    return p.slice(0, p.length - hold);
  }

  /** End: the held text when it was no section after all. */
  finish(): string {
    const h = this.inSection ? '' : this.held;
    this.held = '';
    return h;
  }
}
