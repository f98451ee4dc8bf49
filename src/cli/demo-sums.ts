// The built-in trained demo model (models-shipped/demo-k3-trained, trained by
// tools/train-demo/train.py): a tiny K3 that adds two numbers below 100. Its prompts are
// "ab+cd=" (two digits each), its answer the sum in three digits then <|end_of_msg|>; train.json beside the weights lists the
// held-out problems (never trained on) and the accuracy the training script measured on them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Model } from '../model/model.js';
import { greedy } from '../generate/greedy.js';
import { speculative } from '../generate/spec.js';
import { NgramDrafter } from '../generate/draft.js';
import type { RunRecorder } from '../generate/report.js';
import { UserError } from '../util/errors.js';

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
  const r = opts.spec ? await speculative(model, model.newState(), ids, 4, { spec: opts.spec, drafter: new NgramDrafter(), onToken, recorder: opts.recorder }) : await greedy(model, model.newState(), ids, 4, { onToken, recorder: opts.recorder });
  let text = '';
  for (const id of r.generated) {
    if (!isDigit(id)) break;
    text += String.fromCharCode(id);
  }
  return text;
}
