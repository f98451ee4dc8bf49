// An OpenAI chat request body -> the conversation and the chat-turn options, each field checked
// with a 400 naming it. K3's fields: tools (and dynamic tools on system messages), tool_choice,
// response_format, parallel_tool_calls, thinking as chat_template_kwargs.thinking or Moonshot's
// `thinking: {type, effort, keep}`, thinking effort as chat_template_kwargs.thinking_effort,
// thinking.effort or reasoning_effort (in that order), chat_template_kwargs.preserve_thinking.

import type { ChatMessage, ChatTurnOptions, ResponseFormat, ToolChoice, ToolSpec } from '../api/index.js';
import { badField } from './errors.js';

type Body = Record<string, unknown>;

const ROLES = new Set(['system', 'user', 'assistant', 'tool']);
const EFFORTS = ['low', 'high', 'max'];
/** Moonshot's tool names: a letter or underscore, then letters, digits, `_`, `-`, `.`; 256 at most. */
const TOOL_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,255}$/;

const isObject = (v: unknown): v is Body => v !== null && typeof v === 'object' && !Array.isArray(v);

export interface ChatRequest {
  messages: ChatMessage[];
  turn: ChatTurnOptions;
}

function content(c: unknown, field: string, nullable: boolean): void {
  if (typeof c === 'string') return;
  if ((c === null || c === undefined) && nullable) return;
  const ok = Array.isArray(c) && c.every((p) => isObject(p) && p.type === 'text' && typeof p.text === 'string');
  if (!ok) throw badField(field, 'must be a string or an array of text parts');
}

/** One tool declaration; its name goes into `seen` (duplicates are refused). */
function tool(t: unknown, field: string, seen: Set<string>): ToolSpec {
  if (!isObject(t)) throw badField(field, 'must be an object {"type": "function", "function": {...}}');
  if (t.type !== 'function') throw badField(`${field}.type`, `must be "function", got ${JSON.stringify(t.type)}`);
  const f = t.function;
  if (!isObject(f)) throw badField(`${field}.function`, 'must be an object with a name');
  if (typeof f.name !== 'string' || !TOOL_NAME.test(f.name)) {
    throw badField(`${field}.function.name`, `must start with a letter or underscore and have only letters, digits, _ - . (at most 256), got ${JSON.stringify(f.name)}`);
  }
  if (seen.has(f.name)) throw badField(`${field}.function.name`, `duplicate tool name ${JSON.stringify(f.name)}`);
  seen.add(f.name);
  if (f.description !== undefined && f.description !== null && typeof f.description !== 'string') throw badField(`${field}.function.description`, 'must be a string');
  if (f.parameters !== undefined && f.parameters !== null && !isObject(f.parameters)) throw badField(`${field}.function.parameters`, 'must be a JSON schema object');
  if (f.strict !== undefined && f.strict !== null && typeof f.strict !== 'boolean') throw badField(`${field}.function.strict`, 'must be a boolean');
  return t as unknown as ToolSpec;
}

function tools(v: unknown, field: string, seen: Set<string>): ToolSpec[] {
  if (!Array.isArray(v)) throw badField(field, 'must be an array of tools');
  return v.map((t, i) => tool(t, `${field}[${i}]`, seen));
}

function toolCalls(v: unknown, field: string): void {
  if (v === undefined || v === null) return;
  if (!Array.isArray(v)) throw badField(field, 'must be an array');
  v.forEach((c, i) => {
    const f = `${field}[${i}]`;
    if (!isObject(c)) throw badField(f, 'must be an object');
    const fn = isObject(c.function) ? c.function : c;
    if (typeof fn.name !== 'string' || fn.name === '') throw badField(`${f}.function.name`, 'must be a non-empty string');
    const a = fn.arguments;
    if (a !== undefined && a !== null && typeof a !== 'string' && !isObject(a)) throw badField(`${f}.function.arguments`, 'must be a JSON string or an object');
  });
}

function messages(b: Body, seen: Set<string>): { messages: ChatMessage[]; dynamic: number } {
  const m = b.messages;
  if (!Array.isArray(m) || m.length === 0) throw badField('messages', 'must be a non-empty array of messages');
  let dynamic = 0;
  const out = m.map((x, i) => {
    const f = `messages[${i}]`;
    if (!isObject(x)) throw badField(f, 'must be an object');
    if (typeof x.role !== 'string' || !ROLES.has(x.role)) throw badField(`${f}.role`, `must be one of system, user, assistant, tool, got ${JSON.stringify(x.role)}`);
    if (x.tools !== undefined && x.tools !== null) {
      if (x.role !== 'system') throw badField(`${f}.tools`, `tools may be declared only in a system message, not in a ${x.role} message`);
      const n = tools(x.tools, `${f}.tools`, seen).length;
      dynamic += n;
      const c = x.content;
      const empty = c === undefined || c === null || c === '' || (Array.isArray(c) && c.length === 0);
      if (!empty) throw badField(`${f}.content`, 'a system message that declares tools must have no content');
    } else content(x.content, `${f}.content`, x.role === 'assistant');
    if (x.name !== undefined && x.name !== null && typeof x.name !== 'string') throw badField(`${f}.name`, 'must be a string');
    if (x.role === 'assistant') {
      toolCalls(x.tool_calls, `${f}.tool_calls`);
      for (const k of ['reasoning_content', 'reasoning']) if (x[k] !== undefined && x[k] !== null && typeof x[k] !== 'string') throw badField(`${f}.${k}`, 'must be a string');
    }
    if (x.role === 'tool' && (typeof x.tool_call_id !== 'string' || x.tool_call_id === '')) throw badField(`${f}.tool_call_id`, 'a tool message needs the id of the call it answers');
    return x as unknown as ChatMessage;
  });
  return { messages: out, dynamic };
}

