/**
 * The always-on output (decision 0011) with real parts: headless Chromium publishes a canvas whose
 * frames carry a 4×4 black/white block barcode (pure black and white at every block centre); in
 * the same page a WHEP viewer (Chromium's libwebrtc) and an hls.js LL-HLS player classify every
 * presented frame from its pixels:
 *
 * - `live`: every block centre black or white (the publisher's barcode);
 * - `plain`: uniform dark grey (the slate before any live frame);
 * - `grey`: every centre mid-grey, at two levels (the last live frame greyed).
 *
 * The viewer joins before the first publish, the publisher leaves (WHIP DELETE) and comes back;
 * WHEP, hls.js and an RTMP push to nginx-rtmp must each keep their one session throughout. The
 * first publish also changes the output's size (the slate starts at the default 512², the live
 * picture is 256²): a new encoder and HLS init segment, which hls.js must cross without a hole.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { Page } from 'playwright-core';
import { AddressPolicy } from '../../../outbound/index.ts';
import { launchChromium } from '../../helpers/chromium.ts';
import { haveNginx, startNginx } from '../../helpers/nginxRtmp.ts';
import { trackSpans } from '../../helpers/fmp4.ts';
import { SegmentCollector } from '../../helpers/llhlsSegments.ts';
import { STAMPED_FRAMES_JS } from '../../helpers/stampedFrames.ts';
import { rtmpOf, PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';

const HLS_JS = readFileSync(join(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js')));

const PAGE = `<!doctype html><html><body><canvas id="src"></canvas>
<video id="w" autoplay muted playsinline></video><video id="h" autoplay muted playsinline></video><canvas id="rd"></canvas>
<script src="/hls.min.js"></script><script>
${STAMPED_FRAMES_JS}
window.counts = { w: {}, h: {} }; window.runs = { w: [], h: [] };
window.whepPosts = 0; window.pcStates = []; window.hlsErrors = []; window.manifestLoads = 0; window.hlsLog = [];
// Block centres of the 4×4 grid, classified (see the file comment).
function classify(d, w, h) {
  const ys = [];
  for (let i = 0; i < 16; i++) {
    const x = Math.floor(((i % 4) + 0.5) * w / 4), y = Math.floor((Math.floor(i / 4) + 0.5) * h / 4);
    const o = (y * w + x) * 4;
    if (Math.max(Math.abs(d[o] - d[o + 1]), Math.abs(d[o + 1] - d[o + 2])) > 30) return 'other';
    ys.push(0.299 * d[o] + 0.587 * d[o + 1] + 0.114 * d[o + 2]);
  }
  const lo = Math.min(...ys), hi = Math.max(...ys);
  if (ys.every((y) => y < 45 || y > 210)) return 'live';
  if (lo >= 35 && hi <= 90 && hi - lo < 15) return 'plain';
  if (lo >= 35 && hi <= 185 && hi - lo >= 40) return 'grey';
  return 'other';
}
function watch(id) {
  const v = document.getElementById(id), c = document.createElement('canvas');
  const g = c.getContext('2d', { willReadFrequently: true });
  const onFrame = (_now, meta) => {
    const w = v.videoWidth, h = v.videoHeight;
    if (w > 0) {
      if (c.width !== w) { c.width = w; c.height = h; }
      g.drawImage(v, 0, 0);
      const k = classify(g.getImageData(0, 0, w, h).data, w, h);
      window.counts[id][k] = (window.counts[id][k] || 0) + 1;
      const runs = window.runs[id], last = runs[runs.length - 1];
      if (last && last[0] === k) last[1]++;
      else {
        runs.push([k, 1]);
        if (id === 'h') window.hlsLog.push(Date.now() + ' ms: ' + k + ' from media time ' + meta.mediaTime.toFixed(3));
      }
    }
    v.requestVideoFrameCallback(onFrame);
  };
  v.requestVideoFrameCallback(onFrame);
}
window.resetCounts = () => { window.counts = { w: {}, h: {} }; };
window.unpublish = async (token) => {
  window.pub.close();
  return (await fetch(window.pubLocation, { method: 'DELETE', headers: { Authorization: 'Bearer ' + token } })).status;
};
window.playWhep = async (url) => {
  const pc = new RTCPeerConnection(); window.view = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addEventListener('connectionstatechange', () => window.pcStates.push(pc.connectionState));
  const v = document.getElementById('w');
  pc.ontrack = (e) => { if (e.track.kind === 'video') { v.srcObject = new MediaStream([e.track]); v.play().catch(() => {}); } };
  watch('w');
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  window.whepPosts++;
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.playHls = (url) => {
  const v = document.getElementById('h');
  // hls.js's warnings (stalls, holes it skips) with the classified runs: what a failure is read from.
  const note = (m) => window.hlsLog.push(Date.now() + ' ms: ' + m.map(String).join(' ').slice(0, 300));
  const quiet = () => {};
  const hls = new Hls({ lowLatencyMode: true, backBufferLength: 4, debug: { log: quiet, debug: quiet, info: quiet, trace: quiet, warn: (...m) => note(m), error: (...m) => note(m) } });
  window.hls = hls;
  hls.on(Hls.Events.MANIFEST_LOADING, () => window.manifestLoads++);
  hls.on(Hls.Events.ERROR, (_e, d) => window.hlsErrors.push(d.type + ':' + d.details + (d.fatal ? ':fatal' : '')));
  hls.loadSource(url); hls.attachMedia(v);
  v.play().catch(() => {});
  watch('h');
};
</script></body></html>`;

type Kind = 'live' | 'plain' | 'grey' | 'other';
interface SlatePage {
  counts: Record<'w' | 'h', Partial<Record<Kind, number>>>;
  runs: Record<'w' | 'h', [Kind, number][]>;
  whepPosts: number;
  pcStates: string[];
  hlsErrors: string[];
  hlsLog: string[];
  manifestLoads: number;
  resetCounts(): void;
  startSource(size: number, withAudio: boolean): Promise<void>;
  publish(url: string, token: string): Promise<number>;
  unpublish(token: string): Promise<number>;
  playWhep(url: string): Promise<number>;
  playHls(url: string): void;
}

/** Waits (bounded) until both players presented `n` frames of `kind` since the last resetCounts. */
async function bothSee(page: Page, kind: Kind, n: number, timeoutMs: number): Promise<void> {
  await page.waitForFunction(
    ([k, m]) => {
      const c = (window as unknown as SlatePage).counts;
      return (c.w[k] ?? 0) >= m && (c.h[k] ?? 0) >= m;
    },
    [kind, n] as const,
    { timeout: timeoutMs, polling: 100 },
  );
}

