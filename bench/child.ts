// One job in a child Node process, for the parts of a bench that run native code which may abort
// the whole process (llama.cpp's GGML_ASSERT / GGML_ABORT call abort(): no exception reaches
// JavaScript). The parent forks a module that calls serveChild(), sends it one job, and gets back
// either the job's result or a failure that names what the child died of (the assert text).
//
// Protocol (Node IPC): parent -> child { job }; child -> parent { log } lines, then one
// { result } or { error }. The child's stdout and stderr are collected, not shown, unless it fails.

import { fork } from 'node:child_process';

export type ChildOutcome<T> =
  | { ok: true; value: T }
  | { ok: false; reason: string; code: number | null; signal: NodeJS.Signals | null; stderrTail: string };

type ToChild = { job: unknown };
type FromChild = { log: string } | { result: unknown } | { error: string };

/** Keep this many characters of the child's output for the failure report. */
const TAIL = 16_384;

/**
 * The line of `output` that says why native code aborted: ggml prints `file:line: GGML_ASSERT(x)
 * failed` or `file:line: <message>` from GGML_ABORT before abort(); C++ prints `terminate called
 * ...`. null when none is found.
 */
export function abortReason(output: string): string | null {
  const lines = output.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0);
  const pats = [/GGML_ASSERT\(.*\) failed/, /^\S+\.(?:c|cpp|h):\d+: /, /terminate called/, /\b(?:abort|Aborted|Segmentation fault)\b/];
  for (const p of pats) {
    const hit = lines.find((l) => p.test(l));
    if (hit) return hit;
  }
  return null;
}

/**
 * Run `job` in a fresh `node <modulePath> ...args` whose module calls serveChild(). `onLog` gets the
 * child's log lines as they come. Never rejects: a crash, a non-zero exit or a thrown error in the
 * child is a `{ ok: false }` outcome with the reason.
 */
export function runChild<T>(modulePath: string, args: string[], job: unknown, onLog: (s: string) => void, env: NodeJS.ProcessEnv = {}): Promise<ChildOutcome<T>> {
  return new Promise((resolve) => {
    const child = fork(modulePath, args, {
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      // structured clone, not JSON: results keep Infinity / NaN and typed arrays
      serialization: 'advanced',
      // no backtrace: ggml would otherwise print (or attach a debugger for) one after the assert
      env: { ...process.env, GGML_NO_BACKTRACE: '1', ...env },
    });
    let out = '';
    const keep = (b: Buffer) => {
      out = (out + b.toString('utf8')).slice(-TAIL);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    let result: { value: unknown } | null = null;
    let error: string | null = null;
    child.on('message', (m: FromChild) => {
      if ('log' in m) onLog(m.log);
      else if ('result' in m) result = { value: m.result };
      else if ('error' in m) error = m.error;
    });
    let spawnError: string | null = null;
    child.on('error', (e) => {
      spawnError = e.message;
    });
    child.on('close', (code, signal) => {
      if (result && code === 0) return resolve({ ok: true, value: result.value as T });
      const native = abortReason(out);
      const how = signal ? `killed by ${signal}` : `exited with code ${code}`;
      const reason = spawnError ?? error ?? (native ? `${how}: ${native}` : `${how} (no assert text in its output)`);
      resolve({ ok: false, reason, code, signal, stderrTail: out });
    });
    child.send({ job } satisfies ToChild);
  });
}

/** The child side: run `handler` on the job the parent sends, report, and exit. */
export function serveChild(handler: (job: unknown, log: (s: string) => void) => Promise<unknown>): void {
  const send = (m: FromChild) => new Promise<void>((res) => process.send!(m, undefined, {}, () => res()));
  if (!process.send) throw new Error('serveChild: not started by runChild (no IPC channel)');
  process.once('message', (m: ToChild) => {
    void (async () => {
      let code = 0;
      try {
        const value = await handler(m.job, (s) => void send({ log: s }));
        await send({ result: value });
      } catch (e) {
        code = 1;
        await send({ error: e instanceof Error ? e.message : String(e) });
      }
      // native libraries may keep threads alive: leave explicitly once the parent has the answer
      process.exit(code);
    })();
  });
}
