// Conversations and settings, kept in the browser's localStorage so that a reload keeps them.
// 'k3-chat.conversations': [{ id, title, updated, messages }], newest first; a message is an
// OpenAI chat message (user / assistant with reasoning_content and tool_calls / tool) plus the
// page's own fields (stats, stopped), which are left out of requests.
// 'k3-chat.current': the open conversation's id. 'k3-chat.settings': the settings panel.

const CONVS = 'k3-chat.conversations', CURRENT = 'k3-chat.current', SETTINGS = 'k3-chat.settings';

export const DEFAULT_SETTINGS = { system: '', temperature: '', top_p: '', max_tokens: '', key: '', thinking: true, tools: false };

function read(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key) ?? 'null');
    return v ?? fallback;
  } catch {
    return fallback; // a damaged entry: start afresh rather than fail to load
  }
}

/** Store a value; false when the browser refuses (storage full or disabled). */
function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

export const loadSettings = () => ({ ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) });
export const saveSettings = (s) => write(SETTINGS, s);

export function loadConversations() {
  const v = read(CONVS, []);
  return Array.isArray(v) ? v.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
}
export const loadCurrentId = () => read(CURRENT, null);

export function saveConversations(convs, currentId) {
  return write(CONVS, convs) && write(CURRENT, currentId);
}

export function newConversation() {
  const id = Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  return { id, title: 'New chat', updated: Date.now(), messages: [] };
}

/** A conversation's title: the start of its first user message. */
export function titleOf(conv) {
  const first = conv.messages.find((m) => m.role === 'user');
  const t = (first?.content ?? '').replace(/\s+/g, ' ').trim();
  return t ? (t.length > 48 ? t.slice(0, 47) + '…' : t) : 'New chat';
}
