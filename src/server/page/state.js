// What the page's modules share: the settings, the conversations and the open one, the served
// model, and the running reply's AbortController (null when none streams).

import { loadConversations, loadCurrentId, loadSettings, newConversation } from './store.js';

const convs = loadConversations();

export const state = {
  settings: loadSettings(),
  convs,
  conv: convs.find((c) => c.id === loadCurrentId()) ?? null,
  model: { name: null, context: null },
  ctl: null,
};

/** The open conversation, started when there is none. */
export function current() {
  if (!state.conv) {
    state.conv = newConversation();
    state.convs.unshift(state.conv);
  }
  return state.conv;
}
