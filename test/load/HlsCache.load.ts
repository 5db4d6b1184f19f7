/**
 * LL-HLS behind a shared cache: the reference nginx `proxy_cache` block of docs/operations.md in
 * front of a real media node whose stream headless Chromium publishes over WHIP (a canvas whose
 * frame counter is drawn as a barcode, see test/helpers/stampedFrames.ts).
 *
 * - Players are plain HTTP clients that do what an LL-HLS player does at the live edge
 *   (rfc8216bis §6.2.5.2, §6.2.6): a blocking playlist reload for the part the preload hint
 *   names, that hinted part at the same time, and any listed part not fetched yet. 20 and then
 *   200 of them run for a fixed time each; the node counts the HLS requests that reach it.
 * - hls.js (lowLatencyMode) plays the stream through the cache and directly, side by side in one
 *   browser, and both read the frame counter back: latency = present time − draw time.
 *
 * A load suite (`npm run test:load` runs its files one at a time): 200 players make ≈ 2,000
 * requests a second through nginx for 10 s.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../helpers/chromium.ts';
import { runPlayers } from '../helpers/llhlsPlayers.ts';
import { haveNginx, startNginxCache } from '../helpers/nginxCache.ts';
import { STAMPED_FRAMES_JS } from '../helpers/stampedFrames.ts';
import { until } from '../helpers/until.ts';
import { PLAYBACK_ID, STREAM_KEY, startMediaServer, type MediaServer } from '../media/harness.ts';

const HLS_JS = readFileSync(join(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js')));
/** HTTP players that share the cache with hls.js in the latency test. */
const AUDIENCE = 20;
/** The packager's part target, ms (the default). */
const PART_MS = 200;
/**
 * PART-HOLD-BACK the node serves, ms, as docs/operations.md sets it behind this cache: 3 parts
 * plus nginx's 500 ms lock poll. With the default 600 a part handed out late by the lock left a
 * player nothing to play now and then; hls.js then adds 1 s to its target latency for good
 * (CI: p50 1774 vs 1141 ms direct, after one bufferStalledError).
 */
const HOLD_BACK_MS = 3 * PART_MS + 500;

const PAGE = `<!doctype html><html><body><canvas id="src"></canvas><video id="v" autoplay muted playsinline></video><canvas id="rd"></canvas>
<script src="/hls.min.js"></script><script>
${STAMPED_FRAMES_JS}
window.hlsErrors = [];
window.playHls = (url) => {
  const v = document.getElementById('v');
  // As our viewer page (web/watch.js): after a stall it plays up to 1.5× back to its target latency.
  // Without it one stall behind the cache lock left the player 2 s behind for good (CI: p50 3004 vs 1023 ms direct).
  const hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5, backBufferLength: 4 });
  hls.on(Hls.Events.ERROR, (_e, d) => window.hlsErrors.push(d.type + ':' + d.details + (d.fatal ? ':fatal' : '')));
  hls.loadSource(url); hls.attachMedia(v);
  v.play().catch(() => {});
  readStamps(v);
};
</script></body></html>`;

type Win = {
  startSource(n: number, withAudio: boolean): Promise<void>;
  publish(u: string, k: string): Promise<number>;
  playHls(u: string): void;
  recv: [number, number][];
  sent: Map<number, number>;
  hlsErrors: string[];
};

