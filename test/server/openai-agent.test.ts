// The official `openai` npm client against `k3 serve` on the shipped demo model, a tiny agent:
// the full tool loop on 100 held-out sums (declare `add`, get a tool_calls reply with typed
// arguments, send the result, get the answer from it), streamed and not, with the streamed
// deltas accumulating to exactly the non-streamed messages; >= 95% right. The client lives in
// the on-demand install test/e2e/; without it the test skips, saying so.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ADD_TOOL, readTrainInfo, sumQuestion } from '../../src/cli/demo-sums.js';
import { E2E_INSTALL, importE2e } from '../e2e-deps.js';
import { ROOT } from '../helpers.js';
import { startServe, type Serving } from '../serve-helpers.js';

type Any = any;
const mod = await importE2e<{ default: new (o: object) => Any }>('openai');
const skip = mod ? false : `the openai client is not installed (${E2E_INSTALL})`;
if (!mod) console.log(`skipped: ${skip}`);

const DEMO = join(ROOT, 'models-shipped', 'demo-k3-trained');
let srv: Serving | null = null;
let client: Any;

before(async () => {
  if (!mod) return;
  srv = await startServe(DEMO, ['--ctx', '1024', '--parallel', '4']);
  client = new mod.default({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
});
after(async () => {
  await srv?.stop();
});

/** A streamed reply accumulated the way OpenAI's clients do: the message and finish reason. */
async function streamed(body: object): Promise<{ message: Any; finish: string | null }> {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const message: Any = { role: 'assistant', content: '' };
  let finish: string | null = null;
  for await (const c of stream) {
    const d = c.choices[0]?.delta;
    if (d?.content) message.content = (message.content ?? '') + d.content;
    if (d?.reasoning_content) message.reasoning_content = (message.reasoning_content ?? '') + d.reasoning_content;
    for (const t of d?.tool_calls ?? []) {
      message.tool_calls ??= [];
      const at = (message.tool_calls[t.index] ??= { id: t.id, type: 'function', function: { name: '', arguments: '' } });
      at.function.name += t.function?.name ?? '';
      at.function.arguments += t.function?.arguments ?? '';
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { message, finish };
}

/** One tool loop, streamed or not: the messages it produced and the final answer. */
async function loop(a: number, b: number, stream: boolean): Promise<{ first: Any; second: Any; answer: string; calledWith: unknown }> {
  const ask = async (messages: Any[]) => {
    const body = { model: 'demo-k3-trained', messages, tools: [ADD_TOOL], temperature: 0, max_tokens: 160 };
    if (stream) return streamed(body);
    const r = await client.chat.completions.create(body);
    const { role, content, reasoning_content, tool_calls } = r.choices[0].message;
    return { message: { role, content, ...(reasoning_content !== undefined ? { reasoning_content } : {}), ...(tool_calls ? { tool_calls } : {}) }, finish: r.choices[0].finish_reason };
  };
  const user = { role: 'user', content: sumQuestion(a, b) };
  const first = await ask([user]);
  const call = first.message.tool_calls?.[0];
  if (first.finish !== 'tool_calls' || !call) return { first, second: null, answer: '', calledWith: null };
  const args = JSON.parse(call.function.arguments) as { a: unknown; b: unknown };
  const result = typeof args.a === 'number' && typeof args.b === 'number' ? String(args.a + args.b) : 'error';
  const second = await ask([user, first.message, { role: 'tool', tool_call_id: call.id, content: result }]);
  return { first, second, answer: String(second.message.content ?? '').trim(), calledWith: args };
}

test('the tool loop with the openai client on 100 held-out sums (>= 95%), streamed == non-streamed', { skip, timeout: 900_000 }, async () => {
  const held = readTrainInfo(DEMO).held_out.slice(0, 100);
  assert.equal(held.length, 100);
  let right = 0;
  const wrong: string[] = [];
  for (const [a, b] of held) {
    const plain = await loop(a, b, false);
    const stream = await loop(a, b, true);
    assert.deepEqual(stream.first, plain.first, `${a}+${b}: first reply`);
    assert.deepEqual(stream.second, plain.second, `${a}+${b}: answer`);
    const ok = plain.answer === String(a + b) && JSON.stringify(plain.calledWith) === JSON.stringify({ a, b });
    if (ok) right++;
    else wrong.push(`${a}+${b}: called ${JSON.stringify(plain.calledWith)}, answered ${JSON.stringify(plain.answer)}`);
  }
  console.log(`tool loop with the openai client: ${right} of 100 held-out sums right`);
  // the issue asks for 95 of 100; the shipped model answers from the tool result on 99.5% of 200 held-out sums (train.json)
  assert.ok(right >= 95, `${right} of 100 right:\n${wrong.join('\n')}`);
});
