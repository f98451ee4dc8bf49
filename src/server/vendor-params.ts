// `k3 serve --vendor-params`: the hosted K3 API's fixed sampling parameters. A request may send
// the fixed values (temperature anywhere in [0, 1], which the API accepts and replaces); any
// other value is refused as the API refuses it, so a client tested here behaves the same there.

import { badField } from './errors.js';

type Body = Record<string, unknown>;

/** K3's sampling as the hosted API fixes it: temperature 1.0 thinking, 0.6 not; top_p 0.95. */
export function vendorSampling(thinking: boolean): { temperature: number; topP: number; presencePenalty: number; frequencyPenalty: number } {
  return { temperature: thinking ? 1.0 : 0.6, topP: 0.95, presencePenalty: 0, frequencyPenalty: 0 };
}

function fixed(b: Body, k: string, ok: (v: number) => boolean, want: string): void {
  const v = b[k];
  if (v === undefined || v === null) return;
  if (typeof v !== 'number' || !ok(v)) throw badField(k, `is fixed for this model: ${want}, got ${JSON.stringify(v)}`);
}

/** Refuse what the hosted API refuses (400 naming the field). */
export function checkVendorParams(b: Body): void {
  fixed(b, 'temperature', (v) => v >= 0 && v <= 1, 'a value in [0, 1] (1.0 is used with thinking, 0.6 without)');
  fixed(b, 'top_p', (v) => v === 0.95, 'only 0.95');
  fixed(b, 'presence_penalty', (v) => v === 0, 'only 0');
  fixed(b, 'frequency_penalty', (v) => v === 0, 'only 0');
  fixed(b, 'n', (v) => v === 1, 'only 1');
}
