// The chat page (GET /) in a real browser: playwright-core driving Debian's `chromium`, located
// at run time, against `k3 serve` on the shipped demo agent (models-shipped/demo-k3-trained: it
// adds numbers, thinks first when asked, calls the page's `add` tool). What a person sees: the
// model's name and context, a streamed reply with its thinking collapsed, the tool call and its
// result, tokens/s and context use; a streamed reply's markdown (a code block) rendered and its
// markup sanitized; the chat kept across a reload; Regenerate, Edit, new and deleted chats; Stop
// on a synthetic model that never ends; nothing fetched from anywhere but the server, in a browser
// that resolves no host name. Screenshots go to $OUT when set. Without playwright-core (test/e2e)
// or without Chromium the test says so and skips.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TRAINED_DEMO_DIR } from '../../src/cli/demo-sums.js';
import { synthCheckpoint } from '../../src/synth/synth.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { E2E_INSTALL, findChromium, importE2e } from '../e2e-deps.js';
import { startServe, type Serving } from '../serve-helpers.js';

type Any = any;
const pwMod = await importE2e<Any>('playwright-core');
const pw: { chromium: Any } | null = pwMod ? (pwMod.chromium ? pwMod : pwMod.default) : null;
const exe = findChromium();
const skip = !pw ? `playwright-core is not installed (${E2E_INSTALL})` : !exe ? 'no Chromium found (install Debian\'s chromium package, or set CHROMIUM=/path/to/chrome)' : false;
if (skip) console.log(`skipped: ${skip}`);

const tmp = mkdtempSync(join(tmpdir(), 'k3-browser-'));
const SHOTS = process.env.OUT || tmp;
const RANDOM = join(tmp, 'demo-k3'); // untrained weights: replies run on until stopped
let agent: Serving | null = null;
let random: Serving | null = null;
let browser: Any = null;

