// Errors a user can cause (bad file, bad flag, bad id) are UserError: the CLI prints one line
// and exits with the code given, never a stack trace. Anything else is a bug and keeps its trace.

/** Exit codes: 2 = bad input or usage, 1 = I/O failure, 4 = a weight read failed mid-run;
 *  (not errors: 130 = interrupted, 5 = `k3 run --strict-memory` ended above its memory budget). */
export class UserError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.name = 'UserError';
    this.exitCode = exitCode;
  }
}

/** The user stopped a command (SIGINT / SIGTERM): exit 130, as a shell reports a SIGINT. */
export class Interrupted extends UserError {
  constructor(message: string) {
    super(message, 130);
    this.name = 'Interrupted';
  }
}

/** A read from the checkpoint failed or came back short (exit code 1 at load, 4 mid-run). */
export class ReadError extends UserError {
  constructor(message: string, exitCode = 1) {
    super(message, exitCode);
    this.name = 'ReadError';
  }
}
