// The dashboard in a real browser (Debian's chromium, driven by
// playwright-core) against a live redq server and redis-server, as
// scripts/browser-tests.sh runs it. Screenshots go to $SCREENSHOT_DIR.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const REDQ = process.env.REDQ_BIN;
const SHOTS = process.env.SCREENSHOT_DIR || 'screenshots';
const ADMIN = 'redq_browser-admin-secret-0001';
const VIEWER = 'redq_browser-viewer-secret-0002';
const dir = mkdtempSync(join(tmpdir(), 'redq-browser-'));
const children = [];
let browser; let grpc; let http; let base;

function sha256(text) { return createHash('sha256').update(text).digest('hex'); }

function start(command, args, ready) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  children.push(child);
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} did not start:\n${log}`)), 30000);
    const read = (chunk) => {
      log += chunk;
      const found = ready(log);
      if (found) { clearTimeout(timer); resolve(found); }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => reject(new Error(`${command} exited (${code}):\n${log}`)));
  });
}

const redq = (...args) => execFileSync(REDQ, [...args, '--server', `http://${grpc}`, '--token', ADMIN], { encoding: 'utf8' });

async function api(path) {
  const response = await fetch(`${base}/ui/api/${path}`, { headers: { Authorization: `Bearer ${ADMIN}` } });
  return response.json();
}

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function loggedIn(token) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('dialog', (d) => { page.alerted = true; d.dismiss(); });
  // Script errors and CSP refusals show up here.
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(m.text()); });
  await page.goto(`${base}/ui/`);
  await page.fill('input[name="token"]', token);
  await Promise.all([page.waitForURL(`${base}/ui/`), page.click('button[type="submit"]')]);
  await page.waitForSelector('#who:has-text("as ")');
  return page;
}

const shot = (page, name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  writeFileSync(join(dir, 'tokens.json'), JSON.stringify({ tokens: [
    { name: 'admin', sha256: sha256(ADMIN), grants: [{ topics: ['>'], actions: ['admin'] }] },
    { name: 'viewer', sha256: sha256(VIEWER), grants: [{ topics: ['>'], actions: ['view', 'browse'] }] },
  ] }));
  const socket = join(dir, 'redis.sock');
  await start('redis-server', ['--port', '0', '--unixsocket', socket, '--save', '', '--dir', dir],
    (log) => /ready to accept connections/i.test(log));
  const addrs = await start(REDQ, ['serve', '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0',
    '--redis-url', `unix://${socket}`, '--auth-tokens-file', join(dir, 'tokens.json'), '--max-delivery-attempts', '1'],
  (log) => {
    const m = log.match(/grpc_addr=(\S+) metrics_addr=(\S+)/);
    return m && { grpc: m[1], http: m[2] };
  });
  ({ grpc, http } = addrs);
  base = `http://${http}`;
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  for (const child of children.reverse()) child.kill('SIGTERM');
});

