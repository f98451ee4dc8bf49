// Whether a tokenizer belongs to a model: checked when both are loaded (CLI and library alike).

import { UserError } from '../util/errors.js';
import type { Tokenizer } from './tokenizer.js';

/** A tokenizer that can emit ids the model has no embedding row for belongs to another model:
 *  refused at load, not found out after generating. (A model vocabulary larger than the
 *  tokenizer's is padding, as in the real checkpoints.) */
export function checkTokenizerFits(cmd: string, tok: Tokenizer, tokDir: string, vocabSize: number): Tokenizer {
  if (tok.vocabSize > vocabSize) {
    throw new UserError(`${cmd}: the tokenizer in ${tokDir} has ${tok.vocabSize} ids but the model's vocabulary is ${vocabSize} (config.json vocab_size): it belongs to another model (--tok DIR names the right one)`);
  }
  return tok;
}
