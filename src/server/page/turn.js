// One turn with the model: the request from the conversation and the settings, the reply
// streamed into the log with live tokens/s, its stats when it ends, then the tool calls run here
// and answered (up to MAX_TOOL_ROUNDS). Earlier turns go back with their reasoning and tool
// calls, as K3 expects.

import { streamChat } from './api.js';
import { messageView, phaseOf, updateAssistant } from './render.js';
import { current, state } from './state.js';
import { TOOLS, runTool } from './tools.js';
import { $, nearBottom, persist, renderLog, scrollDown, setBusy, showContext, showError } from './view.js';

const MAX_TOOL_ROUNDS = 4;

/** What goes to the server: the settings, and the messages without the page's own fields. */
function requestBody(messages) {
  const { settings } = state;
  const num = (v) => (v === '' || v == null ? undefined : Number(v));
  const api = messages.map((m) => {
    if (m.role === 'tool') return { role: 'tool', tool_call_id: m.tool_call_id, content: m.content };
    if (m.role === 'user') return { role: 'user', content: m.content };
    const calls = (m.tool_calls ?? []).map((c) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } }));
    return { role: 'assistant', content: m.content, ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}), ...(calls.length ? { tool_calls: calls } : {}) };
  });
  if (settings.system.trim()) api.unshift({ role: 'system', content: settings.system });
  return {
    messages: api,
    temperature: num(settings.temperature),
    top_p: num(settings.top_p),
    max_tokens: num(settings.max_tokens),
    tools: settings.tools ? TOOLS : undefined,
    chat_template_kwargs: { thinking: settings.thinking },
    stream_options: { include_usage: true },
  };
}

function mergeCall(m, d) {
  const calls = (m.tool_calls ??= []);
  const prev = d.index != null ? calls[d.index] : undefined;
  if (prev) prev.function.arguments += d.function?.arguments ?? ''; // OpenAI-style pieces of one call
  else calls[d.index ?? calls.length] = { id: d.id, type: 'function', function: { name: d.function?.name ?? '', arguments: d.function?.arguments ?? '' } };
}

/** Stream the assistant's next message into the log; then run its tool calls and go on. */
export async function reply(round = 0) {
  const c = current(), log = $('log'), stats = $('stats'), context = state.model.context;
  const body = requestBody(c.messages);
  const m = { role: 'assistant', content: '', reasoning_content: '' };
  c.messages.push(m);
  log.querySelector('.empty')?.remove();
  const view = messageView(m, c.messages.length - 1, { streaming: true, context });
  log.append(view);
  scrollDown(true);
  setBusy(new AbortController());
  const t0 = performance.now();
  let tFirst = 0, tAnswer = 0, pieces = 0, frame = 0, phase = 0, result = {}, stopped = false, failed = null;
  const redraw = () => {
    frame = 0;
    const follow = nearBottom();
    updateAssistant(view, m, { streaming: true, context });
    if (follow) scrollDown(true);
  };
  try {
    result = await streamChat(body, state.settings.key, state.ctl.signal, (d) => {
      if (d.reasoning_content) m.reasoning_content += d.reasoning_content;
      if (d.content) m.content += d.content;
      for (const tc of d.tool_calls ?? []) mergeCall(m, tc);
      if (!(d.content || d.reasoning_content || d.tool_calls)) return;
      pieces++;
      if (!tFirst) tFirst = performance.now();
      if (!tAnswer && (d.content || d.tool_calls)) tAnswer = performance.now();
      const s = (performance.now() - tFirst) / 1000;
      stats.textContent = `${pieces} tokens` + (s > 0 && pieces > 1 ? ` · ${((pieces - 1) / s).toFixed(1)} tokens/s` : '');
      // pieces are drawn once a frame, but the start of the thinking and of the answer at once:
      // the thinking shows open even when a slow page reads it with the answer in one chunk
      if (phaseOf(m) !== phase) {
        phase = phaseOf(m);
        cancelAnimationFrame(frame);
        redraw();
      } else if (!frame) frame = requestAnimationFrame(redraw);
    });
  } catch (e) {
    if (e.name === 'AbortError') stopped = true;
    else failed = e.message || String(e);
  }
  cancelAnimationFrame(frame);
  setBusy(null);
  const tEnd = performance.now(), usage = result.usage;
  const tokens = usage?.completion_tokens ?? pieces;
  // tokens/s of decoding: from the first token on (the wait before it is the prompt's)
  m.stats = { tokens, tps: tFirst && tokens > 1 && tEnd > tFirst ? (tokens - 1) / ((tEnd - tFirst) / 1000) : 0, firstMs: tFirst ? tFirst - t0 : null, used: usage?.total_tokens ?? null, finish: result.finish ?? null };
  if (m.reasoning_content) m.stats.thinkMs = (tAnswer || tEnd) - tFirst;
  if (stopped) m.stopped = true;
  if (failed && !m.content && !m.reasoning_content) {
    c.messages.pop();
    view.remove();
  } else updateAssistant(view, m, { context });
  stats.textContent = view.meta.textContent;
  if (failed) showError(failed);
  showContext();
  persist();
  if (!stopped && !failed && m.tool_calls?.length && round < MAX_TOOL_ROUNDS) {
    for (const call of m.tool_calls) {
      const t = { role: 'tool', tool_call_id: call.id, toolName: call.function.name, content: runTool(call) };
      c.messages.push(t);
      log.append(messageView(t, c.messages.length - 1));
    }
    persist();
    await reply(round + 1);
  }
}

export async function send(text) {
  const c = current();
  c.messages.push({ role: 'user', content: text });
  c.updated = Date.now();
  persist();
  renderLog();
  await reply();
}

/** Drop the messages from `from` on and answer again from there. */
export async function redoFrom(from) {
  state.conv.messages.length = from;
  state.conv.updated = Date.now();
  persist();
  renderLog();
  await reply();
}
