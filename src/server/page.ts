// GET /: a small chat page, plain HTML and JavaScript (no build step, nothing fetched from
// elsewhere). It streams replies from /v1/chat/completions, shows thinking apart from the
// answer, can stop a reply (aborting the fetch, which the server sees as a disconnect) and shows
// tokens/s.

export const CHAT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kimi-k3-ts chat</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:46rem;margin:0 auto;padding:1rem}
#log div{margin:.5rem 0;white-space:pre-wrap}.user{font-weight:600}.think{color:#777;font-style:italic;border-left:3px solid #ccc;padding-left:.5rem}
form{display:flex;gap:.5rem}#msg{flex:1}#stats{color:#555;font-size:13px}
</style></head><body>
<h1>kimi-k3-ts</h1>
<div id="log"></div>
<form id="f"><input id="msg" autocomplete="off" placeholder="Message"><label><input type="checkbox" id="thinking"> thinking</label>
<button id="send">Send</button><button id="stop" type="button" disabled>Stop</button></form>
<div id="stats"></div>
<script>
const log = document.getElementById('log'), msg = document.getElementById('msg'), stats = document.getElementById('stats');
const sendBtn = document.getElementById('send'), stopBtn = document.getElementById('stop');
const key = new URLSearchParams(location.search).get('key');
const history = [];
let ctl = null;
function add(cls, text) { const d = document.createElement('div'); d.className = cls; d.textContent = text; log.appendChild(d); return d; }
stopBtn.onclick = () => ctl && ctl.abort();
document.getElementById('f').onsubmit = async (ev) => {
  ev.preventDefault();
  const text = msg.value.trim();
  if (!text || ctl) return;
  msg.value = '';
  history.push({ role: 'user', content: text });
  add('user', text);
  const think = add('think', ''), answer = add('assistant', '');
  think.hidden = true;
  ctl = new AbortController(); sendBtn.disabled = true; stopBtn.disabled = false;
  let content = '', reasoning = '', tokens = 0, t0 = 0;
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json', ...(key ? { authorization: 'Bearer ' + key } : {}) },
      body: JSON.stringify({ messages: history, stream: true, max_tokens: 256, chat_template_kwargs: { thinking: document.getElementById('thinking').checked } }) });
    if (!res.ok) throw new Error((await res.json()).error.message);
    const reader = res.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\\n\\n')) >= 0) {
        const line = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const d = JSON.parse(line.slice(6)).choices[0]?.delta || {};
        if (d.reasoning_content) { reasoning += d.reasoning_content; think.hidden = false; think.textContent = reasoning; }
        if (d.content) content += d.content;
        if (d.content || d.reasoning_content) { tokens++; if (!t0) t0 = performance.now(); answer.textContent = content; }
        const s = (performance.now() - t0) / 1000;
        stats.textContent = tokens + ' pieces' + (s > 0 && tokens > 1 ? ', ' + ((tokens - 1) / s).toFixed(1) + ' tokens/s' : '');
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') add('error', String(e.message || e)); else answer.textContent = content + ' [stopped]';
  } finally {
    history.push({ role: 'assistant', content });
    ctl = null; sendBtn.disabled = false; stopBtn.disabled = true;
  }
};
</script></body></html>
`;
