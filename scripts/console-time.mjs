// How long the console takes to draw a page, as a reader waits for it: headless Chromium opens
// the page in a fresh tab, RUNS times, and reads `data-drawn-ms` off the page's <main> (ms from
// the navigation's start to the page's first complete draw, set by web/js/main.js). Chromium is
// driven over its DevTools protocol (Node's WebSocket: `node --experimental-websocket` on 20).
//
//   node --experimental-websocket scripts/console-time.mjs URL RUNS
//
// Prints one JSON line: {url, runs, ms: [...], median_ms, p90_ms, failed}.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [url, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 10);
/** The longest a page may take before its run counts as failed. */
const PAGE_TIMEOUT_MS = 30000;
/** The longest one DevTools call may take (a crashed tab answers none). */
const CALL_TIMEOUT_MS = 5000;

const profile = mkdtempSync(join(tmpdir(), 'console-time-'));
const chromium = spawn('chromium', [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--window-size=1280,900',
  '--remote-debugging-port=0',
  `--user-data-dir=${profile}`,
  'about:blank',
], { detached: true });
const port = await new Promise((resolve, reject) => {
  let err = '';
  chromium.stderr.on('data', (d) => {
    err += d;
    const m = err.match(/DevTools listening on ws:\/\/[^:]+:(\d+)\//);
    if (m) resolve(m[1]);
  });
  chromium.on('exit', (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
});
const http = `http://127.0.0.1:${port}`;

/** Opens `target` in a new tab; resolves with the page's drawn-ms, or null past the timeout. */
async function timeOnce(target) {
  const tab = await (await fetch(`${http}/json/new?about:blank`, { method: 'PUT' })).json();
  const ws = new WebSocket(tab.webSocketDebuggerUrl);
  await new Promise((r) => ws.addEventListener('open', r, { once: true }));
  let id = 0;
  const pending = new Map();
  ws.addEventListener('message', (m) => {
    const msg = JSON.parse(m.data);
    if (pending.has(msg.id)) pending.get(msg.id)(msg.result);
  });
  const call = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const n = ++id;
      const timer = setTimeout(() => reject(new Error(`${method}: no answer`)), CALL_TIMEOUT_MS);
      pending.set(n, (result) => {
        clearTimeout(timer);
        resolve(result);
      });
      ws.send(JSON.stringify({ id: n, method, params }));
    });
  await call('Page.navigate', { url: target });
  const start = Date.now();
  let drawn = null;
  while (Date.now() - start < PAGE_TIMEOUT_MS) {
    const r = await call('Runtime.evaluate', {
      expression: "document.getElementById('main')?.dataset.drawnMs ?? ''",
      returnByValue: true,
    });
    if (r?.result?.value) {
      drawn = Number(r.result.value);
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  ws.close();
  await fetch(`${http}/json/close/${tab.id}`);
  return drawn;
}

const ms = [];
let failed = 0;
try {
  for (let i = 0; i < runs; i++) {
    const t = await timeOnce(url).catch((e) => {
      console.error(`run ${i + 1}: ${e.message}`);
      return null;
    });
    if (t == null) failed++;
    else ms.push(t);
  }
} finally {
  // Its profile goes once every process of it has exited (they write there until then): the
  // whole process group is stopped.
  const exited = new Promise((r) => chromium.on('exit', r));
  process.kill(-chromium.pid, 'SIGTERM');
  await exited;
  for (let i = 0; ; i++) {
    try {
      rmSync(profile, { recursive: true, force: true });
      break;
    } catch (e) {
      if (i === 20) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
const sorted = [...ms].sort((a, b) => a - b);
const at = (q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : null);
console.log(JSON.stringify({ url, runs, ms, median_ms: at(0.5), p90_ms: at(0.9), failed }));
process.exit(0);