test('a topic published with `redq publish` appears', async () => {
  redq('publish', 'greetings', 'hello');
  const page = await loggedIn(ADMIN);
  await page.click('a:text-is("Topics")');
  const link = page.locator('#topics a', { hasText: /^greetings$/ });
  await link.waitFor();
  await shot(page, 'topics');
  await link.click();
  await page.waitForSelector('#topic-length:text-is("1")');
  await page.click('a:text-is("Overview")');
  await page.waitForSelector('#redis:text-is("reachable")');
  await shot(page, 'overview');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('numbers update while messages flow', async () => {
  redq('publish', 'flow', 'first');
  const page = await loggedIn(ADMIN);
  await page.goto(`${base}/ui/#/topics/flow`);
  await page.waitForSelector('#topic-length:text-is("1")');
  for (let i = 0; i < 4; i += 1) redq('publish', 'flow', `more-${i}`);
  // The page follows Redis within 5 s (it polls every 2 s).
  await page.waitForSelector('#topic-length:text-is("5")', { timeout: 5000 });
  assert.match(await page.textContent('#topic-published'), /^\d+$/);
  await page.context().close();
});

test('redrive and purge work end to end', async () => {
  for (let i = 0; i < 3; i += 1) redq('publish', 'jobs', `job-${i}`, '--attr', `n=${i}`);
  // Taken and never acked: with one delivery attempt each, they are dead-lettered
  // once their 1 s deadline passes and the subscription fetches again.
  execFileSync(REDQ, ['subscribe', 'jobs', 'workers', '--max', '3', '--ack-deadline', '1s', '--server', `http://${grpc}`, '--token', ADMIN]);
  const settle = spawn(REDQ, ['subscribe', 'jobs', 'workers', '--server', `http://${grpc}`, '--token', ADMIN], { stdio: 'ignore' });
  children.push(settle);
  await until('three dead letters', async () => (await api('topics/jobs/subscriptions/workers')).dead_letters === 3);
  settle.kill('SIGTERM');

  const page = await loggedIn(ADMIN);
  await page.goto(`${base}/ui/#/topics/jobs/subscriptions/workers`);
  await page.waitForSelector('#sub-dead-letters:text-is("3")');
  await page.waitForSelector('#dead-letters tbody tr:nth-child(3) input[type="checkbox"]');
  await shot(page, 'subscription');
  await page.check('#dead-letters tbody tr:nth-child(1) input[type="checkbox"]');
  await page.click('button:text-is("Redrive…")');
  await page.click('#confirm-ok');
  await page.waitForSelector('#sub-dead-letters:text-is("2")');
  await page.click('button:text-is("Purge…")');
  assert.equal(await page.isDisabled('#confirm-ok'), true, 'purge waits for the typed name');
  await page.fill('#confirm-input', 'workers');
  await page.click('#confirm-ok');
  await page.waitForSelector('#sub-dead-letters:text-is("0")');
  assert.deepEqual(page.errors, []);
  const sub = await api('topics/jobs/subscriptions/workers');
  assert.equal(sub.dead_letters, 0);
  assert.equal(sub.lag + sub.pending, 1, 'the redriven one is back');
  await page.context().close();
});

test('a view-only token sees no change buttons and its POST is refused', async () => {
  redq('publish', 'jobs', 'job-x');
  const page = await loggedIn(VIEWER);
  await page.goto(`${base}/ui/#/topics/jobs/subscriptions/workers`);
  await page.waitForSelector('#dead-letters h2:text-is("Dead letters")');
  await page.waitForSelector('#sub-lag');
  for (const action of ['Redrive', 'Purge', 'Seek', 'Cancel']) {
    assert.equal(await page.locator(`button:text-matches("^${action}")`).count(), 0, action);
  }
  await shot(page, 'view-only');
  const status = await page.evaluate(async () => (await fetch('api/topics/jobs/subscriptions/workers/dead-letters/purge',
    { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })).status);
  assert.equal(status, 403);
  await page.context().close();
});

test("a page on another origin cannot POST with the admin's session", async () => {
  redq('publish', 'guarded', 'g');
  execFileSync(REDQ, ['subscribe', 'guarded', 'keep', '--max', '1', '--ack-deadline', '1s', '--server', `http://${grpc}`, '--token', ADMIN]);
  const settle = spawn(REDQ, ['subscribe', 'guarded', 'keep', '--server', `http://${grpc}`, '--token', ADMIN], { stdio: 'ignore' });
  children.push(settle);
  await until('a dead letter', async () => (await api('topics/guarded/subscriptions/keep')).dead_letters === 1);
  settle.kill('SIGTERM');
  const target = `${base}/ui/api/topics/guarded/subscriptions/keep/dead-letters/purge`;
  const evil = createServer((_, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<form method="post" action="${target}" enctype="text/plain"><input name="x" value="1"><button id="go">go</button></form>`);
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const page = await loggedIn(ADMIN);
  await page.goto(`http://127.0.0.1:${evil.address().port}/`);
  const [response] = await Promise.all([page.waitForResponse(target), page.click('#go')]);
  assert.equal(response.status(), 403);
  assert.equal((await api('topics/guarded/subscriptions/keep')).dead_letters, 1);
  evil.close();
  await page.context().close();
});

test('a payload of <img src=x onerror=alert(1)> shows as text', async () => {
  redq('publish', 'hostile', '<img src=x onerror=alert(1)>', '--attr', '<b>k</b>=<script>alert(2)</script>');
  const page = await loggedIn(ADMIN);
  await page.goto(`${base}/ui/#/topics/hostile`);
  await page.waitForSelector('#messages pre.payload:text-is("<img src=x onerror=alert(1)>")');
  assert.equal(await page.locator('#messages img').count(), 0);
  assert.equal(await page.locator('#messages script').count(), 0);
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(!page.alerted, 'no alert ran');
  assert.deepEqual(page.errors, []);
  await shot(page, 'topic');
  await page.context().close();
});
