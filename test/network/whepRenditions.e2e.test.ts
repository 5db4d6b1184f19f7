/**
 * WHEP viewers on links of different widths: a `reverie serve` and an OBS-like publisher (512²,
 * 1.5 Mb/s) on clean veths; one Chromium viewer across an emulated link (20 ms each way), one on a
 * clean path. When the first link narrows to 600 kb/s (a 64 KiB queue: a weak mobile link), that
 * viewer's RTCP (REMB, receiver reports) moves it to the half rendition; the clean viewer keeps the
 * full one; when the link opens again, probing lets its estimate grow and it moves back up.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { launchChromium } from '../helpers/chromium.ts';
import { canUseNetns } from '../helpers/netns.ts';
import { startThinLinkLab } from '../helpers/thinLinkLab.ts';
import { until } from '../helpers/until.ts';
import { openPage, RECEIVER_PAGE, type ReceiverStats } from '../helpers/viewerLab.ts';

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

const inbound = async (page: Page): Promise<ReceiverStats> => {
  const s = await page.evaluate(() => (window as unknown as { inbound(): Promise<ReceiverStats | null> }).inbound());
  if (!s) throw new Error('no inbound video');
  return s;
};

t.test('a WHEP viewer whose link narrows to 600 kb/s moves to the half rendition and plays; a clean viewer keeps the full one; the link opens, it moves up', { timeout: 240_000 }, async (t) => {
  const { lab, link, server, stream } = await startThinLinkLab(t, 37);

  // The thin-link viewer in its namespace; the clean one here (its packets reach the node over the clean veth).
  const [thinCtx, cleanCtx] = await Promise.all([launchChromium(t, { fakeMedia: false, netns: lab.ns('view') }), launchChromium(t, { fakeMedia: false })]);
  const thin = await openPage(thinCtx, 'http://viewer.test/recv.html', RECEIVER_PAGE);
  const clean = await openPage(cleanCtx, 'http://viewer.test/recv.html', RECEIVER_PAGE);
  for (const page of [thin, clean]) {
    const played = await page.evaluate((url) => (window as unknown as { whep(u: string): Promise<{ status: number; body: string }> }).whep(url), stream.output_stream_url);
    t.equal(played.status, 201, 'WHEP 201');
  }
  await until('both decode the full encode', () => Promise.all([inbound(thin), inbound(clean)]).catch(() => null), (s) => s !== null && s.every((x) => x.framesDecoded >= 30 && x.frameWidth === 512), 30_000, 250);

  // The link narrows.
  await link.set('ab', { rateKbps: 600, queueBytes: 64 * 1024 });
  const narrowedAt = performance.now();
  await until('the thin viewer gets the half rendition', () => inbound(thin), (s) => s.frameWidth === 256, 15_000, 100);
  const movedS = (performance.now() - narrowedAt) / 1000;
  t.ok(movedS <= 5, `the half rendition reached the thin viewer ${movedS.toFixed(1)} s after the link narrowed`);
  // Settle (the link's queue drains), then a window in which it must play.
  await new Promise((r) => setTimeout(r, 3000));
  const [a0, c0] = [await inbound(thin), await inbound(clean)];
  await new Promise((r) => setTimeout(r, 20_000));
  const [a1, c1] = [await inbound(thin), await inbound(clean)];
  const fps = (a1.framesDecoded - a0.framesDecoded) / 20;
  const frozen = a1.totalFreezesDuration - a0.totalFreezesDuration;
  const linkStats = (await link.stats()).ab;
  t.comment(`thin viewer on 600 kb/s: moved down ${movedS.toFixed(1)} s after; then ${fps.toFixed(1)} fps, ${a1.freezeCount - a0.freezeCount} freezes, ${frozen.toFixed(2)} s frozen in 20 s at ${a1.frameWidth}×${a1.frameHeight}; queue drops so far ${linkStats.queueDrops}; clean viewer ${((c1.framesDecoded - c0.framesDecoded) / 20).toFixed(1)} fps at ${c1.frameWidth}×${c1.frameHeight}`);
  t.equal(a1.frameWidth, 256, 'the thin viewer stays on the half rendition');
  t.ok(frozen <= 0.5, `frozen ${frozen.toFixed(2)} s in 20 s (every freeze ≤ 0.5 s)`);
  t.ok(fps >= 25, `the thin viewer decodes ${fps.toFixed(1)} fps`);
  t.equal(c1.frameWidth, 512, 'the clean viewer keeps the full encode');
  t.ok(c1.framesDecoded - c0.framesDecoded >= 500, 'and plays it');
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  t.match(metrics, new RegExp(`reverie_media_viewers_by_rendition\\{stream_id="${stream.id}",rendition="half"\\} 1`), '/metrics: one viewer on the half rendition');
  t.match(metrics, new RegExp(`reverie_media_viewers_by_rendition\\{stream_id="${stream.id}",rendition="full"\\} 1`), 'and one on the full encode');
  t.match(metrics, new RegExp(`reverie_media_viewer_estimate_bits_per_second\\{stream_id="${stream.id}",session_id="[^"]+",rendition="half"\\} \\d+`), "and the thin viewer's estimate");

  // The link opens again: probing lets the thin viewer's estimate grow, and it moves up.
  await link.set('ab', { rateKbps: 0 });
  const openedAt = performance.now();
  await until('the thin viewer is back on the full encode', () => inbound(thin), (s) => s.frameWidth === 512, 90_000, 250);
  t.comment(`moved up ${((performance.now() - openedAt) / 1000).toFixed(1)} s after the link opened`);
  const status = await server.api('GET', `/v1/streams/${stream.id}/status`);
  t.equal(status.status, 200);
});
