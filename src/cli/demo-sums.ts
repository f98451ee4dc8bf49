// The built-in trained demo model (models-shipped/demo-k3-trained, trained by
// tools/train-demo/train.py): a tiny K3 agent that adds two numbers below 100. As a raw prompt
// "ab+cd=" (two digits each) it answers the sum in three digits then <|end_of_msg|>; in K3's chat
// format it answers a sum, thinks first when asked to, and calls an `add` tool when it has one.
// train.json beside the weights lists the held-out problems (never trained on) and the
// accuracies the training script measured on them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Model } from '../api/diagnostics.js';
import { greedy, SuffixDrafter, speculative, type RunRecorder } from '../api/decoding.js';
import { UserError } from '../util/errors.js';
import type { ChatMessage, KimiModel, ToolSpec } from '../api/index.js';

/** The shipped checkpoint, found from this file (dist/src/cli/ -> the package root). */
export const TRAINED_DEMO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'models-shipped', 'demo-k3-trained');

export interface TrainInfo {
  command: string;
  seed: number;
  held_out: [number, number][];
  held_out_accuracy: number;
}

export function readTrainInfo(dir: string): TrainInfo {
  const f = path.join(dir, 'train.json');
  try {
    return JSON.parse(fs.readFileSync(f, 'utf8')) as TrainInfo;
  } catch (e) {
    throw new UserError(`demo: cannot read ${f}: ${(e as Error).message}`);
  }
}

const pad = (n: number, w: number): string => String(n).padStart(w, '0');

export const sumPrompt = (a: number, b: number): string => `${pad(a, 2)}+${pad(b, 2)}=`;

/** The right answer, as the model is trained to write it. */
export const sumAnswer = (a: number, b: number): string => pad(a + b, 3);

/** Prompt bytes as ids: the demo tokenizer has one id per byte and no merges. */
export const sumIds = (a: number, b: number): number[] => [...Buffer.from(sumPrompt(a, b), 'latin1')];

/** The model's answer to a+b (greedy; the digits before the first other token). */
export async function answerSum(model: Model, a: number, b: number, opts: { spec?: number; recorder?: RunRecorder } = {}): Promise<string> {
  const isDigit = (id: number): boolean => id >= 48 && id <= 57;
  const onToken = (id: number): boolean => !isDigit(id);
  const ids = sumIds(a, b);
  const r = opts.spec ? await speculative(model, model.newState(), ids, 4, { spec: opts.spec, drafter: new SuffixDrafter(), onToken, recorder: opts.recorder }) : await greedy(model, model.newState(), ids, 4, { onToken, recorder: opts.recorder });
  let text = '';
  for (const id of r.generated) {
    if (!isDigit(id)) break;
    text += String.fromCharCode(id);
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// The chat turns of the demo: a sum asked in a user message, answered plainly, after thinking,
// or through the `add` tool (the tool's result is what the model must report).

export const DEMO_MODES = ['raw', 'chat', 'tool'] as const;
export type DemoMode = (typeof DEMO_MODES)[number];

/** The tool the demo model was trained to call, as an OpenAI client declares it. */
export const ADD_TOOL: ToolSpec = {
  type: 'function',
  function: { name: 'add', description: 'Add two integers.', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } },
};

export const sumQuestion = (a: number, b: number): string => `What is ${a}+${b}?`;

/** One demo turn (greedy): the model's final answer and a line saying what it did. */
export async function demoTurn(kimi: KimiModel, a: number, b: number, mode: DemoMode): Promise<{ answer: string; shown: string }> {
  if (mode === 'raw') {
    const r = await kimi.generate(sumPrompt(a, b), { maxTokens: 4, ignoreEos: false }).result;
    const digits = /^\d+/.exec(r.text)?.[0] ?? '';
    return { answer: String(Number(digits)), shown: `${sumPrompt(a, b)}${digits}` };
  }
  const user: ChatMessage = { role: 'user', content: sumQuestion(a, b) };
  const opts = { maxTokens: 160 }; // thinking on, effort max: the release default
  if (mode === 'chat') {
    const r = await kimi.chat([user], opts).result;
    const answer = r.message.content.trim();
    return { answer, shown: `thinks ${JSON.stringify(r.message.reasoning_content ?? '')}, says ${answer}` };
  }
  const first = await kimi.chat([user], { ...opts, tools: [ADD_TOOL] }).result;
  const call = first.message.tool_calls?.[0];
  if (!call) return { answer: first.message.content.trim(), shown: `no tool call, says ${first.message.content.trim()}` };
  let result = 'error: bad arguments';
  try {
    const args = JSON.parse(call.function.arguments) as { a?: unknown; b?: unknown };
    if (typeof args.a === 'number' && typeof args.b === 'number') result = String(args.a + args.b);
  } catch {
    // the arguments were not JSON: the tool says so
  }
  const history: ChatMessage[] = [user, { role: 'assistant', content: first.message.content, tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: result }];
  const second = await kimi.chat(history, { ...opts, tools: [ADD_TOOL] }).result;
  const answer = second.message.content.trim();
  return { answer, shown: `${call.function.name}(${call.function.arguments}) -> ${result}, says ${answer}` };
}
