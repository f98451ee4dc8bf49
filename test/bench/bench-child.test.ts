// bench/child.ts: a job in a child process, whose native abort (as llama.cpp's GGML_ASSERT) must
// come back as a failure naming the assert, not take the bench down. This file is also the child:
// run with `--child`, it serves the jobs the tests send.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { abortReason, runChild, serveChild } from '../../bench/child.js';

type Job = { kind: 'echo'; x: unknown } | { kind: 'abort' } | { kind: 'throw' } | { kind: 'exit' };

const SELF = fileURLToPath(import.meta.url);
const ASSERT_LINE = '/src/ggml/src/ggml-backend.cpp:1294: GGML_ASSERT(*cur_backend_id != -1) failed';

if (process.argv[2] === '--child') {
  serveChild(async (j, log) => {
    const job = j as Job;
    log('started');
    if (job.kind === 'abort') {
      process.stderr.write(`some log line\n${ASSERT_LINE}\n`);
      process.abort();
    }
    if (job.kind === 'throw') throw new Error('no such model');
    if (job.kind === 'exit') process.exit(3);
    return job.x;
  });
} else {
  test('abortReason finds the assert or abort line of ggml / C++ output', () => {
    assert.equal(abortReason(`load_tensors: ok\n${ASSERT_LINE}\n`), ASSERT_LINE);
    assert.equal(abortReason('x\n/a/llama-graph.cpp:77: fatal error\n'), '/a/llama-graph.cpp:77: fatal error');
    assert.equal(abortReason("terminate called after throwing an instance of 'std::runtime_error'"), "terminate called after throwing an instance of 'std::runtime_error'");
    assert.equal(abortReason('all fine\n'), null);
  });

  test('runChild returns the result (structured clone) and forwards log lines', async () => {
    const logs: string[] = [];
    const r = await runChild<unknown>(SELF, ['--child'], { kind: 'echo', x: { a: [1, Infinity], f: new Float64Array([0.5]) } }, (s) => logs.push(s));
    assert.ok(r.ok, r.ok ? '' : r.reason);
    assert.deepEqual(r.value, { a: [1, Infinity], f: new Float64Array([0.5]) });
    assert.deepEqual(logs, ['started']);
  });

  test('a native abort in the child is a failure that quotes the assert', async () => {
    const r = await runChild<unknown>(SELF, ['--child'], { kind: 'abort' }, () => {});
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.equal(r.signal, 'SIGABRT');
    assert.equal(r.reason, `killed by SIGABRT: ${ASSERT_LINE}`);
    assert.match(r.stderrTail, /some log line/);
  });

  test('a thrown error or a bare non-zero exit in the child is a failure with its reason', async () => {
    const t = await runChild<unknown>(SELF, ['--child'], { kind: 'throw' }, () => {});
    assert.deepEqual([t.ok, t.ok ? '' : t.reason], [false, 'no such model']);
    const e = await runChild<unknown>(SELF, ['--child'], { kind: 'exit' }, () => {});
    assert.deepEqual([e.ok, e.ok ? '' : e.reason], [false, 'exited with code 3 (no assert text in its output)']);
  });
}