/** A media node with one live stream published by Chromium, and the reference cache in front. */
async function liveBehindCache(t: Test): Promise<{ srv: MediaServer; ctx: BrowserContext; pub: Page; cacheUrl: string; cacheErrors: () => string; originHls: () => number }> {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 }, settings: { hlsPartHoldBackMs: HOLD_BACK_MS } });
  let originHls = 0;
  // Every HLS request that reaches the node through the cache (nginx adds X-Forwarded-For; the
  // players that read the node directly do not), counted where it arrives.
  srv.app.server.on('request', (req: { url?: string; headers: Record<string, unknown> }) => {
    if (req.url?.startsWith('/hls/') && req.headers['x-forwarded-for'] !== undefined) originHls++;
  });
  const cache = await startNginxCache(t, srv.baseUrl);
  const ctx = await launchChromium(t);
  // The page and hls.js come from the origin a player reads from (Chromium refuses cross-origin
  // fetches between loopback ports: Local Network Access).
  for (const origin of [srv.baseUrl, cache.url]) {
    await ctx.route(`${origin}/hls-page.html`, (r) => r.fulfill({ body: PAGE, contentType: 'text/html' }));
    await ctx.route(`${origin}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  }
  const pub = await ctx.newPage();
  await pub.goto(`${srv.baseUrl}/hls-page.html`);
  await pub.evaluate(() => (window as unknown as Win).startSource(256, true));
  t.equal(await pub.evaluate(([u, k]) => (window as unknown as Win).publish(u, k), [srv.whipUrl, STREAM_KEY] as const), 201, 'Chromium publishes');
  // Live when the node answers a playlist (it holds the first request until media exists).
  await until('the stream is live over HLS', async () => (await fetch(`${srv.baseUrl}/hls/${PLAYBACK_ID}/index.m3u8`)).status, (s) => s === 200, 30_000, 200);
  t.teardown(() => {
    const counts = new Map<string, number>();
    for (const l of cache.log()) {
      const k = l.replace(/\d+/g, 'N');
      counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    t.comment(`cache log: ${[...counts].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, n]) => `${n}× ${k}`).join('; ')}`);
  });
  return { srv, ctx, pub, cacheUrl: cache.url, cacheErrors: cache.errors, originHls: () => originHls };
}

/** `n` players through `base` for `ms`; origin HLS requests and parts published meanwhile. */
async function phase(t: Test, base: string, direct: string, originHls: () => number, n: number, ms: number) {
  // Counted from 2 s in, once every player has joined: n players joining at once cost n requests
  // for the plain index.m3u8 (nginx's lock covers new entries, not expired ones), once, not per part.
  let before = NaN;
  let from = NaN;
  const steady = setTimeout(() => {
    before = originHls();
    from = performance.timeOrigin + performance.now();
  }, 2000);
  t.teardown(() => clearTimeout(steady));
  // One player reads the node directly meanwhile: what the cache adds is when a part reaches a
  // cached player minus when it reached the direct one.
  const [results, [side]] = await Promise.all([runPlayers(t, base, n, ms), runPlayers(t, direct, 1, ms)]);
  const origin = originHls() - before;
  const partsSteady = side ? side.at.filter((at) => at >= from).length : 0;
  const directAt = new Map(side?.parts.map((u, i) => [u, side.at[i] ?? NaN]));
  const added = results.flatMap((r) => r.parts.map((u, i) => (r.at[i] ?? NaN) - (directAt.get(u) ?? NaN))).filter(Number.isFinite).sort((a, b) => a - b);
  const addedP50 = added[Math.floor(added.length / 2)] ?? NaN;
  const addedP95 = added[Math.floor(added.length * 0.95)] ?? NaN;
  const all = new Set(results.flatMap((r) => r.parts));
  const failures = results.flatMap((r) => r.failures);
  const perPlayer = results.map((r) => r.parts.length).sort((a, b) => a - b);
  const perPart = origin / partsSteady;
  t.comment(`${n} players for ${ms} ms: ${all.size} parts published; from 2 s in, ${partsSteady} parts and ${origin} origin requests (${perPart.toFixed(2)} per part); parts per player min ${perPlayer[0]} median ${perPlayer[Math.floor(n / 2)]}; a part reached them ${addedP50.toFixed(0)} ms (p50), ${addedP95.toFixed(0)} ms (p95) after the direct player; ${failures.length} failures ${[...new Set(failures)].slice(0, 8).join(', ')}`);
  return { parts: all.size, origin, perPart, minParts: perPlayer[0] ?? 0, failures, addedP50 };
}

t.test('200 LL-HLS players through the reference nginx cache cost the node no more requests per part than 20 do', { timeout: 240_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const { srv, cacheUrl, originHls, cacheErrors } = await liveBehindCache(t);
  t.teardown(() => {
    const errors = cacheErrors().trim().split('\n').slice(-5).join('\n');
    if (errors !== '') t.comment(`nginx error log (last lines): ${errors}`);
  });
  const base = `${cacheUrl}/hls/${PLAYBACK_ID}`;
  const ms = 10_000;
  const direct = `${srv.baseUrl}/hls/${PLAYBACK_ID}`;
  const few = await phase(t, base, direct, originHls, 20, ms);
  const many = await phase(t, base, direct, originHls, 200, ms);
  // Parts come every ≈ 200 ms: 10 s holds ≈ 50 (fewer on a loaded machine); every player must
  // have followed the edge for most of them.
  for (const [name, p] of [['20 players', few], ['200 players', many]] as const) {
    t.ok(p.parts >= (ms / PART_MS) * 0.5, `${name}: ${p.parts} parts published in ${ms} ms`);
    t.ok(p.minParts >= p.parts * 0.8, `${name}: every player got ≥ 80 % of them (the slowest ${p.minParts})`);
    t.same(p.failures, [], `${name}: every request answered 200`);
  }
  // Per part a player asks for a playlist and the part: without a shared cache that is ≈ 2 × players
  // requests at the node. With it, ≈ hold ÷ lock age per key (docs/operations.md), whatever the count.
  t.ok(many.perPart <= 12, `200 players: ${many.perPart.toFixed(2)} origin requests per part (≤ 12, not ≈ 400)`);
  t.ok(many.perPart <= few.perPart * 1.5 + 1, `origin requests per part: 200 players ${many.perPart.toFixed(2)} vs 20 players ${few.perPart.toFixed(2)}`);
  // What collapsing costs a player: nginx's lock waiters look for the answer every 500 ms (they
  // are not woken), so a part reaches most players up to 500 ms after it reached the node's own.
  for (const [name, p] of [['20 players', few], ['200 players', many]] as const) {
    t.ok(p.addedP50 <= 500, `${name}: a part reaches a player through the cache ${p.addedP50.toFixed(0)} ms (p50) after a direct player (≤ nginx's 500 ms lock poll)`);
  }
});

