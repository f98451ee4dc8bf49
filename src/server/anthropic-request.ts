// An Anthropic Messages request -> the OpenAI-shaped chat body that chat-turn.ts runs. Each
// field is checked here with a 400 naming it in Anthropic's dotted style (messages.1.content.0.id),
// so a client sees its own field names; what reaches prepareTurn is already well formed.

import { ApiError, badField } from './errors.js';
import type { Served } from './served.js';

type Body = Record<string, unknown>;

const isObject = (v: unknown): v is Body => v !== null && typeof v === 'object' && !Array.isArray(v);
const present = (v: unknown): boolean => v !== undefined && v !== null;
/** Anthropic's tool names (128 at most) that K3's renderer also takes (no leading digit). */
const TOOL_NAME = /^[a-zA-Z_][a-zA-Z0-9_-]{0,127}$/;
/** Blocks a client may send that this server cannot read: a clear 400 rather than silence. */
const UNSUPPORTED = new Set(['image', 'document', 'search_result', 'container_upload', 'server_tool_use', 'web_search_tool_result', 'web_fetch_tool_result', 'code_execution_tool_result']);

function str(v: unknown, field: string, nonEmpty = false): string {
  if (v === undefined || v === null) throw badField(field, 'is required');
  if (typeof v !== 'string') throw badField(field, `must be a string, got ${JSON.stringify(v)}`);
  if (nonEmpty && v === '') throw badField(field, 'must not be empty');
  return v;
}

/** b[k] when present, a number in [lo, hi]; `field` names it in the 400. */
function num(b: Body, k: string, lo: number, hi: number, integer = false, field = k): number | undefined {
  const v = b[k];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badField(field, `must be a number, got ${JSON.stringify(v)}`);
  if (integer && !Number.isInteger(v)) throw badField(field, `must be an integer, got ${v}`);
  if (v < lo || v > hi) throw badField(field, `must be in [${lo}, ${hi}], got ${v}`);
  return v;
}

/** The 400 for a block whose type has no place here: one this server reads nowhere, or one out of place. */
function badBlock(type: unknown, field: string, allowed: string): ApiError {
  if (typeof type === 'string' && UNSUPPORTED.has(type)) return badField(`${field}.type`, `${JSON.stringify(type)} blocks are not supported by this server (text only)`);
  return badField(`${field}.type`, `${allowed}, got ${JSON.stringify(type)}`);
}

/** Text blocks (or a string) -> one string, the way the chat renderer joins text parts. */
function textOf(v: unknown, field: string): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw badField(field, 'must be a string or an array of text blocks');
  return v
    .map((p, i) => {
      if (!isObject(p)) throw badField(`${field}.${i}`, 'must be a content block object');
      if (p.type !== 'text') throw badBlock(p.type, `${field}.${i}`, 'must be "text"');
      return str(p.text, `${field}.${i}.text`);
    })
    .join('');
}

type OpenAiMessage = Body & { role: string };

/** A user turn's blocks: tool_result blocks become tool messages (in order), text the user message. */
function userMessages(content: unknown, field: string, openCalls: Set<string>): OpenAiMessage[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  if (!Array.isArray(content)) throw badField(field, 'must be a string or an array of content blocks');
  const out: OpenAiMessage[] = [];
  let text: string | null = null;
  const flush = () => {
    if (text !== null) out.push({ role: 'user', content: text });
    text = null;
  };
  content.forEach((p, i) => {
    const f = `${field}.${i}`;
    if (!isObject(p)) throw badField(f, 'must be a content block object');
    if (p.type === 'text') text = (text ?? '') + str(p.text, `${f}.text`);
    else if (p.type === 'tool_result') {
      flush();
      const id = str(p.tool_use_id, `${f}.tool_use_id`, true);
      if (!openCalls.has(id)) throw badField(`${f}.tool_use_id`, `${JSON.stringify(id)} answers no tool_use block of the assistant message before it`);
      openCalls.delete(id);
      if (present(p.is_error) && typeof p.is_error !== 'boolean') throw badField(`${f}.is_error`, 'must be a boolean');
      const result = present(p.content) ? textOf(p.content, `${f}.content`) : '';
      // the K3 grammar has no error flag on a tool result: the model reads it in the text
      out.push({ role: 'tool', tool_call_id: id, content: p.is_error === true ? `Error: ${result}` : result });
    } else throw badBlock(p.type, f, 'a user message holds text and tool_result blocks');
  });
  flush();
  return out;
}

