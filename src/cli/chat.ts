// `k3 chat`: a REPL over a ChatSession. Each input line is a user turn or a /command; the reply
// is streamed to stdout as it is generated and ends with a newline. Works on a terminal and
// driven by a script through a pipe (lines are queued and handled in order; no prompt is shown
// when stdin is not a terminal). Ctrl-C (SIGINT) while a reply is generated stops that reply;
// Ctrl-C at the prompt, EOF or /exit end the program.

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import type { Command } from './command.js';
import { parse, parseIntFlag } from './args.js';
import { MODEL_HELP, MODEL_OPTIONS, checkModelDir, loadForCommand, loadOptionsFromFlags } from './common.js';
import { DRAFTER_HELP, DRAFTER_OPTIONS, SAMPLING_HELP, SAMPLING_OPTIONS, drafterFromFlags, samplingFromFlags } from './run.js';
import type { KimiChatSession, TurnOptions } from '../api/session.js';
import { Sampler } from '../api/decoding.js';
import { UserError } from '../util/errors.js';

const COMMANDS_HELP = `commands:
  /save FILE   write the conversation's state (KDA state, MLA cache, token ids) to FILE
  /load FILE   continue the conversation saved in FILE (refused if saved from another model)
  /reset       start a new conversation
  /stats       tokens in context, tokens processed last turn, prompt and decode speed
  /ids         the token ids of the last reply (JSON)
  /help        this list
  /exit        quit (also Ctrl-C at the prompt, or end of input)`;

export const command: Command = {
  summary: 'talk to a model: a REPL that keeps the conversation state between turns',
  help: `usage: k3 chat MODEL [--tok DIR] [--system TEXT] [--load FILE] [--max-tokens N] [--drafter DIR [--spec-width N]] [sampling options] [model options]

Reads lines from stdin: each is a user message (or a /command); the reply is streamed to stdout
and ends with a newline. The KDA state and MLA cache are kept between turns, so a follow-up only
runs its new tokens through the model. The chat format is K3's for K3 models, K2's otherwise; a
reply ends at the end-of-message token, a --stop string or --max-tokens (default 512). Ctrl-C
during a reply stops the reply; Ctrl-C at the prompt or end of input exits.

  --tok DIR         tokenizer directory (default: MODEL)
  --system TEXT     system message of the conversation
  --load FILE       start from a state saved with /save
  --max-tokens N    longest reply in tokens (default 512)
  --no-thinking     K3: answer without thinking (default: think first, effort max, as K3's
                    release template; the reasoning goes to stderr, dimmed on a terminal)
${DRAFTER_HELP}
                    (after /load, replies are not drafted until /reset: the drafter never saw
                    the loaded positions' states)

${COMMANDS_HELP}

${SAMPLING_HELP}
${MODEL_HELP}`,
  async run(args) {
    const { values, positionals } = parse('chat', args, { tok: { type: 'string' }, system: { type: 'string' }, load: { type: 'string' }, 'no-thinking': { type: 'boolean' }, ...DRAFTER_OPTIONS, ...SAMPLING_OPTIONS, ...MODEL_OPTIONS }, 1);
    const dir = positionals[0]!;
    const maxTokens = parseIntFlag('chat', 'max-tokens', values['max-tokens'], 512, 1);
    const spec = parseIntFlag('chat', 'spec', values.spec, 0, 0);
    const drafter = drafterFromFlags('chat', values);
    const sampling = samplingFromFlags('chat', values);
    new Sampler(sampling); // check the ranges before loading anything
    checkModelDir('chat', dir);
    const tokDir = values.tok ?? dir;
    if (!fs.existsSync(path.join(tokDir, 'tiktoken.model'))) throw new UserError(`chat: needs the tokenizer files (tiktoken.model in ${tokDir}, or --tok DIR)`);
    const kimi = await loadForCommand('chat', dir, { ...loadOptionsFromFlags('chat', values), tokenizer: tokDir, drafter: drafter.drafter });
    try {
      const session = kimi.session({
        system: values.system,
        sampling,
        maxTokens,
        stopStrings: values.stop ?? [],
        ignoreEos: values['ignore-eos'] ?? false,
        thinking: !(values['no-thinking'] ?? false),
        spec,
        ...drafter,
      });
      if (values.load !== undefined) {
        const l = session.load(values.load);
        process.stderr.write(`loaded ${session.history.length} tokens (${l.bytes} bytes) from ${values.load}\n`);
      }
      return await repl(session);
    } finally {
      await kimi.close();
    }
  },
};

