import type { Command } from './main.js';
import { parse, parseIds, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, openModel } from './common.js';
import { greedy } from '../generate/greedy.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: 'generate tokens greedily from a prompt of ids',
  help: `usage: k3 run MODEL --ids 1,2,3 --gen N [--json] [options]

Prefills the prompt, then generates N tokens greedily (argmax, first maximum wins; not stopped
at EOS). Prints the generated ids and a short run report; --json prints one JSON object:
{"prompt_ids", "generated_ids", "prefill_seconds", "seconds_per_token", "tokens_per_second", ...}.

${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse('run', args, { ids: { type: 'string' }, gen: { type: 'string' }, json: { type: 'boolean' }, ...MODEL_OPTIONS }, 1);
    if (!values.ids) throw new UserError('run: --ids is required');
    const ids = parseIds('run', values.ids);
    const gen = parseIntFlag('run', 'gen', values.gen, 16, 1);
    const { model, chunk } = openModel('run', positionals[0]!, values);
    try {
      const t0 = performance.now();
      const r = await greedy(model, model.newState(), ids, gen, { chunk, onToken: values.json ? undefined : (id) => process.stdout.write(`${id} `) });
      const total = (performance.now() - t0) / 1000;
      const decode = r.stepSeconds.reduce((a, b) => a + b, 0);
      const spt = r.stepSeconds.length ? decode / r.stepSeconds.length : r.prefillSeconds;
      const report = {
        prompt_ids: ids,
        generated_ids: r.generated,
        architecture: model.config.arch,
        prefill_tokens: ids.length,
        prefill_seconds: r.prefillSeconds,
        prefill_tokens_per_second: ids.length / r.prefillSeconds,
        seconds_per_token: spt,
        tokens_per_second: 1 / spt,
        total_seconds: total,
        bytes_read: model.store.reader instanceof Object && 'bytesRead' in model.store.reader ? (model.store.reader as { bytesRead: number }).bytesRead : undefined,
        peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
      };
      if (values.json) {
        console.log(JSON.stringify(report));
      } else {
        process.stdout.write('\n');
        process.stderr.write(
          `prefill ${ids.length} tokens in ${r.prefillSeconds.toFixed(3)} s (${report.prefill_tokens_per_second.toFixed(1)} tok/s); ` +
            `decode ${spt.toFixed(4)} s/token (${report.tokens_per_second.toFixed(1)} tok/s); peak RSS ${(report.peak_rss_bytes / 2 ** 20).toFixed(0)} MiB\n`,
        );
      }
    } finally {
      model.close();
    }
    return 0;
  },
};
