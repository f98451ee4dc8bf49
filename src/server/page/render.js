// The DOM of the conversation. Replies are markdown (marked, GitHub's flavour) made safe by
// DOMPurify before they reach the page; user text and reasoning are shown as written. Buttons
// carry data-act (the action) and the message's article its index (data-i), for chat.js.

const { marked, DOMPurify } = window;
marked.use({ gfm: true });
// links from a reply open apart from the chat and learn nothing about it
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

/** An element with a class and children (strings become text, never HTML). */
export function h(tag, cls, ...kids) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  for (const k of kids.flat()) if (k != null) el.append(k);
  return el;
}

const button = (act, label, title) => {
  const b = h('button', 'act', label);
  b.type = 'button';
  b.dataset.act = act;
  if (title) b.title = title;
  return b;
};

/** Fill `el` with `text` as sanitized markdown; code blocks get a language tag and a Copy button. */
export function markdown(el, text) {
  el.innerHTML = DOMPurify.sanitize(marked.parse(text));
  for (const pre of el.querySelectorAll('pre')) {
    const lang = /language-([\w+#.-]+)/.exec(pre.querySelector('code')?.className ?? '')?.[1] ?? '';
    const box = h('div', 'code');
    pre.replaceWith(box);
    box.append(h('div', 'code-bar', h('span', null, lang || 'code'), button('copy-code', 'Copy')), pre);
  }
}

function statsLine(m, context) {
  const s = m.stats;
  if (!s) return m.stopped ? 'stopped' : '';
  const parts = [`${s.tokens} tokens`];
  if (s.tps) parts.push(`${s.tps.toFixed(1)} tokens/s`);
  if (s.firstMs != null) parts.push(`first token ${(s.firstMs / 1000).toFixed(2)} s`);
  if (s.used) parts.push(`context ${s.used}${context ? ' / ' + context : ''}`);
  if (m.stopped) parts.push('stopped');
  else if (s.finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}

function toolCall(c) {
  let args = c.function.arguments ?? '';
  try {
    args = JSON.stringify(JSON.parse(args));
  } catch {
    // not JSON (yet): shown as it came
  }
  return h('div', 'tool-call', h('span', 'tool-tag', 'tool call'), h('code', null, `${c.function.name}(${args})`));
}

/** A message's article; an assistant's keeps its parts at hand for updates while streaming. */
export function messageView(m, i, opts) {
  const el = h('article', `msg ${m.role}`);
  el.dataset.i = String(i);
  if (m.role === 'user') {
    el.append(h('div', 'bubble', m.content), h('div', 'actions', button('edit', 'Edit'), button('copy', 'Copy')));
  } else if (m.role === 'tool') {
    el.append(h('div', 'tool-result', h('span', 'tool-tag', 'result'), h('code', null, `${m.toolName ?? 'tool'} → ${m.content}`)));
  } else {
    el.think = h('details', 'think', h('summary', null, 'Thought'), h('div', 'think-body'));
    el.think.firstChild.addEventListener('click', () => (el.think.dataset.touched = '1')); // the reader's choice wins
    el.body = h('div', 'body md');
    el.calls = h('div', 'calls');
    el.meta = h('div', 'meta');
    el.append(el.think, el.body, el.calls, h('div', 'foot', el.meta, h('div', 'actions', button('copy', 'Copy'), button('regenerate', 'Regenerate'), button('edit', 'Edit'))));
    updateAssistant(el, m, opts);
  }
  return el;
}

/** 0: nothing yet, 1: thinking, 2: the answer or a tool call has started. */
export const phaseOf = (m) => (m.content || m.tool_calls?.length ? 2 : m.reasoning_content ? 1 : 0);

/** Show `m`'s current state; while streaming, the thinking is open from its start until the answer starts. */
export function updateAssistant(el, m, { streaming = false, context = null } = {}) {
  const reasoning = m.reasoning_content ?? '';
  el.think.hidden = !reasoning;
  el.think.lastChild.textContent = reasoning;
  const thought = m.stats?.thinkMs ? `Thought for ${(m.stats.thinkMs / 1000).toFixed(1)} s` : 'Thought';
  const thinking = streaming && phaseOf(m) === 1;
  el.think.firstChild.textContent = thinking ? 'Thinking…' : thought;
  // folded once the answer or a call starts, and at the end (a call can come whole in the last piece)
  if (!el.think.dataset.touched) el.think.open = thinking;
  markdown(el.body, m.content || '');
  el.body.hidden = !m.content && !streaming;
  el.calls.replaceChildren(...(m.tool_calls ?? []).map(toolCall));
  el.meta.textContent = statsLine(m, context);
  el.classList.toggle('streaming', streaming);
}
