// `k3 detokenize DIR --ids 1,2,3`: ids to the exact bytes they stand for, written to stdout.

import type { Command } from './command.js';
import { parse, parseIds } from './args.js';
import { UserError } from '../util/errors.js';
import { loadTokenizer } from '../api/tokens.js';

export const command: Command = {
  summary: 'token ids back to text (exact bytes)',
  help: `usage: k3 detokenize DIR --ids ID,ID,...

Writes the exact bytes of the ids to stdout (no newline added; a special id prints its string,
e.g. <|im_end|>). DIR holds tiktoken.model + tokenizer_config.json (a model directory or a
folder holding only those two files).`,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse('detokenize', args, { ids: { type: 'string' } }, 1);
    if (positionals.length > 1) throw new UserError(`detokenize: expected one directory, got ${positionals.length} arguments (k3 detokenize --help)`);
    if (values.ids === undefined) throw new UserError('detokenize: --ids is required (k3 detokenize --help)');
    const ids = parseIds('detokenize', values.ids);
    const tok = await loadTokenizer(positionals[0]!);
    const bytes = tok.decodeBytes(ids);
    await new Promise<void>((resolve, reject) => process.stdout.write(bytes, (err) => (err ? reject(err) : resolve())));
    return 0;
  },
};
