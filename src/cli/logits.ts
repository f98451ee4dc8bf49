import type { Command } from './command.js';
import { parse, parseIds } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, loadOptionsFromFlags, openModel } from './common.js';
import { writeFileAtomic } from '../util/stale-tmp.js';
import { encodeNpyF32 } from '../util/npy.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: 'logits of every position of a prompt, as a float32 .npy [T, vocab]',
  help: `usage: k3 logits MODEL --ids 1,2,3 --out FILE.npy [options]

Runs the prompt through the model in one prefill and writes the float32 logits of every
position, shape [T, vocab], in NumPy .npy format. The file appears only when complete.
A prompt longer than --ctx is refused (exit 2); without --ctx the plan holds the whole prompt.

${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse('logits', args, { ids: { type: 'string' }, out: { type: 'string' }, ...MODEL_OPTIONS }, 1);
    if (!values.ids) throw new UserError('logits: --ids is required');
    if (!values.out) throw new UserError('logits: --out is required');
    const ids = parseIds('logits', values.ids);
    // The plan holds --ctx positions: a longer prompt is refused before loading (issue 44; it
    // used to outgrow the cache the plan counted). Without --ctx, the plan makes room for it.
    const ctx = values.ctx === undefined ? Math.max(4096, ids.length) : loadOptionsFromFlags('logits', values).ctx!;
    if (ids.length > ctx) throw new UserError(`logits: the prompt is ${ids.length} tokens; --ctx ${ctx} holds fewer (raise --ctx)`);
    const { model, chunk } = await openModel('logits', positionals[0]!, { ...values, ctx: String(ctx) });
    try {
      const logits = await model.forward(model.newState(), ids, 'all', chunk);
      writeFileAtomic(values.out, encodeNpyF32(logits, [ids.length, model.config.vocabSize]));
    } finally {
      await model.close();
    }
    return 0;
  },
};