async function repl(session: KimiChatSession): Promise<number> {
  const interactive = process.stdin.isTTY === true && process.stdout.isTTY === true;
  const rl = readline.createInterface({ input: process.stdin, output: interactive ? process.stdout : undefined, terminal: interactive });
  const lines: string[] = [];
  let ended = false;
  let exitCode = 0;
  let wake: (() => void) | null = null;
  const poke = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  rl.on('line', (l) => {
    lines.push(l);
    poke();
  });
  rl.on('close', () => {
    ended = true;
    poke();
  });
  let generating: AbortController | null = null;
  const onSigint = (): void => {
    if (generating) {
      generating.abort();
      return;
    }
    ended = true;
    exitCode = 130;
    lines.length = 0;
    if (interactive) process.stdout.write('\n');
    poke();
  };
  process.on('SIGINT', onSigint);
  rl.on('SIGINT', onSigint);
  if (interactive) rl.setPrompt('> ');

  const next = async (): Promise<string | null> => {
    for (;;) {
      if (lines.length > 0) return lines.shift()!;
      if (ended) return null;
      if (interactive) rl.prompt();
      await new Promise<void>((r) => (wake = r));
    }
  };

  try {
    for (;;) {
      const line = await next();
      if (line === null || !(await handleLine(session, line, (a) => (generating = a)))) break;
    }
  } finally {
    process.off('SIGINT', onSigint);
    rl.close();
    process.stdin.pause();
  }
  return exitCode;
}

/** One input line: a /command or a user turn (its reply printed). False: the line ends the REPL. */
async function handleLine(session: KimiChatSession, line: string, generating: (a: AbortController | null) => void): Promise<boolean> {
  const input = line.trim();
  if (input.length === 0) return true;
  if (input.startsWith('/')) {
    const sp = input.search(/\s/);
    const cmd = sp < 0 ? input : input.slice(0, sp);
    const arg = sp < 0 ? '' : input.slice(sp).trim();
    if (cmd === '/exit' || cmd === '/quit') return false;
    try {
      slashCommand(session, cmd, arg);
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      process.stderr.write(`k3: ${e.message}\n`);
    }
    return true;
  }
  const abort = new AbortController();
  generating(abort);
  try {
    const printer = replyPrinter(session.format === 'k3');
    const r = await session.turn(line, { ...printer, signal: abort.signal });
    printer.end();
    process.stdout.write('\n');
    if (r.reason === 'interrupted') process.stderr.write(r.interruptedInPrompt ? '[interrupted while reading the prompt]\n' : '[interrupted]\n');
    if (r.reason === 'context') process.stderr.write(`[the context of ${session.ctx} tokens is full: /reset starts a new conversation; --ctx N gives more]\n`);
  } finally {
    generating(null);
  }
  return true;
}

/** Where a reply goes: K3's reasoning to stderr (dimmed on a terminal), its answer and tool
 *  calls to stdout; other formats' text to stdout as it comes. */
function replyPrinter(k3: boolean): Pick<TurnOptions, 'onText' | 'onDelta'> & { end(): void } {
  if (!k3) return { onText: (s) => void process.stdout.write(s), end: () => {} };
  const dim = process.stderr.isTTY === true;
  let thinking = false;
  return {
    end: () => {
      if (thinking) process.stderr.write(dim ? '\x1b[0m\n' : '\n');
      thinking = false;
    },
    onDelta: (d) => {
      if (d.reasoning_content) {
        if (!thinking && dim) process.stderr.write('\x1b[2m');
        thinking = true;
        process.stderr.write(d.reasoning_content);
        return;
      }
      if (thinking) {
        process.stderr.write(dim ? '\x1b[0m\n' : '\n');
        thinking = false;
      }
      if (d.content) process.stdout.write(d.content);
      if (d.tool_call) process.stdout.write(`\n[tool call ${d.tool_call.function.name} ${d.tool_call.function.arguments}]`);
    },
  };
}

function slashCommand(session: KimiChatSession, cmd: string, arg: string): void {
  const needFile = (): string => {
    if (!arg) throw new UserError(`${cmd} needs a file name`);
    return arg;
  };
  switch (cmd) {
    case '/save': {
      const file = needFile();
      const n = session.save(file);
      process.stderr.write(`saved ${session.history.length} tokens (${n} bytes) to ${file}\n`);
      return;
    }
    case '/load': {
      const file = needFile();
      const l = session.load(file);
      process.stderr.write(`loaded ${session.history.length} tokens (${l.bytes} bytes) from ${file}\n`);
      return;
    }
    case '/reset':
      session.reset();
      process.stderr.write('conversation reset\n');
      return;
    case '/stats':
      process.stdout.write(session.stats() + '\n');
      return;
    case '/ids':
      process.stdout.write(JSON.stringify(session.lastTurn?.ids ?? []) + '\n');
      return;
    case '/help':
      process.stdout.write(COMMANDS_HELP + '\n');
      return;
    default:
      throw new UserError(`unknown command ${cmd} (/help lists them)`);
  }
}
