// `k3 serve MODEL`: the OpenAI-compatible server (src/server) over the library's model (src/api).

import * as path from 'node:path';
import * as v8 from 'node:v8';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { untilStopped } from './signals.js';
import { MODEL_HELP, MODEL_OPTIONS, checkModelDir, loadForCommand, loadOptionsFromFlags } from './common.js';
import { DRAFTER_HELP, DRAFTER_OPTIONS, drafterFromFlags } from './run.js';
import { checkDrafter, samplingDefaults, type DrafterChoice } from '../api/index.js';
import { UserError } from '../util/errors.js';
import { formatBytes } from '../util/format.js';

/** How long a stop may take before the process exits without waiting (a forward pass at a small
 *  budget of a big model can take longer; the server has nothing on disk to finish). */
const STOP_GRACE_MS = 2000;

export const command: Command = {
  summary: 'serve a model over an OpenAI-compatible HTTP API, with a chat page at /',
  help: `usage: k3 serve MODEL [--host H] [--port P] [--api-key KEY [--metrics-open]] [--parallel N] [--drafter DIR [--spec-width N]] [model options]

Serves POST /v1/chat/completions (streamed or not), POST /v1/completions, GET /v1/models,
POST /v1/messages (Anthropic's), Ollama's /api/chat, /api/generate, /api/tags, /api/show,
/api/ps and /api/version, GET /health, GET /metrics (Prometheus) and a chat page at GET /. Requests are decoded together
(up to --parallel at a time, each with the same output as alone); a request whose tokens start
with a state the server still holds continues from it (usage.prompt_tokens_details.cached_tokens).
A prompt longer than --ctx allows gets a 400 before any compute; a long prompt goes in one chunk
(--chunk tokens) at a time, between other requests' tokens. A failed weight read fails the
requests of that forward pass (500) and the server goes on. Stops on SIGINT / SIGTERM within
about 2 s (a second signal: at once).

  --host H          address to listen on (default 127.0.0.1)
  --port P          port (default 8080; 0 = any free port, printed at start)
  --api-key KEY     require "Authorization: Bearer KEY" on /v1/ and /api/ routes and /metrics (default: env
                    K3_API_KEY, else none; an empty key is refused)
  --metrics-open    with a key: /metrics answers without it (e.g. for a scraper on a trusted network)
  --name NAME       model name in /v1/models and responses (default: the directory's name)
  --parallel N      sequences decoded together (default 4)
  --queue N         requests waiting beyond those before answering 429 (default 64)
  --body-limit N    largest request body in bytes (default 4194304)
  --tok DIR         tokenizer directory (default: MODEL)
  --max-tokens N    most tokens of a chat reply whose request sends no max_tokens (default: the
                    rest of the context, as vLLM; llama.cpp's -n)
  --no-thinking     K3: answer without thinking when a request does not ask for it (default: think,
                    effort max, as K3's release chat template)
  --vendor-params   K3: the hosted API's fixed sampling (temperature 1.0 thinking / 0.6 not, top_p
                    0.95, no penalties, n 1); other values get a 400 as there. Without it, a
                    request's values are used, and generation_config.json's where it sends none
${DRAFTER_HELP}
                    Every generation drafts with it and runs alone (not batched), except replies
                    held to a structure (tools, response_format) and Ollama's /api/generate;
                    /metrics gains k3_spec_* counters
${MODEL_HELP}`,
  async run(args, faces) {
    if (!faces) throw new Error('k3 serve: run without the server (src/main.ts hands it)');
    // V8 grows the young generation (default: up to 16 MiB semi-spaces) when much survives a
    // scavenge, as the engine's per-token arrays do under load; its pages and the freed array
    // buffers behind them then stay resident (~20 MiB of peak RSS with 32 clients on the demo
    // model, bench/serve.ts). Kept at its starting size, collections stay as cheap. Set before
    // the model loads: the heap grows during the load too.
    v8.setFlagsFromString('--semi-space-growth-factor=1');
    const { values, positionals } = parse(
      'serve',
      args,
      { host: { type: 'string' }, port: { type: 'string' }, 'api-key': { type: 'string' }, name: { type: 'string' }, parallel: { type: 'string' }, queue: { type: 'string' }, 'body-limit': { type: 'string' }, tok: { type: 'string' }, 'max-tokens': { type: 'string', short: 'n' }, 'no-thinking': { type: 'boolean' }, 'vendor-params': { type: 'boolean' }, 'metrics-open': { type: 'boolean' }, ...DRAFTER_OPTIONS, ...MODEL_OPTIONS },
      1,
    );
    const dir = positionals[0]!;
    const port = parseIntFlag('serve', 'port', values.port, 8080, 0);
    if (port > 65535) throw new UserError(`serve: --port must be at most 65535, got ${port}`);
    const parallel = parseIntFlag('serve', 'parallel', values.parallel, 4, 1);
    const maxQueue = parseIntFlag('serve', 'queue', values.queue, 64, 0);
    const bodyLimit = parseIntFlag('serve', 'body-limit', values['body-limit'], 4 << 20, 1);
    const defaultMaxTokens = values['max-tokens'] === undefined ? undefined : parseIntFlag('serve', 'max-tokens', values['max-tokens'], 1, 1);
    const apiKey = values['api-key'] ?? process.env.K3_API_KEY;
    if (apiKey === '') throw new UserError(`serve: ${values['api-key'] !== undefined ? '--api-key' : 'K3_API_KEY'} is empty: no request could pass it (give a key, or none to serve without one)`);
    const drafterFlags = drafterFromFlags('serve', values);
    checkModelDir('serve', dir);
    const defaults = samplingDefaults(dir);
    const opts = { ...loadOptionsFromFlags('serve', values), tokenizer: values.tok, parallel, drafter: drafterFlags.drafter };
    const kimi = await loadForCommand('serve', dir, opts);
    const ctx = opts.ctx!;
    const name = values.name ?? path.basename(path.resolve(dir));
    let srv;
    try {
      // checked (and its weights loaded) before listening: a bad --drafter DIR is one line, not a 500 per request
      let drafter: DrafterChoice | undefined;
      if (drafterFlags.drafter !== undefined) {
        const { block: _, ...choice } = checkDrafter(kimi, drafterFlags.drafter, drafterFlags.specWidth);
        drafter = choice;
      }
      srv = await faces.startServer(kimi, { drafter, host: values.host, port, apiKey, metricsOpen: values['metrics-open'] ?? false, name, bodyLimit, maxQueue, maxContext: ctx, defaults, vendorParams: values['vendor-params'] ?? false, thinking: !(values['no-thinking'] ?? false), defaultMaxTokens });
    } catch (e) {
      await kimi.close();
      throw e;
    }
    process.stderr.write(`k3 serve: ${name} (${kimi.architecture}) on ${srv.url} (parallel ${parallel})\n`);
    await untilStopped('k3 serve', STOP_GRACE_MS);
    process.stderr.write('k3 serve: stopping\n');
    await srv.close();
    const budget = kimi.model.store.plan.budgetBytes;
    await kimi.close();
    const peak = process.resourceUsage().maxRSS * 1024;
    if (peak > budget) process.stderr.write(`k3 serve: warning: peak RSS ${formatBytes(peak)} (${peak} bytes) was above the memory budget ${formatBytes(budget)}: memory the plan does not count (docs/MEMORY.md)\n`);
    return 0;
  },
};
