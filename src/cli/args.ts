// Argument parsing for every subcommand: node's own util.parseArgs, with its errors turned into
// one clear line (exit 2) instead of a stack trace.

import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UserError } from '../util/errors.js';

type Options = NonNullable<ParseArgsConfig['options']>;

export function parse<O extends Options>(cmd: string, args: string[], options: O, positionals = 0) {
  let out;
  try {
    out = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UserError(`${cmd}: ${(e as Error).message.split('\n')[0]} (k3 ${cmd} --help)`);
  }
  if (out.positionals.length < positionals) throw new UserError(`${cmd}: expected ${positionals} positional argument(s) (k3 ${cmd} --help)`);
  return out;
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
