// The sampling a model's authors recommend, from its generation_config.json (Hugging Face's
// file beside config.json): the server uses it where a request sends no value of its own.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { UserError } from '../util/errors.js';
import type { SamplingDefaults } from './serve-options.js';

/** The model directory's generation_config.json sampling values ({} without the file); one line naming the file and field when it is malformed. */
export function samplingDefaults(dir: string): SamplingDefaults {
  const file = path.join(dir, 'generation_config.json');
  if (!fs.existsSync(file)) return {};
  let g: unknown;
  try {
    g = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UserError(`${file}: not valid JSON (${(e as Error).message})`);
  }
  if (g === null || typeof g !== 'object' || Array.isArray(g)) throw new UserError(`${file}: must be a JSON object`);
  const o = g as Record<string, unknown>;
  const out: SamplingDefaults = {};
  const take = (k: 'temperature' | 'top_p', lo: number, hi: number): void => {
    const v = o[k];
    if (v === undefined || v === null) return;
    if (typeof v !== 'number' || !(v >= lo && v <= hi)) throw new UserError(`${file}: ${k} must be a number in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
    out[k] = v;
  };
  take('temperature', 0, 2);
  take('top_p', Number.MIN_VALUE, 1);
  return out;
}