/** The runs of one player with flicker (runs under `min` frames, and `other`) left out and repeats merged. */
function phases(runs: [Kind, number][], min: number): Kind[] {
  const out: Kind[] = [];
  for (const [k, n] of runs) if (k !== 'other' && n >= min && out[out.length - 1] !== k) out.push(k);
  return out;
}

t.test('WHEP, hls.js and the RTMP push keep one session across a publisher reconnect and see slate then live', { timeout: 240_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (apt-get install -y nginx-light libnginx-mod-rtmp)');
  const rtmp = await startNginx(t); // started and listening
  const srvLog: string[] = [];
  const srv = await startMediaServer(t, {
    params: { width: 256, height: 256 },
    outputRtmpUrl: `rtmp://127.0.0.1:${rtmp.port}/live/slate`,
    outboundPolicy: new AddressPolicy({ allowLoopback: true }),
    // The node's slate switches, encoder (re)starts and init segments, to read a failure against.
    onLog: (l) => {
      const msg = (JSON.parse(l) as { msg?: string }).msg ?? '';
      if (/^(slateTick|endSlate|EncoderBin|pushVideo)\(\)/.test(msg)) srvLog.push(`${Date.now()} ms: ${msg}`);
    },
  });
  const ctx = await launchChromium(t);
  await ctx.route(`${srv.baseUrl}/slate.html`, (r) => r.fulfill({ body: PAGE, contentType: 'text/html' }));
  await ctx.route(`${srv.baseUrl}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/slate.html`);
  await page.evaluate(() => (window as unknown as SlatePage).startSource(256, false));

  // 1. A viewer before any publish: the plain slate, and no processor for it.
  t.equal(await page.evaluate((u) => (window as unknown as SlatePage).playWhep(u), srv.whepUrl), 201);
  const hlsUrl = `${srv.baseUrl}/hls/${PLAYBACK_ID}/index.m3u8`;
  // The playlist exists once the slate's first key frame is packaged (bounded poll, no sleep as sync).
  for (let i = 0; (await fetch(hlsUrl)).status !== 200; i++) {
    if (i > 200) throw new Error('the slate never reached the HLS playlist');
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.evaluate((u) => (window as unknown as SlatePage).playHls(u), hlsUrl);
  // Our own output, read as it is served: every complete segment, fetched once (bounded: 600 polls).
  const servedHls = new SegmentCollector(hlsUrl);
  const served = servedHls.segments;
  let serving = true;
  const collected = (async () => {
    for (let i = 0; serving && i < 600; i++) {
      await servedHls.poll();
      await new Promise((r) => setTimeout(r, 200)); // a player's polling pace
    }
  })();
  await bothSee(page, 'plain', 5, 60_000);
  let st = srv.node.status(STREAM_ID);
  t.equal(st?.output, 'slate', 'status: the output is on slate before the first publish');
  t.equal(st?.slate.source, 'plain');
  t.equal(st?.processor, 'none', 'the slate builds no processor');
  t.equal(st?.state, 'idle');

  // 2. The publisher arrives: live frames, in both players, with no new session.
  await page.evaluate(() => (window as unknown as SlatePage).resetCounts());
  t.equal(await page.evaluate(([u, k]) => (window as unknown as SlatePage).publish(u, k), [srv.whipUrl, STREAM_KEY] as const), 201);
  await bothSee(page, 'live', 15, 60_000);
  t.equal(srv.node.status(STREAM_ID)?.output, 'live');
  await rtmp.notes.waitFor('publish', 1, 30_000);

  // 3. The publisher leaves: the last frame greyed.
  await page.evaluate(() => (window as unknown as SlatePage).resetCounts());
  t.equal(await page.evaluate((k) => (window as unknown as SlatePage).unpublish(k), STREAM_KEY), 200);
  await bothSee(page, 'grey', 5, 60_000);
  st = srv.node.status(STREAM_ID);
  t.equal(st?.state, 'idle', 'no publisher');
  t.equal(st?.output, 'slate');
  t.equal(st?.slate.source, 'last_frame', 'the slate is the last live frame, greyed');
  t.ok((st?.slate.framesOut ?? 0) > 0, 'slate frames went through the one encoder');
  t.not(rtmpOf(srv.node, STREAM_ID), null, 'the RTMP push outlives the publisher');

  // 4. The publisher comes back: live again, same sessions.
  await page.evaluate(() => (window as unknown as SlatePage).resetCounts());
  t.equal(await page.evaluate(([u, k]) => (window as unknown as SlatePage).publish(u, k), [srv.whipUrl, STREAM_KEY] as const), 201);
  await bothSee(page, 'live', 15, 60_000);
  t.equal(srv.node.status(STREAM_ID)?.output, 'live');
  t.equal(srv.node.status(STREAM_ID)?.slate.active, false);

  const p = await page.evaluate(() => {
    const w = window as unknown as SlatePage;
    return { hlsLog: w.hlsLog, runs: w.runs, whepPosts: w.whepPosts, pcStates: w.pcStates, hlsErrors: w.hlsErrors, manifestLoads: w.manifestLoads };
  });
  t.comment(`WHEP runs: ${JSON.stringify(p.runs.w)}`);
  t.comment(`hls.js runs: ${JSON.stringify(p.runs.h)}; errors: ${p.hlsErrors.join(', ') || 'none'}`);
  t.same(phases(p.runs.w, 3), ['plain', 'live', 'grey', 'live'], 'WHEP viewer: plain slate, live, greyed slate, live');
  const hlsOk = t.same(phases(p.runs.h, 3), ['plain', 'live', 'grey', 'live'], 'hls.js: plain slate, live, greyed slate, live');
  // The media timeline has no hole at the switches (a new encoder size, the publisher leaving): a
  // hole stalled hls.js for up to 4 s until it skipped it. Skipping to the buffer's start is not one,
  // nor is a skip within 3 s after hls.js ran out of buffer, the served timeline being whole (above):
  // when the node stalls (a loaded machine) the low-latency player falls behind the live edge and
  // may load on from a later part, a gap of its own making (seen once: buffered to 3.601 s, the
  // next part it loaded from 3.666 s).
  serving = false;
  await collected;
  const msns = [...served.keys()].sort((a, b) => a - b);
  t.ok(msns.length >= 6 && msns.every((m, i) => i === 0 || m === (msns[i - 1] as number) + 1), `served segments ${msns[0]}–${msns.at(-1)} read, none missed`);
  const gaps = (track: number, unit: number, tolerance: number) => {
    const spans = msns.flatMap((m) => trackSpans(served.get(m) as Buffer, track));
    return spans.slice(1).map((x, i) => (x.start - (spans[i] as { end: number }).end) / unit).filter((d) => Math.abs(d) > tolerance);
  };
  t.same(gaps(1, 90, 0), [], 'the served video timeline has no hole (ms) across the switches');
  t.same(gaps(2, 48, 21.4), [], 'nor the audio (within one AAC frame)');
  const at = (l: string) => Number(/^(\d+) ms:/.exec(l)?.[1] ?? NaN);
  const starved = p.hlsLog.filter((l) => /Playback stalling at .* due to low buffer/.test(l)).map(at);
  const skips = p.hlsLog.filter((l) => /skipping hole, adjusting currentTime from (?!0 )|after video hole/.test(l));
  const holes = skips.filter((l) => !starved.some((s) => at(l) >= s && at(l) - s <= 3000));
  if (skips.length > holes.length) t.comment(`hls.js skipped ${skips.length - holes.length} gap(s) after running out of buffer (the node was slow): ${skips.join('; ')}`);
  const holesOk = t.same(holes, [], 'hls.js never skipped a hole in its buffer after playback began, but after running out of buffer');
  if (!hlsOk || !holesOk) t.comment(`hls.js:\n${p.hlsLog.join('\n')}\nnode:\n${srvLog.join('\n')}`);
  t.equal(p.whepPosts, 1, 'one WHEP session');
  t.same(p.pcStates.filter((s) => s !== 'connecting' && s !== 'connected'), [], 'the viewer connection never failed or closed');
  t.equal(p.manifestLoads, 1, 'hls.js loaded its playlist once (no reload of the source)');
  t.same(p.hlsErrors.filter((e) => e.endsWith(':fatal')), [], 'no fatal hls.js error');
  t.equal(rtmp.notes.events.filter((e) => e.kind === 'publish').length, 1, 'nginx-rtmp saw one publish across the reconnect');
  t.equal(rtmp.notes.events.filter((e) => e.kind === 'record_done').length, 0, 'and no end of it');
  t.equal(rtmpOf(srv.node, STREAM_ID)?.reconnects, 0, 'the push never reconnected');
});
