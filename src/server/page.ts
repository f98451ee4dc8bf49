// GET /: a small chat page, plain HTML and JavaScript (no build step, nothing fetched from
// elsewhere). It streams replies from /v1/chat/completions, shows thinking apart from the
// answer, shows tool calls and their results (an `add` tool the page itself runs, when ticked),
// can stop a reply (aborting the fetch, which the server sees as a disconnect) and shows
// tokens/s. Earlier turns go back with their reasoning and tool calls, as K3 expects.

export const CHAT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kimi-k3-ts chat</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:46rem;margin:0 auto;padding:1rem}
#log div{margin:.5rem 0;white-space:pre-wrap}.user{font-weight:600}.think{color:#777;font-style:italic;border-left:3px solid #ccc;padding-left:.5rem}
.call,.result{font-family:ui-monospace,monospace;font-size:13px;background:#f4f4f4;padding:.25rem .5rem}.result{color:#264}
form{display:flex;gap:.5rem;flex-wrap:wrap}#msg{flex:1}#stats{color:#555;font-size:13px}
</style></head><body>
<h1>kimi-k3-ts</h1>
<div id="log"></div>
<form id="f"><input id="msg" autocomplete="off" placeholder="Message"><label><input type="checkbox" id="thinking" checked> thinking</label>
<label><input type="checkbox" id="tools"> add tool</label>
<button id="send">Send</button><button id="stop" type="button" disabled>Stop</button></form>
<div id="stats"></div>
<script>
const log = document.getElementById('log'), msg = document.getElementById('msg'), stats = document.getElementById('stats');
const sendBtn = document.getElementById('send'), stopBtn = document.getElementById('stop');
const key = new URLSearchParams(location.search).get('key');
const ADD = { type: 'function', function: { name: 'add', description: 'Add two integers.', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } } };
const history = [];
let ctl = null;
function add(cls, text) { const d = document.createElement('div'); d.className = cls; d.textContent = text; log.appendChild(d); return d; }
function runTool(call) {
  let args = {};
  try { args = JSON.parse(call.function.arguments || '{}'); } catch (e) { return 'error: arguments are not JSON'; }
  if (call.function.name === 'add' && Number.isFinite(args.a) && Number.isFinite(args.b)) return String(args.a + args.b);
  return 'error: no tool ' + call.function.name + ' with these arguments';
}
stopBtn.onclick = () => ctl && ctl.abort();
async function reply(depth = 0) {
  const think = add('think', ''), answer = add('assistant', '');
  think.hidden = true;
  ctl = new AbortController(); sendBtn.disabled = true; stopBtn.disabled = false;
  let content = '', reasoning = '', tokens = 0, t0 = 0, calls = [], stopped = false;
  const tools = document.getElementById('tools').checked ? [ADD] : undefined;
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json', ...(key ? { authorization: 'Bearer ' + key } : {}) },
      body: JSON.stringify({ messages: history, stream: true, max_tokens: 256, tools, chat_template_kwargs: { thinking: document.getElementById('thinking').checked } }) });
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
        for (const c of d.tool_calls || []) { calls.push(c); add('call', 'call ' + c.function.name + '(' + c.function.arguments + ')'); }
        if (d.content || d.reasoning_content) { tokens++; if (!t0) t0 = performance.now(); answer.textContent = content; }
        const s = (performance.now() - t0) / 1000;
        stats.textContent = tokens + ' pieces' + (s > 0 && tokens > 1 ? ', ' + ((tokens - 1) / s).toFixed(1) + ' tokens/s' : '');
      }
    }
  } catch (e) {
    stopped = true;
    if (e.name !== 'AbortError') add('error', String(e.message || e)); else answer.textContent = content + ' [stopped]';
  } finally {
    const toolCalls = calls.map((c) => ({ id: c.id, type: 'function', function: c.function }));
    history.push({ role: 'assistant', content, reasoning_content: reasoning, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) });
    ctl = null; sendBtn.disabled = false; stopBtn.disabled = true;
    if (!stopped && calls.length && depth < 4) {
      for (const c of calls) {
        const result = runTool(c);
        add('result', c.function.name + ' -> ' + result);
        history.push({ role: 'tool', tool_call_id: c.id, content: result });
      }
      await reply(depth + 1);
    }
  }
}
document.getElementById('f').onsubmit = async (ev) => {
  ev.preventDefault();
  const text = msg.value.trim();
  if (!text || ctl) return;
  msg.value = '';
  history.push({ role: 'user', content: text });
  add('user', text);
  await reply();
};
</script></body></html>
`;
