// `k3`: one subcommand per file in this folder (the binary is src/main.ts). A user mistake prints
// one line and exits 2 (1 for I/O, 4 for a failed weight read mid-run); anything else is a bug and
// keeps its trace.

import * as fs from 'node:fs';
import { UserError } from '../util/errors.js';
import { checkCommandName } from './args.js';
import type { Command, Faces } from './command.js';
import { endQuietlyOnClosedOutput } from './signals.js';

// Expert and piece reads go to libuv's thread pool; the default 4 threads is too few for a layer's
// 16 parallel expert reads. Must be set before the first asynchronous file operation.
process.env.UV_THREADPOOL_SIZE ??= '16';

const COMMANDS: Record<string, () => Promise<{ command: Command }>> = {
  demo: () => import('./demo.js'),
  run: () => import('./run.js'),
  logits: () => import('./logits.js'),
  info: () => import('./info.js'),
  plan: () => import('./plan.js'),
  pull: () => import('./pull.js'),
  pack: () => import('./pack.js'),
  verify: () => import('./verify.js'),
  chat: () => import('./chat.js'),
  serve: () => import('./serve.js'),
  bench: () => import('./bench.js'),
  synth: () => import('./synth.js'),
  tokenize: () => import('./tokenize.js'),
  detokenize: () => import('./detokenize.js'),
  render: () => import('./render.js'),
};

async function usage(): Promise<string> {
  const lines = ['usage: k3 COMMAND [options]   (k3 COMMAND --help for details)', '', 'commands:'];
  for (const [name, load] of Object.entries(COMMANDS)) {
    const { command } = await load();
    lines.push(`  ${name.padEnd(12)} ${command.summary}`);
  }
  return lines.join('\n');
}

/** `k3 0.1.0 (kimi-k3-ts, node v20.x)`, from the package.json next to dist/. */
function version(): string {
  const pkg = JSON.parse(fs.readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { name: string; version: string };
  return `k3 ${pkg.version} (${pkg.name}, node ${process.version})`;
}

async function main(argv: string[], faces: Faces): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(await usage());
    return name ? 0 : 2;
  }
  if (name === '--version' || name === '-V' || name === 'version' || rest.includes('--version')) {
    console.log(version());
    return 0;
  }
  checkCommandName(name, Object.keys(COMMANDS));
  const load = COMMANDS[name]!;
  const { command } = await load();
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(command.help);
    return 0;
  }
  return command.run(rest, faces);
}

/** Runs `k3 ARGS...` and sets the exit code. */
export function runK3(argv: string[], faces: Faces): void {
  endQuietlyOnClosedOutput();
  main(argv, faces).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      if (err instanceof UserError) {
        process.stderr.write(`k3: ${err.message}\n`);
        process.exitCode = err.exitCode;
      } else {
        process.stderr.write(`k3: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
        process.exitCode = 70;
      }
    },
  );
}
