// A DSpark drafter for a loaded model, checked (and its weights loaded) before a server or a chat
// starts, so a bad --drafter DIR is one line and a non-zero exit, not a failure per request.

import { loadDSpark } from '../generate/dspark-draft.js';
import { UserError } from '../util/errors.js';
import type { KimiModel } from './model.js';

/** What every generation of a server (or a chat) passes for its drafter: GenerateOptions' drafter and specWidth. */
export interface DrafterChoice {
  drafter: string;
  specWidth?: number;
}

/**
 * Load drafter `dir` for `kimi` (refused unless it fits the model and the budget: loadDSpark) and
 * check `specWidth` against its block; the weights stay loaded for the generations that use it.
 */
export function checkDrafter(kimi: KimiModel, dir: string, specWidth?: number): DrafterChoice & { block: number } {
  const d = loadDSpark(kimi.model, dir);
  const block = d.config.block;
  if (specWidth !== undefined && (!Number.isSafeInteger(specWidth) || specWidth < 0 || specWidth > block)) throw new UserError(`--spec-width ${specWidth} is not an integer in 0..${block} (the drafter's block)`);
  return { drafter: dir, ...(specWidth !== undefined ? { specWidth } : {}), block };
}
