// Argument parsing for every subcommand, with commander (already in the install through
// dependency-cruiser, so it adds no bytes). Each command declares its flags as one table in
// node:util parseArgs' shape ({ name: { type, short?, multiple? } }) and gets parseArgs-typed
// values back; commander gives what parseArgs lacks: an option's value is the next argument even
// when it starts with a dash (`--seed -1`, `--presence-penalty -0.5`), and "did you mean" for an
// unknown flag or command. Its errors become one clear line (exit 2), never a stack trace.

import * as fs from 'node:fs';
import { Command as Commander, CommanderError, Option } from 'commander';
import type { parseArgs, ParseArgsConfig } from 'node:util';
import { UserError } from '../util/errors.js';

type Options = NonNullable<ParseArgsConfig['options']>;
type Parsed<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>>;

/** Commander's message ("error: unknown option '--sed'\n(Did you mean --seed?)") as one line. */
function oneLine(e: CommanderError): string {
  const [first = '', ...rest] = e.message.split('\n');
  const msg = first.replace(/^error: /, '').replace(/'([^']*)'/g, '$1');
  const hint = rest.join(' ').match(/\(Did you mean (.*)\?\)/);
  return hint ? `${msg}; did you mean ${hint[1]}?` : msg;
}

function quiet(c: Commander): Commander {
  return c.exitOverride().helpOption(false).configureOutput({ writeOut: () => {}, writeErr: () => {} }).showSuggestionAfterError(true);
}

/**
 * Parse `args` against the flag table `options`. A `model` flag (`-m DIR`, as llama.cpp) stands
 * for the first positional argument; `positionals` is how many are required.
 */
export function parse<O extends Options>(cmd: string, args: string[], options: O, positionals = 0): Parsed<O> {
  const c = quiet(new Commander(`k3 ${cmd}`)).allowExcessArguments(true);
  const attr = new Map<string, string>();
  for (const [name, o] of Object.entries(options)) {
    const value = o.type === 'string' ? ' <value>' : '';
    // A one-letter name (bench's -p / -n / -r) is a short flag only; commander wants long names longer.
    const flags = name.length === 1 ? `-${name}${value}` : `${o.short ? `-${o.short}, ` : ''}--${name}${value}`;
    const opt = new Option(flags);
    if (o.multiple) opt.argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), v]);
    // `--no-x` is an ordinary flag here, not commander's negation of `--x`.
    if (name.startsWith('no-')) opt.negate = false;
    c.addOption(opt);
    attr.set(name, opt.attributeName());
  }
  try {
    c.parse(args, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) throw new UserError(`${cmd}: ${oneLine(e)} (k3 ${cmd} --help)`);
    throw e;
  }
  const got = c.opts();
  const values: Record<string, unknown> = {};
  for (const [name, a] of attr) if (got[a] !== undefined) values[name] = got[a];
  const pos = [...c.args];
  if (typeof values.model === 'string') pos.unshift(values.model);
  if (pos.length < positionals) throw new UserError(`${cmd}: expected ${positionals} positional argument(s) (k3 ${cmd} --help)`);
  return { values, positionals: pos } as Parsed<O>;
}

/** Throws a UserError naming the closest command when `name` is not one of `names`. */
export function checkCommandName(name: string, names: readonly string[]): void {
  if (names.includes(name)) return;
  const c = quiet(new Commander('k3'));
  for (const n of names) c.command(n);
  try {
    c.parse([name], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) throw new UserError(`${oneLine(e)} (k3 --help lists them)`);
    throw e;
  }
  throw new UserError(`unknown command ${name} (k3 --help lists them)`);
}

/** The text of a file flag's value; `-` is stdin. */
export function readTextFlag(cmd: string, flag: string, file: string): string {
  try {
    return fs.readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(`${cmd}: cannot read --${flag} ${file === '-' ? '(stdin)' : file}: ${code === 'ENOENT' ? 'no such file' : (code ?? String(e))}`, code === 'ENOENT' ? 2 : 1);
  }
}

/** "1,2,3" -> [1,2,3]; every entry a non-negative integer. */
export function parseIds(cmd: string, s: string): number[] {
  const parts = s.split(',').map((p) => p.trim()).filter((p) => p.length > 0);
  if (parts.length === 0) throw new UserError(`${cmd}: --ids is empty`);
  return parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new UserError(`${cmd}: --ids entry ${JSON.stringify(p)} is not a non-negative integer`);
    return Number(p);
  });
}

export function parseIntFlag(cmd: string, name: string, s: string | undefined, def: number, min = 0): number {
  if (s === undefined) return def;
  if (!/^\d+$/.test(s) || Number(s) < min) throw new UserError(`${cmd}: --${name} must be an integer >= ${min}, got ${JSON.stringify(s)}`);
  return Number(s);
}
