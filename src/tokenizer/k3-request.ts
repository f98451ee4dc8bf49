// The body of a `/v1/chat/completions` request as the K3 renderer's request: the served entry
// point's defaults (thinking on, effort max) and the places clients put the thinking switches.
// `k3 render` and `k3 serve` both render through this, so a served prompt is what `k3 render`
// prints for the same body.

import { isDict, dictEntries } from './pyjson.js';
import { K3RenderError, type K3ChatRequest, type K3Message } from './k3-chat.js';

const get = (o: unknown, k: string): unknown => (dictEntries(o) ?? []).find(([key]) => key === k)?.[1];
const has = (o: unknown, k: string): boolean => (dictEntries(o) ?? []).some(([key]) => key === k);

export interface K3RequestDefaults {
  /** Thinking when the body does not say (default true, as the release entry point). */
  thinking?: boolean;
}

/**
 * `thinking` / `thinking_effort` may sit top-level or under `chat_template_kwargs` (which wins);
 * `thinking` may also be Moonshot's `{"type": "enabled" | "disabled", "effort", "keep"}`;
 * `reasoning_effort` is the effort when none of those gives one, and `"none"` there turns
 * thinking off. Absent thinking_effort means max, an explicit null no effort message.
 * `chat_template_kwargs.preserve_thinking: false` drops earlier turns' reasoning.
 */
export function k3RequestFromBody(body: unknown, defaults: K3RequestDefaults = {}): K3ChatRequest {
  if (!isDict(body)) throw new K3RenderError('bad_request', 'the request must be a JSON object', 'request');
  const kw = get(body, 'chat_template_kwargs');
  if (kw !== undefined && kw !== null && !isDict(kw)) throw new K3RenderError('bad_request', 'must be an object', 'chat_template_kwargs');
  const pick = (k: string): { found: boolean; v: unknown } =>
    has(kw, k) ? { found: true, v: get(kw, k) } : has(body, k) ? { found: true, v: get(body, k) } : { found: false, v: undefined };

  const messages = get(body, 'messages');
  if (!Array.isArray(messages)) throw new K3RenderError('bad_content', 'must be a list of messages', 'messages');
  const req: { -readonly [K in keyof K3ChatRequest]: K3ChatRequest[K] } = { messages: messages as K3Message[] };
  for (const k of ['tools', 'tool_choice', 'response_format', 'response_schema'] as const) if (has(body, k)) req[k] = get(body, k);

  let thinking = defaults.thinking ?? true;
  let t = pick('thinking');
  let effort = pick('thinking_effort');
  let field = 'thinking_effort';
  // Moonshot's object form: its type switches thinking, its effort is the effort
  if (isDict(t.v)) {
    const type = get(t.v, 'type') ?? 'enabled';
    if (type !== 'enabled' && type !== 'disabled') throw new K3RenderError('bad_request', `must be "enabled" or "disabled", got ${JSON.stringify(type)}`, 'thinking.type');
    if (!effort.found && has(t.v, 'effort') && get(t.v, 'effort') !== null) {
      effort = { found: true, v: get(t.v, 'effort') };
      field = 'thinking.effort';
    }
    t = { found: true, v: type === 'enabled' };
  }
  if (t.found && t.v !== null) {
    if (typeof t.v !== 'boolean') throw new K3RenderError('bad_request', `must be true or false, got ${JSON.stringify(t.v)}`, 'thinking');
    thinking = t.v;
  }
  if (!effort.found) {
    effort = pick('reasoning_effort');
    field = 'reasoning_effort';
    if (effort.v === 'none') {
      thinking = false;
      effort = { found: false, v: undefined };
    }
  }
  if (effort.found) {
    if (effort.v !== null && typeof effort.v !== 'string') throw new K3RenderError('invalid_thinking_effort', `must be one of low, high, max, got ${JSON.stringify(effort.v)}`, field);
    req.thinking_effort = effort.v;
  }
  req.thinking = thinking;
  const keep = pick('preserve_thinking');
  if (keep.found && keep.v !== null && typeof keep.v !== 'boolean') throw new K3RenderError('bad_request', `must be true or false, got ${JSON.stringify(keep.v)}`, 'preserve_thinking');
  if (keep.v === false) req.messages = req.messages.map(withoutReasoning);
  const gen = pick('add_generation_prompt');
  if (gen.found && gen.v !== null) {
    if (typeof gen.v !== 'boolean') throw new K3RenderError('bad_request', `must be true or false, got ${JSON.stringify(gen.v)}`, 'add_generation_prompt');
    req.add_generation_prompt = gen.v;
  }
  return req;
}

/** An assistant message without its reasoning (other messages as they are). */
function withoutReasoning(m: K3Message): K3Message {
  if (get(m, 'role') !== 'assistant') return m;
  return Object.fromEntries((dictEntries(m) ?? []).filter(([k]) => k !== 'reasoning_content' && k !== 'reasoning')) as unknown as K3Message;
}
