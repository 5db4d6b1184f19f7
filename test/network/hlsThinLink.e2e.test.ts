/**
 * hls.js on a thin link: a `reverie serve` and an OBS-like publisher (512², 1.5 Mb/s) on clean
 * veths; Chromium playing /hls/{playbackId}/master.m3u8 across an emulated 600 kb/s link (20 ms
 * each way, a 64 KiB queue: what a weak mobile link gives). The full encode needs ≈ 1.7 Mb/s, the
 * half rendition ≈ 0.45: hls.js has to pick the rendition and play it without stalling.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { canUseNetns } from '../helpers/netns.ts';
import { startThinLinkLab } from '../helpers/thinLinkLab.ts';
import { until } from '../helpers/until.ts';

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

const HLS_JS = readFileSync(join(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js')));
const WINDOW_S = 20;

const PAGE = `<!doctype html><html><body><video id="v" autoplay muted playsinline></video>
<script src="/hls.min.js"></script><script>
window.log = { stalls: 0, waiting: 0, levels: [], errors: [] };
window.play = (url) => {
  const v = document.getElementById('v');
  const hls = new Hls({ lowLatencyMode: true });
  window.hls = hls;
  hls.on(Hls.Events.LEVEL_SWITCHED, (_e, d) => window.log.levels.push(hls.levels[d.level].height));
  hls.on(Hls.Events.ERROR, (_e, d) => { if (d.details === 'bufferStalledError') window.log.stalls++; else window.log.errors.push(d.details + (d.fatal ? ':fatal' : '')); });
  v.addEventListener('waiting', () => window.log.waiting++);
  hls.loadSource(url); hls.attachMedia(v);
  v.play().catch(() => {});
};
window.state = () => {
  const v = document.getElementById('v');
  const q = v.getVideoPlaybackQuality();
  return { ...window.log, height: v.videoHeight, time: v.currentTime, frames: q.totalVideoFrames, levelsOffered: window.hls.levels.map((l) => l.height) };
};
</script></body></html>`;

type State = { stalls: number; waiting: number; levels: number[]; errors: string[]; height: number; time: number; frames: number; levelsOffered: number[] };

t.test('hls.js on a 600 kb/s link picks the half rendition and plays without stalls', { timeout: 180_000 }, async (t) => {
  const { lab, link, origin, stream } = await startThinLinkLab(t, 36);
  // Toward the viewer: 600 kb/s behind a 64 KiB queue; requests back: the delay alone.
  await link.set('ab', { rateKbps: 600, queueBytes: 64 * 1024 });
  const playbackId = stream.output_playback_id;

  const ctx = await launchChromium(t, { fakeMedia: false, netns: lab.ns('view') });
  const page = await ctx.newPage();
  await page.route(`${origin}/hls-page.html`, (r) => r.fulfill({ body: PAGE, contentType: 'text/html' }));
  await page.route(`${origin}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  await page.goto(`${origin}/hls-page.html`);
  await page.evaluate((url) => (window as unknown as { play(u: string): void }).play(url), `${origin}/hls/${playbackId}/master.m3u8`);
  const state = () => page.evaluate(() => (window as unknown as { state(): State }).state());
  const started = await until('hls.js plays', state, (s) => s.frames > 30 && s.time > 1, 40_000, 250);
  t.same([...started.levelsOffered].sort((a, b) => a - b), [256, 512], 'hls.js sees both variants');
  // Settle, then a window in which nothing may stall.
  await new Promise((r) => setTimeout(r, 5000));
  const a = await state();
  const linkBefore = (await link.stats()).ab;
  await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
  const b = await state();
  const linkAfter = (await link.stats()).ab;
  const kbps = ((linkAfter.sentBytes - linkBefore.sentBytes) * 8) / WINDOW_S / 1000;
  t.comment(`hls.js on 600 kb/s: levels ${b.levels.join('→')}; ${((b.frames - a.frames) / WINDOW_S).toFixed(1)} fps, ${(b.time - a.time).toFixed(2)} s played in ${WINDOW_S} s; ${b.stalls - a.stalls} stalls, ${b.waiting - a.waiting} waits; link carried ${kbps.toFixed(0)} kb/s, dropped ${linkAfter.queueDrops - linkBefore.queueDrops} packets at its queue; errors: ${b.errors.join(', ') || 'none'}`);
  t.equal(b.height, 256, 'the picture is the half rendition');
  t.equal(b.stalls - a.stalls, 0, 'no stall in the window');
  t.equal(b.waiting - a.waiting, 0, 'the video never waited for data in the window');
  t.ok(b.time - a.time > WINDOW_S * 0.95, `playback advanced ${(b.time - a.time).toFixed(2)} s in ${WINDOW_S} s`);
  t.ok(kbps < 600, `within the link (${kbps.toFixed(0)} kb/s)`);
});
