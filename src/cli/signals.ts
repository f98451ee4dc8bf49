// SIGINT / SIGTERM for commands that write files: the library code takes an AbortSignal and
// cleans up after itself; the CLI turns the first signal into an abort with an Interrupted
// error (one line, exit 130). A second signal exits at once. A server stops within a bounded
// time (untilStopped).

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

/**
 * For a command that runs until stopped (`k3 serve`): resolves at the first SIGINT or SIGTERM,
 * after which the caller shuts down in order. A second signal exits at once (130), and so does
 * a shutdown still running after `graceMs` (exit 1, one line): a stop never waits on a forward
 * pass or a read that will not end. The timer does not keep the process alive.
 */
export function untilStopped(what: string, graceMs: number): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const first = (sig: NodeJS.Signals) => {
      process.off('SIGINT', first);
      process.off('SIGTERM', first);
      process.once('SIGINT', () => process.exit(130));
      process.once('SIGTERM', () => process.exit(130));
      setTimeout(() => {
        process.stderr.write(`${what}: not stopped ${graceMs / 1000} s after ${sig}; exiting without waiting\n`);
        process.exit(1);
      }, graceMs).unref();
      resolve(sig);
    };
    process.on('SIGINT', first);
    process.on('SIGTERM', first);
  });
}

/**
 * stdout closed by the reader (`k3 run ... | head -c 5`): EPIPE ends the process quietly with
 * exit 0, as `yes | head` does (nothing on disk is in flight: commands print to stdout only after
 * their files are complete). A failed write (`> /dev/full`: ENOSPC) is one error line, exit 1.
 */
export function endQuietlyOnClosedOutput(): void {
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    process.stderr.write(`k3: cannot write to stdout (${e.code ?? e.message}${e.code === 'ENOSPC' ? ': no space left on device' : ''})\n`);
    process.exit(1);
  });
}
