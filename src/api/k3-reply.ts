// A K3 reply, parsed on token ids as it streams (docs/spec/K3-CHAT.md §3.5, §3.8, §7): reasoning until
// `<|close|>think<|sep|>`, content in the response channel, then tool calls. Text is released as
// soon as it is decoded (only a tag's own text, between a control id and `<|sep|>`, is held), so
// the deltas of push() always concatenate to the fields finish() reports at that point.

import type { StreamDecoder, Tokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';
import { CallArguments } from './k3-arguments.js';
import { k3Controls, mayBeNamed, parseTag, type Control, type Tag } from './k3-markup.js';

export interface K3ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** What one push() releases: text of a channel, or a call once its `<|close|>call<|sep|>` is
 *  seen (`index` = its place in tool_calls, from 0, as OpenAI stream chunks count). */
export interface K3Delta {
  reasoning_content?: string;
  content?: string;
  tool_call?: K3ToolCall & { index: number };
}

export type K3State = 'think' | 'after_think' | 'response' | 'after_response' | 'tools' | 'call' | 'argument' | 'json' | 'after_tools' | 'done';

export interface K3Parsed {
  /** null when the prompt opened the response channel (thinking off). */
  reasoning_content: string | null;
  content: string;
  tool_calls: K3ToolCall[];
  /** `<|close|>message<|sep|>` or `<|end_of_msg|>` seen. */
  complete: boolean;
  finish_reason: 'stop' | 'tool_calls' | 'length';
  /** The call still open at the end: never to be executed. `name` is null while its tag is unfinished. */
  truncated_call: { name: string | null; arguments_partial: Record<string, unknown> } | null;
  /** Where the input stopped (informative). */
  state: K3State;
}

interface OpenCall {
  name: string;
  args: CallArguments;
}

/** An argument or json block being read: its attributes and the raw text so far. */
interface OpenBlock {
  key: string;
  type: string;
  text: string;
}

const TAG_NAMES = ['message', 'think', 'response', 'tools', 'call', 'argument', 'json'];

/** A tag's text so far may still be a tag of K3's grammar: its first word is (a prefix of) one
 *  of the tag names, and it is not longer than any real tag can be. */
function mayBeTag(text: string): boolean {
  if (text.length > 4096) return false;
  const m = /^(\S*)(\s|$)/.exec(text)!;
  const word = m[1]!;
  return m[2] === '' ? TAG_NAMES.some((n) => n.startsWith(word)) : TAG_NAMES.includes(word);
}

export class K3ReplyParser {
  private readonly controls: ReadonlyMap<number, Control>;
  private readonly decoder: StreamDecoder;
  private mode: K3State;
  /** A tag after `<|open|>` / `<|close|>` whose `<|sep|>` has not come yet. */
  private tag: { close: boolean; text: string } | null = null;
  private reasoning = '';
  private content = '';
  /** Whitespace after `<|close|>think<|sep|>`: content only if more text follows before a tag. */
  private held = '';
  private readonly calls: K3ToolCall[] = [];
  private call: OpenCall | null = null;
  private block: OpenBlock | null = null;
  private out: K3Delta[] = [];

  constructor(private readonly tok: Tokenizer, private readonly promptChannel: 'think' | 'response') {
    if (promptChannel !== 'think' && promptChannel !== 'response') throw new UserError(`K3 reply: prompt channel must be "think" or "response", not ${JSON.stringify(promptChannel)}`);
    this.controls = k3Controls(tok);
    this.decoder = tok.streamDecoder();
    this.mode = promptChannel;
  }

  /** `<|close|>message<|sep|>` or `<|end_of_msg|>` seen: the turn is over (later ids are ignored). */
  get complete(): boolean {
    return this.mode === 'done';
  }

  /** Feed one generated id; returns the deltas it releases (often none). */
  push(id: number): K3Delta[] {
    this.out = [];
    if (this.mode === 'done') return this.out;
    const c = this.controls.get(id);
    if (c !== undefined) {
      // a character cut off by a control id cannot finish: its bytes become U+FFFD
      this.text(this.decoder.flush());
      this.control(c);
    } else if (!this.tok.isSpecial(id)) {
      this.text(this.decoder.push(id));
    } // other specials ([EOS], media, reserved slots) are neither text nor markup
    return this.out;
  }

  /** The reply as parsed so far (call it at the stop id or the token limit; it changes nothing,
   *  so it may also be called mid-stream). Bytes of an unfinished character and an unfinished
   *  tag are left out, as push() never released them. */
  finish(): K3Parsed {
    const complete = this.mode === 'done';
    const pendingCall = this.callTagOpen();
    const truncated = this.call !== null ? { name: this.call.name, arguments_partial: this.call.args.partial() } : pendingCall ? { name: null, arguments_partial: {} } : null;
    return {
      reasoning_content: this.promptChannel === 'think' ? this.reasoning : null,
      content: this.content,
      tool_calls: this.calls.map((c) => ({ ...c, function: { ...c.function } })),
      complete,
      finish_reason: complete ? (this.calls.length > 0 ? 'tool_calls' : 'stop') : 'length',
      truncated_call: truncated,
      state: pendingCall ? 'call' : this.mode,
    };
  }

  /** An unfinished `<|open|>call …` tag: in the tools section any tag that may still be named
   *  `call` (nothing else opens there), elsewhere only one already named so. */
  private callTagOpen(): boolean {
    const t = this.tag;
    if (this.call !== null || t === null || t.close || this.mode === 'done') return false;
    return this.mode === 'tools' || this.mode === 'after_tools' ? mayBeNamed(t.text, 'call') : /^\s*call\s/.test(t.text);
  }

  private emit(field: 'reasoning_content' | 'content', s: string): void {
    const last = this.out[this.out.length - 1];
    if (last !== undefined && last[field] !== undefined) last[field] += s;
    else this.out.push({ [field]: s });
  }

  private text(s: string): void {
    if (s === '') return;
    if (this.tag !== null) {
      this.tag.text += s;
      if (mayBeTag(this.tag.text)) return;
      // no tag can be named so: the control id was noise (a weak model's), its text is text
      const t = this.tag.text;
      this.tag = null;
      s = t;
    }
    switch (this.mode) {
      case 'think':
        this.reasoning += s;
        this.emit('reasoning_content', s);
        return;
      case 'after_think': {
        // the model may skip `<|open|>response<|sep|>`: text after the think channel is content
        const t = this.held + s;
        if (t.trim() === '') {
          this.held = t;
          return;
        }
        this.held = '';
        this.mode = 'response';
        this.content += t;
        this.emit('content', t);
        return;
      }
      case 'response':
        this.content += s;
        this.emit('content', s);
        return;
      case 'argument':
      case 'json':
        this.block!.text += s;
        return;
      default: // text between tags carries nothing
    }
  }

  private control(c: Control): void {
    this.held = '';
    if (c === 'open' || c === 'close') {
      this.tag = { close: c === 'close', text: '' }; // an unfinished tag before it is dropped
    } else if (c === 'sep') {
      const t = this.tag;
      this.tag = null;
      if (t?.close === true) this.closeTag(parseTag(t.text));
      else if (t !== null) this.openTag(parseTag(t.text));
    } else this.mode = 'done';
  }

  private openTag(tag: Tag): void {
    const m = this.mode;
    switch (tag.name) {
      case 'response': // from think: an implicit `<|close|>think<|sep|>`
        if (m === 'think' || m === 'after_think') this.mode = 'response';
        return;
      case 'tools':
        if (m === 'think' || m === 'after_think' || m === 'response' || m === 'after_response') this.mode = 'tools';
        return;
      case 'call':
        // from any channel (an implicit tools opener); a call left open is dropped, never finished
        this.call = { name: tag.attrs.get('tool') ?? tag.attrs.get('name') ?? '', args: new CallArguments() };
        this.block = null;
        this.mode = 'call';
        return;
      case 'argument':
      case 'json':
        if (m === 'argument' || m === 'json') this.endBlock(); // a missing close tag
        else if (m !== 'call') return;
        this.block = tag.name === 'json' ? { key: '', type: 'json', text: '' } : { key: tag.attrs.get('key') ?? '', type: tag.attrs.get('type') ?? 'string', text: '' };
        this.mode = tag.name;
        return;
      default: // think, message, unknown names: nothing to do
    }
  }

  private closeTag(tag: Tag): void {
    const m = this.mode;
    switch (tag.name) {
      case 'think':
        if (m === 'think') this.mode = 'after_think';
        return;
      case 'response':
        if (m === 'response') this.mode = 'after_response';
        return;
      case 'argument':
      case 'json':
        if (m === 'argument' || m === 'json') {
          this.endBlock();
          this.mode = 'call';
        }
        return;
      case 'call':
        if (m === 'argument' || m === 'json') this.endBlock(); // a missing close tag
        else if (m !== 'call') return;
        this.endCall();
        this.mode = 'tools';
        return;
      case 'tools':
        if (m === 'tools') this.mode = 'after_tools';
        return;
      case 'message':
        this.mode = 'done'; // a call still open stays the truncated call
        return;
      default:
    }
  }

  private endBlock(): void {
    const b = this.block!;
    if (b.type === 'json') this.call!.args.setRaw(b.text);
    else this.call!.args.add(b.key, b.text, b.type);
    this.block = null;
  }

  private endCall(): void {
    const c = this.call!;
    const call: K3ToolCall = { id: `call_${this.calls.length + 1}`, type: 'function', function: { name: c.name, arguments: c.args.text() } };
    this.calls.push(call);
    this.out.push({ tool_call: { ...call, function: { ...call.function }, index: this.calls.length - 1 } });
    this.call = null;
  }
}

/** A whole generated reply (ids after the generation prompt) at once. */
export function parseK3Reply(tok: Tokenizer, ids: Iterable<number>, promptChannel: 'think' | 'response'): K3Parsed {
  const p = new K3ReplyParser(tok, promptChannel);
  for (const id of ids) p.push(id);
  return p.finish();
}
