/**
 * The pages people use, driven end to end in headless Chromium (fake camera + microphone) against
 * the real server (startServer: embedded store, streams API, media node, web routes): the
 * playground creates a stream, publishes the camera over WHIP, plays the output over WHEP, changes
 * the prompt and a processor live and charts the status; the viewer page plays the same output.
 * Also what a first-time user sees: the WHIP URL and stream key with copy buttons (what OBS
 * needs), the DEMO badge, the state in words, no charts of things not measured yet, a 4:3 camera
 * letterboxed (not stretched) into the square stream, and the viewer's poster and status line
 * while it waits. Screenshots go to test/artifacts/ (gitignored).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { Page } from 'playwright-core';
import t from 'tap';
import { loadConfig } from '../../control/config.ts';
import { startServer } from '../../control/Server.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { until } from '../helpers/until.ts';

const ARTIFACTS = join(import.meta.dirname, '..', 'artifacts');

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Presented-frame statistics of a <video>: size, frames shown so far, share of near-black/white pixels. */
async function videoStats(page: Page, selector: string): Promise<{ width: number; frames: number; extreme: number; time: number }> {
  return page.$eval(selector, (v: HTMLVideoElement) => {
    const c = document.createElement('canvas');
    c.width = v.videoWidth;
    c.height = v.videoHeight;
    const g = c.getContext('2d', { willReadFrequently: true });
    let extreme = 0;
    if (g && c.width > 0) {
      g.drawImage(v, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      for (let i = 0; i < d.length; i += 4) {
        const y = 0.299 * (d[i] ?? 0) + 0.587 * (d[i + 1] ?? 0) + 0.114 * (d[i + 2] ?? 0);
        if (y < 24 || y > 232) extreme++;
      }
      extreme /= d.length / 4;
    }
    const q = v.getVideoPlaybackQuality?.();
    return { width: v.videoWidth, frames: q ? q.totalVideoFrames : 0, extreme, time: v.currentTime };
  });
}

interface PlaygroundWindow {
  playground: { status: { state?: string; demo?: boolean; inference_status?: { output_fps?: number; input_fps?: number; last_params?: { prompt?: unknown }; last_params_update_time?: number } } | null; patches: number; mode: string; copied: string | null; hlsErrors: string[] };
}

/** Mean luminance of pixel rows of a <video>'s current frame, top to bottom, at the given fractions of its height. */
async function rowLuma(page: Page, selector: string, fractions: number[]): Promise<number[]> {
  return page.$eval(
    selector,
    (v: HTMLVideoElement, fr: number[]) => {
      const c = document.createElement('canvas');
      c.width = v.videoWidth;
      c.height = v.videoHeight;
      const g = c.getContext('2d', { willReadFrequently: true });
      if (!g || c.width === 0) return fr.map(() => NaN);
      g.drawImage(v, 0, 0);
      return fr.map((f) => {
        const d = g.getImageData(0, Math.min(c.height - 1, Math.floor(f * c.height)), c.width, 1).data;
        let sum = 0;
        for (let i = 0; i < d.length; i += 4) sum += 0.299 * (d[i] ?? 0) + 0.587 * (d[i + 1] ?? 0) + 0.114 * (d[i + 2] ?? 0);
        return sum / (d.length / 4);
      });
    },
    fractions,
  );
}

t.test('playground: create a stream, publish the camera, see the output, change prompt and processor live, see status; the viewer page plays it', { timeout: 180_000 }, async (t) => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-web-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: port, HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent' });
  const server = await startServer(config, { logger: pino({ level: process.env['LOG_LEVEL'] ?? 'silent' }) });
  t.teardown(async () => {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  t.ok(server.firstKey, 'the embedded default made an owner key');
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // The pages run under a strict Content-Security-Policy: anything it blocks shows on the console.
  const blocked: string[] = [];
  ctx.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) blocked.push(m.text());
  });
  const served = await page.goto(`${server.url}/web/playground.html#key=${server.firstKey}`);
  t.match(served?.headers()['content-security-policy'], /script-src 'self'/, 'the page is sent with a CSP');
  t.equal(served?.headers()['x-frame-options'], 'DENY', 'and may not be framed');

  // 1. Create a stream from the page.
  await page.fill('#prompt', 'a neon city at night');
  await page.click('#create');
  await page.waitForSelector('#live:not([hidden])', { timeout: 15_000 });
  const info = await page.textContent('#streamInfo');
  t.match(info, /Stream str_\S+ — playback id \S+/, 'the page shows the new stream');

  // What OBS needs, with copy buttons; the key is masked.
  await page.waitForSelector('#obs:not([hidden])');
  const whipUrl = await page.inputValue('#whipUrl');
  t.match(whipUrl, new RegExp(`^${server.url}/live/\\S+/whip$`), `the WHIP URL is shown (${whipUrl})`);
  t.match(await page.inputValue('#streamKey'), /\S{16,}/, 'the stream key is shown');
  t.equal(await page.getAttribute('#streamKey', 'type'), 'password', 'masked until copied');
  // The copy handler awaits the clipboard API, so the page records what it copied a moment after the click.
  const copiedAfter = async (button: string, before: string | null) => {
    await page.click(`button[data-copy="${button}"]`);
    await page.waitForFunction((b) => (window as unknown as PlaygroundWindow).playground.copied !== b, before, { timeout: 10_000 }).catch(() => undefined);
    return page.evaluate(() => (window as unknown as PlaygroundWindow).playground.copied);
  };
  t.equal(await copiedAfter('whipUrl', null), whipUrl, 'Copy copies the WHIP URL');
  t.equal(await copiedAfter('streamKey', whipUrl), await page.inputValue('#streamKey'), 'Copy copies the stream key');

  // Before anything is published: the state in words, the DEMO badge, no charts of unmeasured numbers.
  await page.waitForFunction(() => document.getElementById('state')?.dataset['state'] === 'OFFLINE', undefined, { timeout: 10_000 });
  t.equal(await page.textContent('#state'), 'Waiting for video', 'OFFLINE reads as words');
  await page.waitForSelector('#demoBadge:not([hidden])', { timeout: 10_000 });
  t.match(await page.textContent('#demoBadge'), /DEMO/, 'a demo model is labelled as such');
  for (const f of ['in', 'out', 'lat', 'rtt', 'loss']) t.ok(await page.$eval(`#f-${f}`, (e) => (e as HTMLElement).hidden), `${f}: not charted before it is measured`);
  t.notOk(await page.$eval('#noMetrics', (e) => (e as HTMLElement).hidden), 'and the page says why');
  await page.screenshot({ path: join(ARTIFACTS, 'playground-0-created.png'), fullPage: true });

  // The viewer page opened before the stream is live: poster and a waiting line, no error.
  const playbackId = (await page.getAttribute('#share', 'href'))?.split('v=')[1] ?? '';
  const early = await ctx.newPage();
  await early.goto(`${server.url}/web/watch.html?v=${playbackId}`);
  t.equal(await early.getAttribute('#video', 'poster'), '/web/poster.svg', 'a poster while waiting');
  await early.waitForFunction(() => /Waiting for the stream/.test(document.getElementById('status')?.textContent ?? ''), undefined, { timeout: 20_000 });
  t.equal(await early.getAttribute('#status', 'data-state'), 'waiting');
  // The node holds the stream for this viewer and sends the plain slate: connected, still waiting.
  await early.waitForFunction(() => /showing the slate/.test(document.getElementById('status')?.textContent ?? ''), undefined, { timeout: 30_000 });
  t.equal(await early.getAttribute('#status', 'data-state'), 'waiting', 'a viewer on the slate is waiting, not live');
  t.ok(await early.$eval('#error', (e) => (e as HTMLElement).hidden), 'waiting is not shown as an error');
  t.equal((await fetch(`${server.url}/web/poster.svg`)).status, 200, 'the poster is served');
  await early.screenshot({ path: join(ARTIFACTS, 'watch-waiting.png'), fullPage: true });
  // Closed before publishing: on a busy 2-core machine a second early viewer slows the playground's own.
  await early.close();

  // 2. Publish the camera; the page starts watching the output over WHEP by itself.
  await page.click('#publish');
  await until('output over WHEP', () => page.evaluate(() => (window as unknown as PlaygroundWindow).playground.mode), (m) => m === 'whep', 30_000);
  const first = await until('output frames', () => videoStats(page, '#output'), (s) => s.width > 0 && s.frames > 10, 30_000);
  t.ok(first.frames > 10, `output video plays (${first.frames} frames, ${first.width}px wide)`);
  await page.screenshot({ path: join(ARTIFACTS, 'playground-1-live.png'), fullPage: true });

  // 3. Status charts fill from GET /v1/streams/{id}/status.
  const st = await until(
    'status shows output fps',
    () => page.evaluate(() => (window as unknown as PlaygroundWindow).playground.status),
    (s) => (s?.inference_status?.output_fps ?? 0) > 0,
    20_000,
  );
  t.ok((st?.inference_status?.output_fps ?? 0) > 0, `status: output ${st?.inference_status?.output_fps} fps, input ${st?.inference_status?.input_fps} fps`);
  t.not(await page.textContent('#v-out'), '–', 'the output fps sparkline has a value');
  t.notOk(await page.$eval('#f-out', (e) => (e as HTMLElement).hidden), 'measured numbers are charted');
  t.notOk(await page.$eval('#f-lat', (e) => (e as HTMLElement).hidden), 'the viewer delay too, once watching');

  // 4. Change the prompt live: the PATCH goes out and the status reports the new params.
  const before = st?.inference_status?.last_params_update_time ?? 0;
  await page.fill('#livePrompt', 'an oil painting of a lighthouse');
  await page.click('#applyPrompt');
  await page.waitForFunction(() => /Applied prompt/.test(document.getElementById('patchState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  const after = await until(
    'status shows the new prompt',
    () => page.evaluate(() => (window as unknown as PlaygroundWindow).playground.status),
    (s) => JSON.stringify(s?.inference_status?.last_params ?? {}).includes('lighthouse') || (s?.inference_status?.last_params_update_time ?? 0) > before,
    10_000,
  );
  t.ok(after, 'status changed after the prompt PATCH');

  // 5. Toggle a processor (canny) with diffusion skipped: the output turns into edges (mostly
  // black, white lines). With the demo diffusion stand-in on, its output would hide the edges.
  const plain = await videoStats(page, '#output');
  await page.check('#skipDiffusion');
  await page.waitForFunction(() => /Applied skip_diffusion/.test(document.getElementById('patchState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  // The camera (640×480, 4:3) passes through unchanged now: letterboxed into the 512² stream, so
  // the top and bottom eighths are black bars and the middle is picture — not stretched to fill.
  const rows = await until('letterboxed passthrough', () => rowLuma(page, '#output', [0.02, 0.08, 0.5, 0.92, 0.98]), (r) => r[0]! < 20 && r[4]! < 20 && r[2]! > 40, 30_000);
  t.ok(rows[0]! < 20 && rows[1]! < 20 && rows[3]! < 20 && rows[4]! < 20, `black bars top and bottom (${rows.map((r) => r.toFixed(0)).join(', ')})`);
  t.ok(rows[2]! > 40, 'picture in the middle');
  // The pipeline restart of that change: whatever state the API reports, the page shows words.
  const shown = await page.evaluate(() => ({ text: document.getElementById('state')?.textContent, state: document.getElementById('state')?.dataset['state'], tone: document.getElementById('state')?.dataset['tone'] }));
  t.not(shown.text, shown.state, `the state is in words (${shown.state} → "${shown.text}")`);
  if (shown.state === 'DEGRADED_INFERENCE') t.not(shown.tone, 'error', 'a reload after a change is not shown as an error');
  await page.screenshot({ path: join(ARTIFACTS, 'playground-1b-letterbox.png'), fullPage: true });
  await page.check('#processors input[data-proc="canny"]');
  await page.waitForFunction(() => /Applied image_preprocessing/.test(document.getElementById('patchState')?.textContent ?? ''), undefined, { timeout: 10_000 });
  const edges = await until('canny output', () => videoStats(page, '#output'), (s) => s.extreme > 0.8, 30_000);
  t.ok(edges.extreme > plain.extreme, `output changed to edges (extreme pixels ${plain.extreme.toFixed(2)} → ${edges.extreme.toFixed(2)})`);
  await page.screenshot({ path: join(ARTIFACTS, 'playground-2-canny.png'), fullPage: true });

  // 6. Watch via LL-HLS from the page.
  await page.click('#watchHls');
  await until('LL-HLS playback', () => page.evaluate(() => (window as unknown as PlaygroundWindow).playground.mode), (m) => m === 'hls', 40_000).catch(async (err: unknown) => {
    // What the player and the node had when it did not start (it failed once in a loaded CI run).
    const video = await page.evaluate(() => {
      const v = document.getElementById('output') as HTMLVideoElement;
      const ranges = Array.from({ length: v.buffered.length }, (_, i) => `${v.buffered.start(i).toFixed(3)}-${v.buffered.end(i).toFixed(3)}`);
      return { readyState: v.readyState, networkState: v.networkState, currentTime: v.currentTime, buffered: ranges, error: v.error?.message ?? null, pill: document.getElementById('outState')?.textContent, shown: document.getElementById('error')?.textContent, hlsErrors: (window as unknown as PlaygroundWindow).playground.hlsErrors };
    });
    const playlist = await fetch(`${server.url}/hls/${playbackId}/index.m3u8`).then((r) => r.text(), (e: unknown) => String(e));
    // The player's state last: a CI log keeps only the tail of a long comment.
    t.comment(`LL-HLS did not start. playlist:\n${playlist}\nplayer: ${JSON.stringify(video)}`);
    throw err;
  });
  const hls = await until('HLS frames', () => videoStats(page, '#output'), (s) => s.width > 0 && s.time > 1, 30_000);
  t.ok(hls.time > 1, `LL-HLS plays in the playground (currentTime ${hls.time.toFixed(1)} s)`);
  await page.screenshot({ path: join(ARTIFACTS, 'playground-3-hls.png'), fullPage: true });

  // 6b. Clip the last 10 s: the button POSTs the clip and shows its link once the MP4 exists.
  await page.click('#clip');
  await page.waitForSelector('#clipLink', { timeout: 30_000 });
  const clipId = (await page.getAttribute('#clipLink', 'data-clip-id')) ?? '';
  const clipHref = (await page.getAttribute('#clipLink', 'href')) ?? '';
  t.match(clipId, /^clp_/, `the page shows the clip: ${await page.textContent('#clipLink')}`);
  const mp4 = await fetch(new URL(clipHref, server.url));
  t.equal(mp4.status, 200, 'its link downloads without a key (signed)');
  t.equal(mp4.headers.get('content-type'), 'video/mp4');
  t.ok((await mp4.arrayBuffer()).byteLength > 10_000, 'an MP4 with media in it');

  // 7. The shareable viewer page: WHEP first.
  const share = await page.getAttribute('#share', 'href');
  const viewer = await ctx.newPage();
  await viewer.goto(`${server.url}${share}`);
  await viewer.waitForFunction(() => document.body.dataset['mode'] === 'whep', undefined, { timeout: 30_000 });
  const v = await until('viewer frames', () => videoStats(viewer, '#video'), (s) => s.frames > 10, 20_000);
  t.ok(v.frames > 10, `watch.html plays over WHEP (${v.frames} frames)`);
  t.match(await viewer.textContent('#status'), /Live · WebRTC/, 'the status line says how it plays');
  // …and lists the stream's clips, with the one just made.
  await viewer.waitForSelector(`#clips a[data-clip-id="${clipId}"]`, { timeout: 15_000 });
  t.notOk(await viewer.$eval('#clipsCard', (e) => (e as HTMLElement).hidden), 'the viewer page lists the clips');
  const listed = await viewer.getAttribute(`#clips a[data-clip-id="${clipId}"]`, 'href');
  t.equal((await fetch(new URL(listed ?? '', server.url), { method: 'HEAD' })).status, 200, 'and its link plays without a key');
  await viewer.screenshot({ path: join(ARTIFACTS, 'watch-whep.png'), fullPage: true });

  // 8. …and LL-HLS when asked (?hls=1), as it does when WHEP fails.
  const hlsViewer = await ctx.newPage();
  await hlsViewer.goto(`${server.url}${share}&hls=1`);
  await hlsViewer.waitForFunction(() => document.body.dataset['mode'] === 'hls', undefined, { timeout: 40_000 });
  t.pass('watch.html falls back to / plays LL-HLS');

  t.same(pageErrors, [], 'no uncaught page errors');
  t.same(blocked, [], 'the CSP blocked nothing the pages do (playground, WHEP and HLS viewers)');
});
