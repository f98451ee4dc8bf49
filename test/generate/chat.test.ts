// `k3 chat` and ChatSession on a demo K3 checkpoint: a follow-up turn runs only its new tokens
// through the model, /save + /load in a fresh process continues exactly as an uninterrupted
// session, state files from another model or cut short are refused, and Ctrl-C stops a reply,
// not the program.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { argmax } from '../../src/generate/greedy.js';
import { ChatSession } from '../../src/generate/session.js';
import { loadState, saveState } from '../../src/generate/state-file.js';
import { Model } from '../../src/model/model.js';
import type { SequenceState } from '../../src/model/state.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles, loadTokenizer, renderChat } from '../../src/tokenizer/index.js';
import { UserError } from '../../src/util/errors.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'k3-chat-'));
const DEMO = join(tmp, 'demo-k3');
const KL = join(tmp, 'kimi-linear');

before(async () => {
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  await synthCheckpoint({ arch: 'kimi_linear', out: KL });
});
after(() => rmSync(tmp, { recursive: true, force: true }));

interface Call {
  pos: number;
  ids: number[];
}

/** Record every forward call: the state's position before it and the ids passed. */
function instrument(model: Model): { calls: Call[]; original: Model['forward'] } {
  const calls: Call[] = [];
  const original = model.forward.bind(model);
  model.forward = async (state: SequenceState, ids: number[], rows, chunk) => {
    calls.push({ pos: state.position, ids: [...ids] });
    return original(state, ids, rows, chunk);
  };
  return { calls, original };
}

test('a follow-up turn runs only its new tokens through the model, with the same result as from scratch', async () => {
  const model = Model.open(DEMO, { ctx: 512 });
  try {
    const tok = await loadTokenizer(DEMO);
    const { calls, original } = instrument(model);
    const session = new ChatSession(model, tok, { maxTokens: 6, ignoreEos: true, chunk: 16, thinking: false });
    const r1 = await session.turn('Hello');
    assert.equal(r1.reason, 'max_tokens');
    assert.equal(r1.ids.length, 6);
    // Turn 1 from position 0: the rendered user message, then one call per decode step.
    const user1 = renderChat(tok, [{ role: 'user', content: 'Hello' }], { format: 'k3', addGenerationPrompt: true, thinking: false }).ids;
    assert.deepEqual(r1.promptIds, user1);
    assert.equal(calls[0]!.pos, 0);

    calls.length = 0;
    const posBefore = session.state.position;
    const histBefore = [...session.history];
    assert.equal(posBefore, histBefore.length - 1, 'the last reply token is not yet processed');
    const r2 = await session.turn('How are you?');
    assert.equal(r2.rebuilt, null);
    assert.equal(r2.reused, posBefore);
    const user2 = renderChat(tok, [{ role: 'user', content: 'How are you?' }], { format: 'k3', addGenerationPrompt: true, thinking: false }).ids;
    const expectedNew = [histBefore.at(-1)!, ...session.closing(), ...user2];
    // The prefill calls start where the state was and cover exactly the new tokens.
    const prefill = calls.slice(0, calls.length - r2.decodeTokens);
    const decode = calls.slice(calls.length - r2.decodeTokens);
    assert.equal(prefill[0]!.pos, posBefore);
    assert.deepEqual(prefill.flatMap((c) => c.ids), expectedNew);
    assert.deepEqual(r2.promptIds, expectedNew);
    let pos = posBefore;
    for (const c of calls) {
      assert.equal(c.pos, pos, 'calls cover consecutive positions');
      pos += c.ids.length;
    }
    assert.deepEqual(decode.map((c) => c.ids), r2.ids.slice(0, -1).map((id) => [id]));
    const processed = calls.reduce((s, c) => s + c.ids.length, 0);
    assert.equal(processed, expectedNew.length + r2.ids.length - 1);
    // Everything but the positions already in the state (and the last sampled id, not yet fed).
    assert.equal(processed, session.history.length - 1 - posBefore);
    assert.match(session.stats(), new RegExp(`reused ${posBefore} tokens`));

    // The same reply from a fresh state that reads the whole conversation.
    const context = session.history.slice(0, session.history.length - r2.ids.length);
    const fresh = model.newState();
    let logits = await original(fresh, context, 'last', 64);
    const V = model.config.vocabSize;
    const ref: number[] = [];
    for (let i = 0; i < r2.ids.length; i++) {
      ref.push(argmax(logits, 0, V));
      if (i < r2.ids.length - 1) logits = await original(fresh, [ref.at(-1)!], 'last');
    }
    assert.deepEqual(r2.ids, ref);

    // A turn interrupted while its prompt is read leaves a state that no longer matches the
    // conversation: the next turn resets and reprocesses, and /stats says so.
    // (Interrupted after its third chunk, inside the message text: the state then holds tokens
    // the next turn does not have.)
    let checks = 0;
    const abort = {
      get aborted(): boolean {
        return ++checks >= 3;
      },
    };
    const r3 = await session.turn('A longer question that takes more than one chunk of sixteen tokens to read', { abort });
    assert.equal(r3.interruptedInPrompt, true);
    assert.equal(r3.reason, 'interrupted');
    assert.throws(() => session.save(join(tmp, 'never.k3s')), UserError);
    calls.length = 0;
    const r4 = await session.turn('Bye');
    assert.ok(r4.rebuilt && /diverged/.test(r4.rebuilt), String(r4.rebuilt));
    assert.equal(calls[0]!.pos, 0);
    assert.match(session.stats(), /diverged/);
  } finally {
    await model.close();
  }
});

