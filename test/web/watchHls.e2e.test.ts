/**
 * The pages' LL-HLS player (`playHls` in web/watch.js: hls.js in real Chromium) against the real
 * node's playlist (an OBS-like publisher feeds it), through an origin that fails
 * for a while: after the first playlist, every request for a playlist or media answers 503 for
 * OUTAGE_MS, as the
 * node does when a blocking reload's part does not come within 3 target durations (a node too busy
 * to package) and as a proxy in front of it does when it is overloaded. hls.js's defaults give up
 * for good after three playlist failures (≈ 3 s); the player must ride out the outage and play.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { PLAYBACK_ID, STREAM_KEY, startMediaServer } from '../media/harness.ts';

const HLS_JS = readFileSync(join(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js')));
const WATCH_JS = readFileSync(join(import.meta.dirname, '../../web/watch.js'));
/**
 * How long the origin answers 503 to playlist requests, ms: past hls.js's default give-up (≈ 3 s),
 * and long enough that the player's own retries (1, 2, then 4 s apart) meet it three times
 * whatever the first playlist was (at 8 s a first playlist without a segment yet cost a retry, and
 * only two met the outage).
 */
const OUTAGE_MS = 12_000;

interface HlsPage {
  result: { ok: boolean; message?: string } | null;
  errors: string[];
}

t.test('the LL-HLS player rides out an origin that answers 503 for 12 s from its first playlist, then plays', { timeout: 120_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 } });
  const hlsUrl = `${srv.baseUrl}/hls/${PLAYBACK_ID}/index.m3u8`;
  const pubs = startObsPublishers(t);
  await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 300 }) });
  // The first key frame makes the playlist (bounded poll, no sleep as sync).
  for (let i = 0; (await fetch(hlsUrl)).status !== 200; i++) {
    if (i > 300) throw new Error('the stream never reached the HLS playlist');
    await new Promise((r) => setTimeout(r, 100));
  }

  const ctx = await launchChromium(t);
  await ctx.route(`${srv.baseUrl}/page.html`, (r) => r.fulfill({ body: '<!doctype html><video id="v" autoplay muted playsinline></video>', contentType: 'text/html' }));
  await ctx.route(`${srv.baseUrl}/web/watch.js`, (r) => r.fulfill({ body: WATCH_JS, contentType: 'text/javascript' }));
  await ctx.route(`${srv.baseUrl}/web/vendor/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  // The outage: the first playlist goes through, then every HLS request fails until it ends.
  let outageEnds = Infinity;
  let refused = 0;
  await ctx.route(/\/hls\//, async (r) => {
    const playlist = /\.m3u8/.test(r.request().url());
    if (playlist && outageEnds === Infinity) outageEnds = Date.now() + OUTAGE_MS;
    else if (Date.now() < outageEnds) {
      if (playlist) refused++;
      return r.fulfill({ status: 503, body: 'busy', headers: { 'retry-after': '1', 'cache-control': 'no-store' } });
    }
    return r.continue();
  });

  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/page.html`);
  // A string, not a function: the test's compiler would wrap a function's inner names in helpers the page lacks.
  await page.evaluate(`(async () => {
    window.result = null;
    window.errors = [];
    const { playHls } = await import('/web/watch.js');
    playHls(document.getElementById('v'), ${JSON.stringify(hlsUrl)}, { timeoutMs: 40000, onError: (e) => window.errors.push(e) })
      .then(() => (window.result = { ok: true }), (err) => (window.result = { ok: false, message: err.message }));
  })()`);

  await page.waitForFunction(() => (window as unknown as HlsPage).result !== null, undefined, { timeout: 60_000, polling: 200 });
  const { result, errors } = await page.evaluate(() => ({ result: (window as unknown as HlsPage).result, errors: (window as unknown as HlsPage).errors }));
  t.ok(refused >= 3, `the origin refused ${refused} playlist requests during the outage (hls.js's defaults give up after 3)`);
  t.ok(errors.some((e) => /HTTP 503/.test(e)), `the page saw the player's errors: ${errors.slice(0, 3).join('; ')}`);
  t.same(result, { ok: true }, 'the first frame was shown after the outage');
  // And it keeps playing: media time advances past the outage.
  const start = await page.$eval('#v', (v) => (v as HTMLVideoElement).currentTime);
  await page.waitForFunction((s) => (document.getElementById('v') as HTMLVideoElement).currentTime > s + 2, start, { timeout: 30_000, polling: 200 });
  t.pass('playback advances 2 s after the outage');
});
