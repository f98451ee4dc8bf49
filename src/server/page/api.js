// The server's OpenAI-compatible API as the page uses it: the model's name and context size
// (GET /v1/models, max_model_len) and a streamed chat reply (POST /v1/chat/completions, SSE).

const headers = (key) => ({ 'content-type': 'application/json', ...(key ? { authorization: 'Bearer ' + key } : {}) });

async function failure(res) {
  try {
    return new Error((await res.json()).error.message);
  } catch {
    return new Error(`HTTP ${res.status}`);
  }
}

/** { name, context } of the served model. */
export async function fetchModel(key) {
  const res = await fetch('/v1/models', { headers: headers(key) });
  if (!res.ok) throw await failure(res);
  const m = (await res.json()).data[0];
  return { name: m.id, context: m.max_model_len ?? null };
}

/**
 * Stream one reply: onDelta(delta) for each choice delta (content, reasoning_content,
 * tool_calls); resolves to { usage, finish } at the end. Abort `signal` to stop.
 */
export async function streamChat(body, key, signal, onDelta) {
  const res = await fetch('/v1/chat/completions', { method: 'POST', signal, headers: headers(key), body: JSON.stringify({ ...body, stream: true }) });
  if (!res.ok) throw await failure(res);
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = '', usage = null, finish = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices?.[0];
      if (choice?.finish_reason) finish = choice.finish_reason;
      if (choice?.delta) onDelta(choice.delta);
    }
  }
  return { usage, finish };
}
