// Drawing the page from the state: the conversation list, the log, the context meter, the busy
// state of the composer; and saving after each change.

import { h, messageView } from './render.js';
import { state } from './state.js';
import { saveConversations, titleOf } from './store.js';

export const $ = (id) => document.getElementById(id);
const log = $('log');

export const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 80;
export const scrollDown = (force) => (force || nearBottom()) && (log.scrollTop = log.scrollHeight);

export function showError(text) {
  log.append(h('div', 'error', text));
  scrollDown(true);
}

/** Save the conversations (empty ones are not kept) and redraw their list. */
export function persist() {
  const { conv, convs } = state;
  if (conv) conv.title = titleOf(conv);
  if (!saveConversations(convs.filter((c) => c.messages.length), conv?.id ?? null)) showError('Could not save the chat: the browser\'s storage is full or turned off.');
  renderSidebar();
}

export function renderSidebar() {
  const items = [...state.convs].sort((a, b) => b.updated - a.updated).map((c) => {
    const del = h('button', 'chat-del', '×');
    del.title = 'Delete this chat';
    const item = h('div', 'chat-item' + (c === state.conv ? ' active' : ''), h('button', 'chat-open', c.title), del);
    item.dataset.id = c.id;
    return item;
  });
  $('chats').replaceChildren(...items);
}

export function renderLog() {
  const ms = state.conv?.messages ?? [];
  log.replaceChildren(...ms.map((m, i) => messageView(m, i, { context: state.model.context })));
  if (!ms.length) log.append(h('div', 'empty', h('h1', null, state.model.name ?? 'kimi-k3-ts'), h('p', null, 'Ask anything. ⚙ holds the system prompt, sampling, thinking and the add tool.')));
  const last = ms.findLastIndex((m) => m.stats);
  $('stats').textContent = last >= 0 ? log.querySelector(`[data-i="${last}"] .meta`)?.textContent ?? '' : '';
  showContext();
  scrollDown(true);
}

/** The header's meter: tokens the conversation's last reply held, against the server's context. */
export function showContext() {
  const { context } = state.model;
  const used = state.conv?.messages.findLast((m) => m.stats?.used)?.stats.used ?? 0;
  $('ctx-meter').hidden = !context;
  $('ctx-meter').value = context ? Math.min(1, used / context) : 0;
  $('ctx-text').textContent = context ? `context ${used} / ${context}` : used ? `context ${used}` : '';
}

export function setBusy(ctl) {
  state.ctl = ctl;
  $('send').hidden = !!ctl;
  $('stop').hidden = !ctl;
  document.body.classList.toggle('busy', !!ctl);
}
