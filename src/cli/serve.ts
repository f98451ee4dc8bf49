// `k3 serve MODEL`: the OpenAI-compatible server (src/server) over the library's model (src/api).

import * as os from 'node:os';
import * as path from 'node:path';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, ioMode } from './common.js';
import { loadModel } from '../api/index.js';
import { startServer } from '../server/server.js';
import { FaultyReader } from '../store/fault.js';
import { makeReader } from '../store/direct-reader.js';
import { FsReader } from '../store/store.js';
import { UserError } from '../util/errors.js';

export const command: Command = {
  summary: 'serve a model over an OpenAI-compatible HTTP API, with a chat page at /',
  help: `usage: k3 serve MODEL [--host H] [--port P] [--api-key KEY] [--parallel N] [model options]

Serves POST /v1/chat/completions (streamed or not), POST /v1/completions, GET /v1/models,
GET /health, GET /metrics (Prometheus) and a chat page at GET /. Requests are decoded together
(up to --parallel at a time, each with the same output as alone); a request whose tokens start
with a state the server still holds continues from it (usage.prompt_tokens_details.cached_tokens).
Stops on SIGINT / SIGTERM.

  --host H          address to listen on (default 127.0.0.1)
  --port P          port (default 8080; 0 = any free port, printed at start)
  --api-key KEY     require "Authorization: Bearer KEY" on /v1/ routes (default: env K3_API_KEY, else none)
  --name NAME       model name in /v1/models and responses (default: the directory's name)
  --parallel N      sequences decoded together (default 4)
  --queue N         requests waiting beyond those before answering 429 (default 64)
  --body-limit N    largest request body in bytes (default 4194304)
  --tok DIR         tokenizer directory (default: MODEL)
${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse(
      'serve',
      args,
      { host: { type: 'string' }, port: { type: 'string' }, 'api-key': { type: 'string' }, name: { type: 'string' }, parallel: { type: 'string' }, queue: { type: 'string' }, 'body-limit': { type: 'string' }, tok: { type: 'string' }, ...MODEL_OPTIONS },
      1,
    );
    const dir = positionals[0]!;
    const port = parseIntFlag('serve', 'port', values.port, 8080, 0);
    if (port > 65535) throw new UserError(`serve: --port must be at most 65535, got ${port}`);
    const parallel = parseIntFlag('serve', 'parallel', values.parallel, 4, 1);
    const maxQueue = parseIntFlag('serve', 'queue', values.queue, 64, 0);
    const bodyLimit = parseIntFlag('serve', 'body-limit', values['body-limit'], 4 << 20, 1);
    const kernels = values.kernels ?? 'wasm';
    if (kernels !== 'wasm' && kernels !== 'ref') throw new UserError('serve: --kernels must be wasm or ref');
    const eps = values['mla-latent-eps'];
    if (eps !== undefined && eps !== 'reference' && eps !== 'config') throw new UserError('serve: --mla-latent-eps must be reference or config');
    const fault = process.env.K3_FAULT_AFTER_READS;
    const ctx = parseIntFlag('serve', 'ctx', values.ctx, 4096, 1);
    const io = ioMode('serve', values.io);
    const kimi = await loadModel(dir, {
      memory: values.memory,
      preset: values.preset,
      ctx,
      chunk: parseIntFlag('serve', 'chunk', values.chunk, 64, 1),
      threads: parseIntFlag('serve', 'threads', values.threads, os.availableParallelism(), 1),
      kernels,
      preload: !values['no-preload'],
      tokenizer: values.tok,
      parallel,
      fastExperts: values['fast-experts'],
      fast: values.fast,
      mlaLatentEps: eps,
      kimiLinearBiasedWeights: values['kimi-linear-biased-weights'],
      io,
      lookahead: !values['no-lookahead'],
      verifyReads: values['verify-reads'],
      allowNonfinite: values['allow-nonfinite'],
      reader: fault !== undefined && /^\d+$/.test(fault) ? new FaultyReader(makeReader(io, () => new FsReader()), Number(fault)) : undefined,
    });
    const name = values.name ?? path.basename(path.resolve(dir));
    let srv;
    try {
      srv = await startServer(kimi, { host: values.host, port, apiKey: values['api-key'] ?? process.env.K3_API_KEY, name, bodyLimit, maxQueue, maxContext: ctx });
    } catch (e) {
      await kimi.close();
      throw e;
    }
    process.stderr.write(`k3 serve: ${name} (${kimi.architecture}) on ${srv.url} (parallel ${parallel})\n`);
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    process.stderr.write('k3 serve: stopping\n');
    await srv.close();
    await kimi.close();
    return 0;
  },
};
