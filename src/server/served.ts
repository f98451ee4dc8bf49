// What every route of the server is handed: the loaded model, the name it is served as, the
// context the server was planned for, and the sampling rules it applies.

import type { DrafterChoice, KimiModel } from '../api/index.js';

/** Sampling values used where a request sends none (the model's generation_config.json). */
export interface SamplingDefaults {
  temperature?: number;
  top_p?: number;
}

export interface Served {
  kimi: KimiModel;
  /** Name in /v1/models and responses (default: the model directory's name). */
  name: string;
  /** Most tokens one request may generate. */
  maxContext: number;
  /** Sampling values for requests that send none (generation_config.json). */
  defaults?: SamplingDefaults;
  /** The hosted K3 API's fixed sampling parameters, rejecting what it rejects (`--vendor-params`). */
  vendorParams?: boolean;
  /** K3: think when a request does not say (default true; `--no-thinking`). */
  thinking?: boolean;
  /** Most tokens of a chat reply whose request sends no max_tokens (`--max-tokens`; default: the context). */
  defaultMaxTokens?: number;
  /** `--drafter DIR [--spec-width N]`, checked at start with checkDrafter: every generation drafts with it, but replies held to a structure. */
  drafter?: DrafterChoice;
}