function toolChoice(v: unknown, haveTools: boolean, names: Set<string>): ToolChoice | undefined {
  if (v === undefined || v === null) return undefined;
  if (v === 'auto' || v === 'none') return v;
  if (v === 'required') {
    if (!haveTools) throw badField('tool_choice', '"required" needs tools to choose from (tools is absent or empty)');
    return v;
  }
  if (isObject(v) && v.type === 'function' && isObject(v.function) && typeof v.function.name === 'string') {
    if (!names.has(v.function.name)) throw badField('tool_choice', `names the function ${JSON.stringify(v.function.name)}, which no tool declares`);
    return { type: 'function', function: { name: v.function.name } };
  }
  throw badField('tool_choice', `must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}, got ${JSON.stringify(v)}`);
}

function responseFormat(v: unknown): ResponseFormat | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw badField('response_format', 'must be an object with a type');
  if (v.type === 'text' || v.type === 'json_object') return { type: v.type };
  if (v.type === 'json_schema') {
    const js = v.json_schema;
    if (!isObject(js)) throw badField('response_format.json_schema', 'must be an object {"name", "schema", "strict"}');
    if (typeof js.name !== 'string' || js.name === '') throw badField('response_format.json_schema.name', 'must be a non-empty string');
    if (!isObject(js.schema)) throw badField('response_format.json_schema.schema', 'must be a JSON schema object');
    if (js.strict !== undefined && js.strict !== null && typeof js.strict !== 'boolean') throw badField('response_format.json_schema.strict', `must be a boolean, got ${JSON.stringify(js.strict)}`);
    return { type: 'json_schema', json_schema: js };
  }
  throw badField('response_format.type', `must be "text", "json_object" or "json_schema", got ${JSON.stringify(v.type)}`);
}

function effort(v: unknown, field: string): 'low' | 'high' | 'max' | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || !EFFORTS.includes(v)) throw badField(field, `must be one of low, high, max, got ${JSON.stringify(v)}`, 'invalid_thinking_effort');
  return v as 'low' | 'high' | 'max';
}

function boolField(o: Body, k: string, field: string): boolean | undefined {
  const v = o[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw badField(field, `must be a boolean, got ${JSON.stringify(v)}`);
  return v;
}

/** Thinking on / off and its effort, from the three places a client may put them. */
function thinking(b: Body): Pick<ChatTurnOptions, 'thinking' | 'thinkingEffort' | 'preserveThinking'> {
  const kw = b.chat_template_kwargs ?? {};
  if (!isObject(kw)) throw badField('chat_template_kwargs', 'must be an object');
  let on = boolField(kw, 'thinking', 'chat_template_kwargs.thinking');
  let eff = effort(kw.thinking_effort, 'chat_template_kwargs.thinking_effort');
  const preserve = boolField(kw, 'preserve_thinking', 'chat_template_kwargs.preserve_thinking');
  const t = b.thinking;
  if (t !== undefined && t !== null) {
    if (typeof t === 'boolean') on ??= t;
    else if (isObject(t)) {
      const type = t.type ?? 'enabled';
      if (type !== 'enabled' && type !== 'disabled') throw badField('thinking.type', `must be "enabled" or "disabled", got ${JSON.stringify(type)}`);
      on ??= type === 'enabled';
      if (type === 'enabled' && t.keep !== undefined && t.keep !== null && t.keep !== 'all') throw badField('thinking.keep', `only "all" is supported (earlier reasoning is kept), got ${JSON.stringify(t.keep)}`);
      eff ??= effort(t.effort, 'thinking.effort');
    } else throw badField('thinking', 'must be an object {"type": "enabled" | "disabled", "effort": ...} or a boolean');
  }
  // OpenAI's reasoning_effort "none" turns thinking off (Moonshot's API reads it so)
  if (b.reasoning_effort === 'none') on ??= false;
  else if (eff === undefined) eff = effort(b.reasoning_effort, 'reasoning_effort');
  return { ...(on !== undefined ? { thinking: on } : {}), ...(eff !== undefined ? { thinkingEffort: eff } : {}), ...(preserve !== undefined ? { preserveThinking: preserve } : {}) };
}

/** The conversation and options of a chat request (K3 and K2 alike; K2 ignores K3's fields). */
export function chatRequest(b: Body): ChatRequest {
  const seen = new Set<string>();
  const declared = b.tools === undefined || b.tools === null ? [] : tools(b.tools, 'tools', seen);
  const { messages: msgs, dynamic } = messages(b, seen);
  const choice = toolChoice(b.tool_choice, declared.length + dynamic > 0, seen);
  const turn: ChatTurnOptions = {
    ...thinking(b),
    ...(declared.length > 0 ? { tools: declared } : {}),
    ...(choice !== undefined ? { toolChoice: choice } : {}),
  };
  const rf = responseFormat(b.response_format);
  if (rf) turn.responseFormat = rf;
  const ptc = boolField(b, 'parallel_tool_calls', 'parallel_tool_calls');
  if (ptc !== undefined) turn.parallelToolCalls = ptc;
  return { messages: msgs, turn };
}