/** An assistant turn's blocks -> one assistant message: thinking, text, tool calls. */
function assistantMessage(content: unknown, field: string, calls: Set<string>): OpenAiMessage {
  if (typeof content === 'string') return { role: 'assistant', content };
  if (!Array.isArray(content)) throw badField(field, 'must be a string or an array of content blocks');
  let text = '';
  let reasoning: string | null = null;
  const toolCalls: Body[] = [];
  content.forEach((p, i) => {
    const f = `${field}.${i}`;
    if (!isObject(p)) throw badField(f, 'must be a content block object');
    if (p.type === 'text') text += str(p.text, `${f}.text`);
    else if (p.type === 'thinking') reasoning = (reasoning ?? '') + str(p.thinking, `${f}.thinking`);
    else if (p.type === 'redacted_thinking') return; // opaque to anyone but its issuer
    else if (p.type === 'tool_use') {
      const id = str(p.id, `${f}.id`, true);
      if (calls.has(id)) throw badField(`${f}.id`, `${JSON.stringify(id)} is used by another tool_use block`);
      calls.add(id);
      const name = str(p.name, `${f}.name`, true);
      if (!isObject(p.input)) throw badField(`${f}.input`, 'must be an object');
      toolCalls.push({ id, type: 'function', function: { name, arguments: JSON.stringify(p.input) } });
    } else throw badBlock(p.type, f, 'an assistant message holds text, thinking, redacted_thinking and tool_use blocks');
  });
  return { role: 'assistant', content: toolCalls.length > 0 && text === '' ? null : text, ...(reasoning !== null ? { reasoning_content: reasoning } : {}), ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) };
}

function messagesOf(b: Body): OpenAiMessage[] {
  const out: OpenAiMessage[] = [];
  if (present(b.system)) out.push({ role: 'system', content: textOf(b.system, 'system') });
  const m = b.messages;
  if (!Array.isArray(m) || m.length === 0) throw badField('messages', 'must be a non-empty array of messages');
  let openCalls = new Set<string>(); // ids of the last assistant turn's tool_use blocks not yet answered
  m.forEach((x, i) => {
    const f = `messages.${i}`;
    if (!isObject(x)) throw badField(f, 'must be an object with role and content');
    if (x.role === 'user') out.push(...userMessages(x.content, `${f}.content`, openCalls));
    else if (x.role === 'assistant') {
      openCalls = new Set();
      out.push(assistantMessage(x.content, `${f}.content`, openCalls));
    } else if (x.role === 'system') out.push({ role: 'system', content: textOf(x.content, `${f}.content`) });
    else throw badField(`${f}.role`, `must be "user" or "assistant", got ${JSON.stringify(x.role)}`);
  });
  return out;
}

function toolsOf(b: Body): Body[] | undefined {
  if (!present(b.tools)) return undefined;
  if (!Array.isArray(b.tools)) throw badField('tools', 'must be an array of tools');
  const names = new Set<string>();
  return b.tools.map((t, i) => {
    const f = `tools.${i}`;
    if (!isObject(t)) throw badField(f, 'must be an object with name and input_schema');
    if (present(t.type) && t.type !== 'custom') throw badField(`${f}.type`, `server tools (${JSON.stringify(t.type)}) are not supported here; declare client tools with name, description and input_schema`);
    const name = str(t.name, `${f}.name`);
    if (!TOOL_NAME.test(name)) throw badField(`${f}.name`, `must start with a letter or underscore and have only letters, digits, _ and - (128 at most), got ${JSON.stringify(name)}`);
    if (names.has(name)) throw badField(`${f}.name`, `${JSON.stringify(name)} is declared twice`);
    names.add(name);
    if (present(t.description)) str(t.description, `${f}.description`);
    const schema = t.input_schema;
    if (!isObject(schema)) throw badField(`${f}.input_schema`, 'must be a JSON schema object');
    if (schema.type !== 'object') throw badField(`${f}.input_schema.type`, `must be "object", got ${JSON.stringify(schema.type)}`);
    if (present(t.strict) && typeof t.strict !== 'boolean') throw badField(`${f}.strict`, 'must be a boolean');
    const fn: Body = { name, ...(present(t.description) ? { description: t.description } : {}), parameters: schema, ...(t.strict === true ? { strict: true } : {}) };
    return { type: 'function', function: fn };
  });
}

