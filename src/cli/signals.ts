// SIGINT / SIGTERM for commands that write files: the library code takes an AbortSignal and
// cleans up after itself; the CLI turns the first signal into an abort with an Interrupted
// error (one line, exit 130). A second signal exits at once.

import { Interrupted } from '../util/errors.js';

/** An AbortSignal fired by the next SIGINT or SIGTERM while this process runs `what`. */
export function stopOnSignals(what: string): AbortSignal {
  const ac = new AbortController();
  const onSignal = (sig: NodeJS.Signals) => {
    if (ac.signal.aborted) process.exit(130);
    ac.abort(new Interrupted(`${what} interrupted (${sig}); nothing written`));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return ac.signal;
}
