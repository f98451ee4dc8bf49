// What every `k3` subcommand file exports (main.ts loads them on demand).

export interface Command {
  /** One line for `k3 --help`. */
  summary: string;
  /** Full help for `k3 CMD --help`. */
  help: string;
  run(args: string[]): Promise<number>;
}