before(async () => {
  if (skip) return;
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: RANDOM, extraFiles: demoTokenizerFiles() });
  [agent, random, browser] = await Promise.all([
    startServe(TRAINED_DEMO_DIR, ['--ctx', '2048']),
    startServe(RANDOM, ['--ctx', '2048']),
    // no network: every host name but the servers' 127.0.0.1 fails to resolve (a CDN would too)
    pw!.chromium.launch({ executablePath: exe!, args: ['--no-sandbox', '--headless=new', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'] }),
  ]);
});
after(async () => {
  await browser?.close();
  await Promise.all([agent?.stop(), random?.stop()]);
  rmSync(tmp, { recursive: true, force: true });
});

const idle = (page: Any, assistants: number) =>
  page.waitForFunction((n: number) => !document.body.classList.contains('busy') && document.querySelectorAll('.msg.assistant').length === n, assistants, { timeout: 30_000 });

async function settings(page: Any, s: { temperature?: string; thinking?: boolean; tools?: boolean }) {
  await page.click('#open-settings');
  if (s.temperature !== undefined) await page.fill('#set-temperature', s.temperature);
  if (s.thinking !== undefined) await page.setChecked('#set-thinking', s.thinking);
  if (s.tools !== undefined) await page.setChecked('#set-tools', s.tools);
  await page.click('#settings button[value=close]');
}

async function send(page: Any, text: string) {
  await page.fill('#msg', text);
  await page.press('#msg', 'Enter');
}

const texts = (page: Any, sel: string): Promise<string[]> => page.$$eval(sel, (els: HTMLElement[]) => els.map((e) => e.textContent ?? ''));

// A reply with what the demo model never writes (markdown, a code block, hostile markup), streamed
// to the page as the server streams one: SSE chunks of a few characters each, the fence split.
const MARKDOWN = 'Here it is:\n\n```python\nprint(1 + 2)\n```\n\nA **bold** word <img src="x" onerror="window.__xss = 1"><script>window.__xss = 2</script>';
function markdownStream(): string {
  const chunk = (delta: object, finish: string | null = null) => ({ id: 'chatcmpl-md', object: 'chat.completion.chunk', created: 0, model: 'demo-k3-trained', choices: [{ index: 0, delta, finish_reason: finish }] });
  const pieces = (s: string) => s.match(/[^]{1,5}/g)!;
  const chunks = [
    chunk({ role: 'assistant', content: '' }),
    ...pieces('They want a snippet.').map((t) => chunk({ reasoning_content: t })),
    ...pieces(MARKDOWN).map((t) => chunk({ content: t })),
    chunk({}, 'stop'),
    { ...chunk({}), choices: [], usage: { prompt_tokens: 300, completion_tokens: 40, total_tokens: 340 } },
  ];
  return chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n';
}

/** The server's replies reach the page whole, in one read, as a slow page can get them. */
const whole = (route: Any) => route.fetch().then(async (r: Any) => route.fulfill({ response: r, body: await r.text() }));

test('the chat page: a streamed agent turn, markdown, a reload, regenerate, edit, chats, stop', { skip, timeout: 120_000 }, async () => {
  const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
  const errors: string[] = [];
  page.on('pageerror', (e: Error) => errors.push(e.message));
  const offsite: string[] = [];
  page.on('request', (r: Any) => [agent!.url, random!.url].some((u) => r.url().startsWith(`${u}/`)) || offsite.push(r.url()));
  page.on('dialog', (d: Any) => d.accept()); // "Delete this chat?"
  await page.goto(`${agent!.url}/`);
  await page.waitForFunction(() => document.getElementById('model-name')!.textContent === 'demo-k3-trained');
  assert.match(await page.textContent('#model-ctx'), /2048 tokens of context/);

  // one agent turn: thinking, a call of the add tool the page runs, then the answer, streamed
  await settings(page, { temperature: '0', thinking: true, tools: true });
  await page.evaluate(() => {
    const w = window as unknown as { updates: number; thinkOpened: boolean };
    w.updates = 0;
    new MutationObserver(() => w.updates++).observe(document.getElementById('log')!, { subtree: true, childList: true, characterData: true });
    // the thinking shows while it streams, before it folds (the old value: open even if folded since)
    new MutationObserver((ms) => ms.forEach((m) => (w.thinkOpened ||= m.oldValue !== null || (m.target as HTMLDetailsElement).open))).observe(document.getElementById('log')!, { subtree: true, attributeFilter: ['open'], attributeOldValue: true });
  });
  await send(page, 'What is 12+30?');
  await idle(page, 2);
  const seen = await page.evaluate(() => {
    const w = window as unknown as { updates: number; thinkOpened: boolean };
    return { updates: w.updates, thinkOpened: w.thinkOpened };
  });
  assert.ok(seen.updates > 3, 'the reply came in pieces');
  assert.equal(seen.thinkOpened, true, 'the thinking was open while it streamed');
  assert.deepEqual(await texts(page, '.tool-call code'), ['add({"a":12,"b":30})']);
  assert.deepEqual(await texts(page, '.tool-result code'), ['add → 42']);
  assert.equal((await texts(page, '.msg.assistant .body'))[1]!.trim(), '42');
  const thinking = await page.$$eval('details.think', (els: HTMLDetailsElement[]) => els.map((d) => ({ shown: !d.hidden, open: d.open, text: d.lastElementChild!.textContent })));
  assert.ok(thinking.length === 2 && thinking.every((t: Any) => t.shown && !t.open && t.text.length > 0), `thinking shown, collapsed: ${JSON.stringify(thinking)}`);
  assert.match(await page.textContent('details.think summary'), /^Thought for [\d.]+ s$/);
  const meta = (await texts(page, '.msg.assistant .meta'))[1]!;
  assert.match(meta, /^\d+ tokens · [\d.]+ tokens\/s · .*context \d+ \/ 2048/);
  assert.match(await page.textContent('#ctx-text'), /^context \d+ \/ 2048$/);
  assert.match(await page.textContent('#stats'), /tokens\/s/);

  // a streamed reply with markdown and hostile markup, then a reload: all of it is still there
  let sent: Any = null;
  await page.route('**/v1/chat/completions', (route: Any) => {
    sent = route.request().postDataJSON();
    return route.fulfill({ status: 200, headers: { 'content-type': 'text/event-stream' }, body: markdownStream() });
  });
  await send(page, 'Show me code');
  await idle(page, 3);
  await page.unroute('**/v1/chat/completions');
  assert.deepEqual(sent.messages.map((m: Any) => m.role), ['user', 'assistant', 'tool', 'assistant', 'user'], 'the whole conversation went with it');
  assert.equal(sent.stream, true);
  const shown = async (what: string) => {
    assert.equal(await page.textContent('pre code.language-python'), 'print(1 + 2)\n', what);
    assert.equal(await page.textContent('.code-bar span'), 'python', what);
    assert.equal(await page.textContent('.md strong'), 'bold', what);
    assert.equal(await page.$$eval('#log [onerror], #log script', (els: unknown[]) => els.length), 0, `markup sanitized: ${what}`);
    assert.deepEqual(await page.$$eval('details.think', (els: HTMLDetailsElement[]) => els.map((d) => d.open)), [false, false, false], `thinking collapsed: ${what}`);
    assert.match((await texts(page, '.msg.assistant .meta'))[2]!, /^40 tokens · .*context 340 \/ 2048$/, what);
  };
  await shown('streamed');
  await page.reload();
  await page.waitForSelector('pre code');
  assert.deepEqual(await texts(page, '.chat-item .chat-open'), ['What is 12+30?']);
  assert.equal(await page.$$eval('.msg', (els: unknown[]) => els.length), 6, 'user, call, result, answer, user, reply');
  await shown('after a reload');
  await page.screenshot({ path: join(SHOTS, 'chat-page.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.screenshot({ path: join(SHOTS, 'chat-page-dark.png') });
  await page.emulateMedia({ colorScheme: 'light' });
  assert.notEqual(dark, await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'dark scheme');
  assert.equal(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss), undefined, 'no script from a reply ran');

  // Regenerate the stored reply: the model answers in its place
  const stored = page.locator('.msg.assistant').last();
  await stored.hover();
  await stored.locator('[data-act=regenerate]').click();
  await idle(page, 3);
  assert.equal(await page.$$eval('pre', (els: unknown[]) => els.length), 0, 'the stored reply is gone');
  assert.ok((await texts(page, '.msg.assistant .body'))[2]!.trim().length > 0, 'a new reply');

  // Edit the first question: what came after it goes, and the model answers the new one. Its
  // replies reach the page whole: the tool call comes in the last piece read, and the thinking
  // still folds (CI once saw it stay open)
  await page.route('**/v1/chat/completions', whole);
  await page.locator('.msg.user').first().hover();
  await page.locator('.msg.user').first().locator('[data-act=edit]').click();
  await page.fill('.edit-box', 'What is 23+45?');
  await page.click('.editor button.primary');
  await idle(page, 2);
  assert.deepEqual(await texts(page, '.tool-result code'), ['add → 68']);
  assert.equal((await texts(page, '.msg.assistant .body'))[1]!.trim(), '68');
  assert.deepEqual(await page.$$eval('details.think', (els: HTMLDetailsElement[]) => els.map((d) => [d.hidden, d.open])), [[false, false], [false, false]], 'thinking shown, collapsed');
  await page.unroute('**/v1/chat/completions');

  // a second chat, then delete the first; a reload keeps just the second
  await page.click('#new-chat');
  await settings(page, { tools: false });
  await send(page, 'Hello there');
  await idle(page, 1);
  assert.deepEqual(await texts(page, '.chat-item .chat-open'), ['Hello there', 'What is 23+45?']);
  await page.hover('.chat-item:last-child');
  await page.click('.chat-item:last-child .chat-del');
  await page.reload();
  await page.waitForSelector('.msg.assistant');
  assert.deepEqual(await texts(page, '.chat-item .chat-open'), ['Hello there']);
  assert.deepEqual(await texts(page, '.msg.user .bubble'), ['Hello there']);

  // a phone's width: the settings fit in their dialog
  await page.setViewportSize({ width: 400, height: 760 });
  await page.click('#open-settings');
  const overflow = await page.$eval('#settings', (d: HTMLElement) => [...d.querySelectorAll('input, textarea')].filter((e) => e.getBoundingClientRect().right > d.getBoundingClientRect().right).map((e) => e.id));
  assert.deepEqual(overflow, [], 'settings fit a narrow screen');
  await page.screenshot({ path: join(SHOTS, 'chat-page-narrow-settings.png') });
  await page.click('#settings button[value=close]');
  await page.setViewportSize({ width: 1100, height: 800 });

  // Stop, on a model that would go on to the end of its context
  await page.goto(`${random!.url}/`);
  await page.click('#new-chat');
  await settings(page, { thinking: false });
  await send(page, 'Go on and on');
  await page.waitForFunction(() => (document.querySelector('.msg.assistant .body')?.textContent ?? '').length > 20, null, { timeout: 30_000 });
  await page.click('#stop');
  await idle(page, 1);
  assert.match(await page.textContent('.msg.assistant .meta'), /stopped/);
  assert.equal((await fetch(`${random!.url}/health`)).status, 200);
  assert.deepEqual(errors, [], 'no script errors on the page');
  assert.deepEqual(offsite, [], 'nothing fetched from anywhere but the server');
});
