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
  name: string;
  maxContext: number;
  defaults?: SamplingDefaults;
  /** Apply the hosted K3 API's fixed sampling parameters (reject what it rejects). */
  vendorParams?: boolean;
  /** K3: think when a request does not say (default true). */
  thinking?: boolean;
  /** Tokens a chat reply may take when the request sends no max_tokens (default: the context). */
  defaultMaxTokens?: number;
  /** `--drafter`: every generation drafts with it (checked at start: checkDrafter), but replies held to a structure. */
  drafter?: DrafterChoice;
}
