// `k3 tokenize DIR (--text TEXT | --text-file F) [--json] [--no-special]`: text to ids with the
// tokenizer in DIR (a checkpoint, or a folder holding only tiktoken.model + tokenizer_config.json).

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Command } from './command.js';
import { parse } from './args.js';
import { UserError } from '../util/errors.js';
import { loadTokenizer } from '../api/tokens.js';

export const command: Command = {
  summary: 'text to token ids with a model\'s tokenizer',
  help: `usage: k3 tokenize DIR (--text TEXT | --text-file FILE) [--json] [--no-special]

Encodes text with the Kimi tokenizer in DIR (tiktoken.model + tokenizer_config.json; a model
directory or a folder holding only those two files). No BOS/EOS is added.

  --text TEXT       the text to encode
  --text-file FILE  read the text from FILE (UTF-8; - = stdin)
  --json            print {"ids": [...]} instead of comma-separated ids
  --no-special      treat special-token strings (<|im_end|>, [EOS], ...) as plain text;
                    by default they become their control ids, as the reference encode does`,
  async run(args: string[]): Promise<number> {
    const { values, positionals } = parse(
      'tokenize',
      args,
      {
        text: { type: 'string' },
        'text-file': { type: 'string' },
        json: { type: 'boolean' },
        'no-special': { type: 'boolean' },
      },
      1,
    );
    if (positionals.length > 1) throw new UserError(`tokenize: expected one directory, got ${positionals.length} arguments (k3 tokenize --help)`);
    if ((values.text === undefined) === (values['text-file'] === undefined)) {
      throw new UserError('tokenize: give exactly one of --text or --text-file (k3 tokenize --help)');
    }
    let text = values.text;
    if (text === undefined) {
      const file = values['text-file']!;
      try {
        text = file === '-' ? readFileSync(0, 'utf8') : await readFile(file, 'utf8');
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        throw new UserError(`tokenize: cannot read --text-file ${file}: ${code === 'ENOENT' ? 'no such file' : (e as Error).message}`, code === 'ENOENT' ? 2 : 1);
      }
    }
    const tok = await loadTokenizer(positionals[0]!);
    const ids = tok.encode(text, { allowSpecial: !values['no-special'] });
    process.stdout.write(values.json ? `${JSON.stringify({ ids })}\n` : `${ids.join(',')}\n`);
    return 0;
  },
};