/** tool_choice as OpenAI's tool_choice, and its disable_parallel_tool_use as parallel_tool_calls. */
function toolChoiceOf(b: Body, tools: Body[] | undefined): { choice?: unknown; parallel?: false } {
  const c = b.tool_choice;
  if (!present(c)) return {};
  if (!isObject(c)) throw badField('tool_choice', 'must be an object {type: "auto" | "any" | "tool" | "none"}');
  if (present(c.disable_parallel_tool_use) && typeof c.disable_parallel_tool_use !== 'boolean') throw badField('tool_choice.disable_parallel_tool_use', 'must be a boolean');
  const parallel = c.disable_parallel_tool_use === true && c.type !== 'none' ? ({ parallel: false } as const) : {};
  if (c.type === 'auto') return { choice: 'auto', ...parallel };
  if (c.type === 'none') return { choice: 'none' };
  if ((c.type === 'any' || c.type === 'tool') && !tools?.length) throw badField('tool_choice', `type ${JSON.stringify(c.type)} needs tools`);
  if (c.type === 'any') return { choice: 'required', ...parallel };
  if (c.type === 'tool') {
    const name = str(c.name, 'tool_choice.name');
    if (!tools!.some((t) => (t.function as Body).name === name)) throw badField('tool_choice.name', `no tool named ${JSON.stringify(name)} in tools`);
    return { choice: { type: 'function', function: { name } }, ...parallel };
  }
  throw badField('tool_choice.type', `must be "auto", "any", "tool" or "none", got ${JSON.stringify(c.type)}`);
}

/** Anthropic's thinking switch -> K3's; absent stays absent, so the turn's own default holds. */
function thinkingOf(b: Body): boolean | undefined {
  const t = b.thinking;
  if (!present(t)) return undefined;
  if (!isObject(t)) throw badField('thinking', 'must be an object {type: "enabled" | "adaptive" | "disabled"}');
  if (t.type === 'disabled') return false;
  if (t.type === 'adaptive') return true;
  if (t.type === 'enabled') {
    // K3 has no thinking budget: the number is checked, not enforced
    num(t, 'budget_tokens', 1, Number.MAX_SAFE_INTEGER, true, 'thinking.budget_tokens');
    if (!present(t.budget_tokens)) throw badField('thinking.budget_tokens', 'is required when thinking is enabled');
    return true;
  }
  throw badField('thinking.type', `must be "enabled", "adaptive" or "disabled", got ${JSON.stringify(t.type)}`);
}

function stopOf(b: Body): string[] | undefined {
  const s = b.stop_sequences;
  if (!present(s)) return undefined;
  if (!Array.isArray(s)) throw badField('stop_sequences', 'must be an array of strings');
  return s.map((x, i) => str(x, `stop_sequences.${i}`, true));
}

/** The model named in the request must be the one served: 404 otherwise, as Anthropic answers an unknown model. */
function checkModel(s: Served, b: Body): string {
  const model = str(b.model, 'model', true);
  if (model !== s.name) throw new ApiError(404, `model: ${model} (this server serves ${s.name})`, 'not_found_error', 'model', 'model_not_found');
  return model;
}

/**
 * The Messages request `b` as an OpenAI chat body for prepareTurn. `forCount`: the body of
 * /v1/messages/count_tokens, which has no max_tokens.
 */
export function toChatBody(s: Served, b: Body, forCount = false): Body {
  const model = checkModel(s, b);
  const maxTokens = num(b, 'max_tokens', 1, Number.MAX_SAFE_INTEGER, true);
  if (maxTokens === undefined && !forCount) throw badField('max_tokens', 'is required');
  const messages = messagesOf(b);
  const tools = toolsOf(b);
  const toolChoice = toolChoiceOf(b, tools);
  const thinking = thinkingOf(b);
  const stop = stopOf(b);
  let temperature = num(b, 'temperature', 0, 1);
  const topP = num(b, 'top_p', Number.MIN_VALUE, 1);
  // no top-k sampler here: top_k = 1 is greedy, any other k is accepted and has no effect
  if (num(b, 'top_k', 1, Number.MAX_SAFE_INTEGER, true) === 1) temperature = 0;
  if (present(b.metadata) && !isObject(b.metadata)) throw badField('metadata', 'must be an object');
  if (present(b.stream) && typeof b.stream !== 'boolean') throw badField('stream', 'must be a boolean');
  const out: Body = { model, messages };
  if (maxTokens !== undefined) out.max_tokens = maxTokens;
  if (tools?.length) out.tools = tools;
  if (toolChoice.choice !== undefined && tools?.length) out.tool_choice = toolChoice.choice;
  if (toolChoice.parallel === false && tools?.length) out.parallel_tool_calls = false;
  if (thinking !== undefined) out.chat_template_kwargs = { thinking };
  if (stop?.length) out.stop = stop;
  if (temperature !== undefined) out.temperature = temperature;
  if (topP !== undefined) out.top_p = topP;
  return out;
}
