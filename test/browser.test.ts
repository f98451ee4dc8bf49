// The chat page (GET /) in a real browser: playwright-core driving Debian's `chromium`, located
// at run time, against `k3 serve` on the demo K3 checkpoint. It sends a message and sees the
// reply stream in with tokens/s; with thinking on, the reasoning shows apart from the answer; Stop
// ends a reply. Without playwright-core (test/e2e) or without Chromium the test says so and skips.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { synthCheckpoint } from '../src/synth/synth.js';
import { demoTokenizerFiles } from '../src/tokenizer/index.js';
import { E2E_INSTALL, findChromium, importE2e } from './e2e-deps.js';
import { startServe, type Serving } from './serve-helpers.js';

type Any = any;
const pwMod = await importE2e<Any>('playwright-core');
const pw: { chromium: Any } | null = pwMod ? (pwMod.chromium ? pwMod : pwMod.default) : null;
const exe = findChromium();
const skip = !pw ? `playwright-core is not installed (${E2E_INSTALL})` : !exe ? 'no Chromium found (install Debian\'s chromium package, or set CHROMIUM=/path/to/chrome)' : false;
if (skip) console.log(`skipped: ${skip}`);

const tmp = mkdtempSync(join(tmpdir(), 'k3-browser-'));
const DEMO = join(tmp, 'demo-k3');
let srv: Serving | null = null;
let browser: Any = null;

before(async () => {
  if (skip) return;
  await synthCheckpoint({ arch: 'k3', preset: 'demo', out: DEMO, extraFiles: demoTokenizerFiles() });
  srv = await startServe(DEMO, ['--ctx', '2048']); // K3 prompts with thinking are long
  browser = await pw!.chromium.launch({ executablePath: exe!, args: ['--no-sandbox', '--headless=new'] });
});
after(async () => {
  await browser?.close();
  await srv?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

test('the chat page streams a reply, shows thinking apart, and can stop a reply', { skip, timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  await page.goto(`${srv!.url}/`);
  // count the answer's updates: a streamed reply arrives in several pieces
  await page.evaluate(() => {
    const w = window as unknown as { updates: number };
    w.updates = 0;
    new MutationObserver(() => w.updates++).observe(document.getElementById('log')!, { subtree: true, childList: true, characterData: true });
  });
  await page.uncheck('#thinking'); // on by default, as K3's release template
  await page.fill('#msg', 'Hello, page');
  await page.click('#send');
  await page.waitForFunction(() => !(document.getElementById('send') as HTMLButtonElement).disabled && document.querySelectorAll('.assistant').length === 1, null, { timeout: 60_000 });
  const answer: string = await page.textContent('.assistant');
  assert.ok(answer.length > 0, 'the reply has text');
  assert.ok((await page.evaluate(() => (window as unknown as { updates: number }).updates)) > 3, 'the reply came in pieces');
  assert.match(await page.textContent('#stats'), /tokens\/s/);

  // thinking on: the demo model never closes its think block, so the reasoning shows, apart
  await page.check('#thinking');
  await page.fill('#msg', 'Think first');
  await page.click('#send');
  await page.waitForFunction(() => !(document.getElementById('send') as HTMLButtonElement).disabled && document.querySelectorAll('.assistant').length === 2, null, { timeout: 60_000 });
  const thinks = await page.$$eval('.think', (els: HTMLElement[]) => els.map((e) => (e.hidden ? null : e.textContent)));
  assert.equal(thinks[0], null, 'no thinking shown for the first reply');
  assert.ok((thinks[1] ?? '').length > 0, `the second reply shows its thinking: ${JSON.stringify(thinks)} ${await page.textContent('#log')}`);

  // Stop: a long reply ends early, marked as stopped
  await page.uncheck('#thinking');
  await page.fill('#msg', 'Go on and on');
  await page.click('#send');
  await page.waitForFunction(() => (document.querySelectorAll('.assistant')[2]?.textContent ?? '').length > 0, null, { timeout: 60_000 });
  await page.click('#stop');
  await page.waitForFunction(() => (document.querySelectorAll('.assistant')[2]?.textContent ?? '').includes('[stopped]'), null, { timeout: 30_000 });
  assert.equal((await fetch(`${srv!.url}/health`)).status, 200);
});