function p50(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

t.test('hls.js plays through the reference nginx cache, shared with 20 other players, within nginx\'s 0.5 s lock poll of the latency it has direct', { timeout: 180_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const { srv, ctx, pub, cacheUrl } = await liveBehindCache(t);
  // Two players side by side in one browser, same stream, same time: one direct, one through the
  // cache. Each in a context of its own: two pages of one context are two tabs, and Chromium
  // throttles the frame callbacks of the one in the background (it presented 26 frames to 350).
  const browser = ctx.browser();
  if (!browser) throw new Error('no browser behind the context');
  const second = await browser.newContext();
  t.teardown(() => second.close());
  await second.route(`${srv.baseUrl}/hls-page.html`, (r) => r.fulfill({ body: PAGE, contentType: 'text/html' }));
  await second.route(`${srv.baseUrl}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  const pages = { direct: await second.newPage(), cached: await ctx.newPage() };
  const origins = { direct: srv.baseUrl, cached: cacheUrl };
  for (const k of ['direct', 'cached'] as const) {
    await pages[k].goto(`${origins[k]}/hls-page.html`);
    await pages[k].evaluate((u) => (window as unknown as Win).playHls(u), `${origins[k]}/hls/${PLAYBACK_ID}/index.m3u8`);
  }
  // Warm up until both present frames, then measure both over the same 10 s.
  for (const k of ['direct', 'cached'] as const) {
    const errs = () => pages[k].evaluate(() => (window as unknown as Win).hlsErrors);
    t.teardown(async () => t.comment(`${k} hls.js errors: ${(await errs().catch(() => [])).join(', ')}`));
    await until(`${k} hls.js presents frames`, () => pages[k].evaluate(() => (window as unknown as Win).recv.length), (n) => n > 30, 60_000, 250);
  }
  // The cached player shares the cache with an audience, as it would behind a CDN: others ask
  // for each playlist update and part first, and hls.js waits on the cache lock behind them.
  const audience = runPlayers(t, `${cacheUrl}/hls/${PLAYBACK_ID}`, AUDIENCE, 12_000);
  for (const k of ['direct', 'cached'] as const) await pages[k].evaluate(() => ((window as unknown as Win).recv = []));
  // The measurement window (both players over the same 10 s), not a wait for anything.
  await pages.direct.waitForTimeout(10_000);
  const others = await audience;
  t.ok(others.every((r) => r.parts.length > 0), `the ${AUDIENCE} other players played too`);
  const sent = new Map(await pub.evaluate(() => [...(window as unknown as Win).sent.entries()]));
  const lat: Record<string, number> = {};
  for (const k of ['direct', 'cached'] as const) {
    const recv = await pages[k].evaluate(() => (window as unknown as Win).recv.splice(0));
    const xs = recv.map(([n, at]) => (sent.has(n) ? at - (sent.get(n) ?? 0) : NaN)).filter((x) => Number.isFinite(x) && x > 0 && x < 30_000);
    const errors = await pages[k].evaluate(() => (window as unknown as Win).hlsErrors);
    lat[k] = p50(xs);
    t.comment(`${k}: p50 ${p50(xs).toFixed(0)} ms over ${xs.length} frames; hls.js errors: ${errors.join(', ') || 'none'}`);
    t.ok(xs.length > 100, `${k}: hls.js presented frames whose counters match published frames`);
    t.notOk(errors.some((e) => e.endsWith(':fatal')), `${k}: no fatal hls.js error`);
  }
  const diff = (lat['cached'] ?? NaN) - (lat['direct'] ?? NaN);
  // Both aim for PART-HOLD-BACK behind the live edge, which leaves room for the up to 500 ms a
  // part waits on nginx's lock, so the cached player does not stall; it still reads the live edge
  // from playlists that reached it up to 500 ms late, and so may sit up to that much further back
  // (measured: 0.01–0.19 s in 6 runs, docs/performance.md). A stall would add 1 s (hls.js).
  t.ok(diff <= 500, `p50 through the cache ${lat['cached']?.toFixed(0)} ms vs direct ${lat['direct']?.toFixed(0)} ms: ${diff.toFixed(0)} ms more (≤ nginx's 500 ms lock poll)`);
});
