import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from './main.js';
import { parse, parseIds, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, openModel } from './common.js';
import { greedy } from '../generate/greedy.js';
import { RunRecorder, formatSummary } from '../generate/report.js';
import { loadTokenizer } from '../tokenizer/index.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: 'generate tokens greedily from a prompt (ids or text), with a run report',
  help: `usage: k3 run MODEL (--ids 1,2,3 | --prompt TEXT | --prompt-file F) [--gen N] [--json] [options]

Prefills the prompt, then generates N tokens (default 16) greedily (argmax, first maximum wins;
not stopped at EOS). Text prompts need the tokenizer files (tiktoken.model,
tokenizer_config.json) in MODEL or in --tok DIR. Prints the generated tokens as they come and a
run report (s/token, bytes read per token by kind, I/O wait share, peak RSS) on stderr; --json
prints one JSON object: {"prompt_ids", "generated_ids", "seconds_per_token", "steps", ...}.

  --tok DIR         tokenizer directory (default: MODEL)
${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse('run', args, { ids: { type: 'string' }, prompt: { type: 'string' }, 'prompt-file': { type: 'string' }, tok: { type: 'string' }, gen: { type: 'string' }, json: { type: 'boolean' }, ...MODEL_OPTIONS }, 1);
    const dir = positionals[0]!;
    const given = [values.ids, values.prompt, values['prompt-file']].filter((v) => v !== undefined).length;
    if (given !== 1) throw new UserError('run: give exactly one of --ids, --prompt, --prompt-file');
    const gen = parseIntFlag('run', 'gen', values.gen, 16, 1);
    const tokDir = values.tok ?? dir;
    const hasTok = fs.existsSync(path.join(tokDir, 'tiktoken.model'));
    const tok = hasTok ? await loadTokenizer(tokDir) : null;
    let ids: number[];
    if (values.ids) ids = parseIds('run', values.ids);
    else {
      if (!tok) throw new UserError(`run: text prompts need tiktoken.model in ${tokDir} (or --tok DIR)`);
      let text = values.prompt;
      if (text === undefined) {
        try {
          text = fs.readFileSync(values['prompt-file']!, 'utf8');
        } catch {
          throw new UserError(`run: cannot read ${values['prompt-file']}`);
        }
      }
      ids = tok.encode(text);
    }
    const { model, chunk } = openModel('run', dir, values);
    try {
      const rec = new RunRecorder(model.store);
      const stream = tok?.streamDecoder();
      const r = await greedy(model, model.newState(), ids, gen, {
        chunk,
        recorder: rec,
        onToken: values.json ? undefined : (id) => void process.stdout.write(stream ? stream.push(id) : `${id} `),
      });
      const sum = rec.summary();
      if (values.json) {
        console.log(JSON.stringify({ prompt_ids: ids, generated_ids: r.generated, ...(tok ? { text: tok.decode(r.generated) } : {}), architecture: model.config.arch, ...sum }));
      } else {
        process.stdout.write((stream ? stream.flush() : '') + '\n');
        process.stderr.write(formatSummary(sum) + '\n');
      }
    } finally {
      await model.close();
    }
    return 0;
  },
};
