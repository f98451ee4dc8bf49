// The chat page's entry: what each control does. The message actions (Copy, Edit, Regenerate),
// the composer (Enter sends, Stop or Esc ends a reply), the conversation list (new, open,
// delete), the settings panel and the model's name and context from the server. The other
// modules: state.js (what is shared), store.js (localStorage), view.js and render.js (the DOM),
// turn.js (a turn with the model), api.js (the server), tools.js (the `add` tool).

import { fetchModel } from './api.js';
import { h } from './render.js';
import { state } from './state.js';
import { saveSettings } from './store.js';
import { redoFrom, send } from './turn.js';
import { $, persist, renderLog, renderSidebar, showContext } from './view.js';

const log = $('log'), msg = $('msg');
const urlKey = new URLSearchParams(location.search).get('key');
if (urlKey) {
  state.settings.key = urlKey; // `?key=KEY`: the API key for /v1/, kept like the other settings
  saveSettings(state.settings);
}

function startEdit(article, i) {
  const m = state.conv.messages[i];
  const box = h('textarea', 'edit-box');
  box.value = m.content;
  const save = h('button', 'primary', m.role === 'user' ? 'Save & send' : 'Save');
  const cancel = h('button', null, 'Cancel');
  article.replaceChildren(h('div', 'editor', box, h('div', 'edit-bar', cancel, save)));
  box.focus();
  cancel.onclick = () => renderLog();
  save.onclick = () => {
    if (m.role === 'user' && !box.value.trim()) return box.focus();
    m.content = box.value;
    if (m.role === 'user') return void redoFrom(i + 1); // the answers to the old text go
    persist();
    renderLog();
  };
}

async function copy(text, b) {
  try {
    await navigator.clipboard.writeText(text);
    b.textContent = 'Copied';
  } catch {
    b.textContent = 'Copy failed';
  }
  setTimeout(() => (b.textContent = 'Copy'), 1200);
}

log.addEventListener('click', (ev) => {
  const b = ev.target.closest('[data-act]');
  if (!b) return;
  const article = b.closest('article'), i = Number(article?.dataset.i), ms = state.conv?.messages ?? [];
  const act = b.dataset.act;
  if (act === 'copy-code') return void copy(b.closest('.code').querySelector('pre').textContent, b);
  if (act === 'copy') return void copy(ms[i].content, b);
  if (state.ctl) return; // no changes while a reply streams
  if (act === 'edit') startEdit(article, i);
  if (act === 'regenerate') {
    let from = i; // back to the start of this answer: after the user message that asked for it
    while (from > 0 && ms[from - 1].role !== 'user') from--;
    void redoFrom(from);
  }
});

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = msg.value.trim();
  if (!text || state.ctl) return;
  msg.value = '';
  msg.style.height = '';
  void send(text);
});
msg.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
});
msg.addEventListener('input', () => {
  msg.style.height = '';
  msg.style.height = Math.min(msg.scrollHeight, 240) + 'px';
});
$('stop').onclick = () => state.ctl?.abort();
document.addEventListener('keydown', (ev) => ev.key === 'Escape' && !$('settings').open && state.ctl?.abort());

function openChat(c) {
  state.ctl?.abort();
  state.conv = c;
  persist();
  renderLog();
  document.body.classList.remove('side-open');
  msg.focus();
}
$('new-chat').onclick = () => openChat(null);
$('chats').addEventListener('click', (ev) => {
  const item = ev.target.closest('.chat-item');
  if (!item) return;
  const { convs } = state, i = convs.findIndex((c) => c.id === item.dataset.id);
  if (ev.target.closest('.chat-del')) {
    if (!confirm(`Delete "${convs[i].title}"?`)) return;
    const [gone] = convs.splice(i, 1);
    if (gone === state.conv) openChat(null);
    else persist();
  } else openChat(convs[i]);
});
$('toggle-sidebar').onclick = (ev) => {
  ev.stopPropagation();
  document.body.classList.toggle('side-open');
};
document.querySelector('main').addEventListener('click', () => document.body.classList.remove('side-open')); // narrow screens: a tap beside the list closes it

// the settings panel: each change is kept at once
const fields = { system: 'set-system', temperature: 'set-temperature', top_p: 'set-top-p', max_tokens: 'set-max-tokens', key: 'set-key', thinking: 'set-thinking', tools: 'set-tools' };
const prop = (k) => (typeof state.settings[k] === 'boolean' ? 'checked' : 'value');
$('open-settings').onclick = () => {
  for (const [k, id] of Object.entries(fields)) $(id)[prop(k)] = state.settings[k];
  $('settings').showModal();
};
$('settings-form').addEventListener('input', () => {
  for (const [k, id] of Object.entries(fields)) state.settings[k] = $(id)[prop(k)];
  saveSettings(state.settings);
});
$('settings').addEventListener('close', () => loadModel()); // the key may have changed
$('clear-all').onclick = () => {
  if (!confirm('Delete all chats?')) return;
  state.convs.length = 0;
  $('settings').close();
  openChat(null);
};

async function loadModel() {
  try {
    state.model = await fetchModel(state.settings.key);
    $('model-name').textContent = state.model.name;
    $('model-ctx').textContent = state.model.context ? `${state.model.context} tokens of context` : '';
    document.title = `${state.model.name} · kimi-k3-ts`;
  } catch (e) {
    $('model-name').textContent = 'no model: ' + (e.message || e);
    $('model-ctx').textContent = '';
  }
  if (state.ctl) showContext(); // a reply is streaming into the log: leave it be
  else renderLog();
}

renderSidebar();
renderLog();
void loadModel();
