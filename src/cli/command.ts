// What every `k3` subcommand file exports (main.ts loads them on demand).

import type { StartServer } from '../api/index.js';

/** What the binary (src/main.ts) hands the commands from outside the library: the server `k3 serve` starts. */
export interface Faces {
  startServer: StartServer;
}

export interface Command {
  /** One line for `k3 --help`. */
  summary: string;
  /** Full help for `k3 CMD --help`. */
  help: string;
  /** `faces`: what the binary hands the command (only `k3 serve` takes it). */
  run(args: string[], faces?: Faces): Promise<number>;
}