function chat(input: string, ...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, 'chat', DEMO, ...args], { input, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test('k3 chat: ids after /save + /load in a fresh process equal those of an uninterrupted session', () => {
  const file = join(tmp, 'turn1.k3s');
  const flags = ['--max-tokens', '10', '--temperature', '0.8', '--top-k', '64', '--seed', '3', '--ctx', '512'];
  const a = chat(`Hello there\n/save ${file}\nHow are you?\n/ids\n`, ...flags);
  assert.equal(a.code, 0, a.stderr);
  assert.match(a.stderr, /saved \d+ tokens/);
  const b = chat(`/load ${file}\nHow are you?\n/ids\n/stats\n`, ...flags);
  assert.equal(b.code, 0, b.stderr);
  assert.match(b.stderr, /loaded \d+ tokens/);
  const idsA = JSON.parse(a.stdout.trimEnd().split('\n').at(-1)!) as number[];
  const bLines = b.stdout.trimEnd().split('\n');
  const statsAt = bLines.findIndex((l) => l.startsWith('context'));
  const idsB = JSON.parse(bLines[statsAt - 1]!) as number[];
  assert.equal(idsA.length, 10);
  assert.deepEqual(idsB, idsA);
  // The printed reply is the same text, and B read only the new tokens.
  const replyB = bLines.slice(0, statsAt - 1).join('\n');
  assert.ok(a.stdout.includes(replyB + '\n'), 'same reply text');
  const saved = loadStateTokens(file);
  assert.match(b.stdout, new RegExp(`reused ${saved.processed} tokens`));
  // Without the save the conversation gives the same ids too (saving changes nothing).
  const c = chat('Hello there\nHow are you?\n/ids\n', ...flags);
  assert.deepEqual(JSON.parse(c.stdout.trimEnd().split('\n').at(-1)!), idsA);
});

function loadStateTokens(file: string): { processed: number } {
  const b = readFileSync(file);
  const h = JSON.parse(b.toString('utf8', 16, 16 + b.readUInt32LE(12))) as { processed: number };
  return h;
}

test('a state file from another model, or cut short, is refused with a message naming it', async () => {
  // A state saved from a Kimi Linear model.
  const kl = Model.open(KL);
  const foreign = join(tmp, 'kimi-linear.k3s');
  try {
    const st = kl.newState();
    await kl.forward(st, [1, 2, 3], 'none');
    saveState(foreign, kl, st);
  } finally {
    await kl.close();
  }
  const r = chat('', '--load', foreign);
  assert.equal(r.code, 2);
  assert.ok(r.stderr.includes(foreign) && /different model/.test(r.stderr), r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1);
  // In the REPL the command fails and the session goes on.
  const s = chat(`/load ${foreign}\n/stats\n`);
  assert.equal(s.code, 0, s.stderr);
  assert.match(s.stderr, /different model/);
  assert.match(s.stdout, /^context +0 tokens/m);

  // Truncated, and not a state file at all.
  const model = Model.open(DEMO, { ctx: 64 });
  try {
    const st = model.newState();
    await model.forward(st, [5, 6, 7, 8], 'none');
    const good = join(tmp, 'good.k3s');
    saveState(good, model, st, [9]);
    const back = loadState(good, model);
    assert.deepEqual(back.state.tokens, [5, 6, 7, 8]);
    assert.deepEqual(back.pending, [9]);
    for (let i = 0; i < st.kda.length; i++) if (st.kda[i]) assert.deepEqual(back.state.kda[i]!.S, st.kda[i]!.S);
    for (let i = 0; i < st.mla.length; i++) {
      if (st.mla[i]) assert.deepEqual(back.state.mla[i]!.lat.subarray(0, 4 * st.mla[i]!.Lk), st.mla[i]!.lat.subarray(0, 4 * st.mla[i]!.Lk));
    }
    const bytes = readFileSync(good);
    const cut = join(tmp, 'cut.k3s');
    writeFileSync(cut, bytes.subarray(0, bytes.length - 100));
    assert.throws(() => loadState(cut, model), (e: unknown) => e instanceof UserError && e.message.includes(cut) && /truncated/.test(e.message));
    const junk = join(tmp, 'junk.k3s');
    writeFileSync(junk, 'hello, this is not a state file');
    assert.throws(() => loadState(junk, model), (e: unknown) => e instanceof UserError && e.message.includes(junk) && /not a k3 state file/.test(e.message));
    assert.throws(() => loadState(foreign, model), (e: unknown) => e instanceof UserError && /different model/.test(e.message));
  } finally {
    await model.close();
  }
});

test('Ctrl-C during a reply stops the reply, not the program; EOF exits 0', async () => {
  const child = spawn(process.execPath, [MAIN, 'chat', DEMO, '--max-tokens', '100000', '--ignore-eos', '--ctx', '512', '--no-thinking'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
  const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  const waitFor = async (what: string, pred: () => boolean): Promise<void> => {
    const t0 = Date.now();
    while (!pred()) {
      if (Date.now() - t0 > 30000) throw new Error(`timed out waiting for ${what}; stdout ${JSON.stringify(out.slice(-200))} stderr ${JSON.stringify(err)}`);
      if (child.exitCode !== null) throw new Error(`chat exited (${child.exitCode}) while waiting for ${what}: ${err}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    child.stdin.write('Tell me a long story\n');
    await waitFor('the reply to stream', () => out.length >= 20);
    child.kill('SIGINT');
    await waitFor('the interrupt', () => err.includes('[interrupted]'));
    const mark = out.length;
    child.stdin.write('/stats\n');
    await waitFor('/stats', () => /stop +interrupted/.test(out.slice(mark)));
    const mark2 = out.length;
    child.stdin.write('Another question\n');
    await waitFor('the second reply', () => out.length >= mark2 + 20);
    child.kill('SIGINT');
    await waitFor('the second interrupt', () => err.split('[interrupted]').length === 3);
    child.stdin.end();
    assert.equal(await exited, 0, err);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
});
