/**
 * Live path latency and fan-out cost on loopback.
 *
 * Glass-to-glass: a Chromium page draws a 16-bit frame counter as a 4×4 grid of black/white blocks
 * into a canvas (size×size, 30 fps), publishes `canvas.captureStream()` over WHIP; a second page
 * plays WHEP and decodes the counter from each presented frame (requestVideoFrameCallback →
 * canvas). Both pages share the machine clock, so latency = present time − draw time.
 * Baseline, same run: the same canvas sent over a direct in-page RTCPeerConnection pair (no node).
 * Node-internal per-stage latency comes from LiveStream's timers (decode, process, encode, node).
 *
 * Fan-out: node CPU (process.cpuUsage) while N viewers play, for each N in --viewers.
 *
 *   npm run bench -- live [--seconds 10] [--size 512] [--viewers 1,25] [--codec VP8|H264]
 */
import Fastify from 'fastify';
import pino from 'pino';
import type { Page } from 'playwright-core';
import { ImageChainProcessor, MediaNode } from '../media/index.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { STAMPED_FRAMES_JS } from '../test/helpers/stampedFrames.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

const PAGE = `<!doctype html><html><body><canvas id="src"></canvas><video id="v" autoplay muted playsinline></video><canvas id="rd"></canvas><script>
${STAMPED_FRAMES_JS}
window.publish = async (url, token, codec) => {
  const pc = new RTCPeerConnection();
  const tr = pc.addTransceiver(window.srcStream.getVideoTracks()[0], { direction: 'sendonly' });
  tr.setCodecPreferences(RTCRtpSender.getCapabilities('video').codecs.filter((c) => c.mimeType === 'video/' + codec && (codec !== 'H264' || /packetization-mode=1/.test(c.sdpFmtpLine || ''))));
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer ' + token }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.viewers = [];
window.play = async (url, attach) => {
  const pc = new RTCPeerConnection(); window.viewers.push(pc);
  pc.addTransceiver('video', { direction: 'recvonly' });
  if (attach) { const v = document.getElementById('v'); pc.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); readStamps(v); }; }
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.closeViewers = () => { for (const pc of window.viewers.splice(0)) pc.close(); };
window.direct = async (codec) => {
  const a = new RTCPeerConnection(), b = new RTCPeerConnection();
  a.onicecandidate = (e) => e.candidate && b.addIceCandidate(e.candidate);
  b.onicecandidate = (e) => e.candidate && a.addIceCandidate(e.candidate);
  const tr = a.addTransceiver(window.srcStream.getVideoTracks()[0], { direction: 'sendonly' });
  tr.setCodecPreferences(RTCRtpSender.getCapabilities('video').codecs.filter((c) => c.mimeType === 'video/' + codec && (codec !== 'H264' || /packetization-mode=1/.test(c.sdpFmtpLine || ''))));
  const v = document.getElementById('v');
  b.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); readStamps(v); };
  await a.setLocalDescription(await a.createOffer()); await b.setRemoteDescription(a.localDescription);
  await b.setLocalDescription(await b.createAnswer()); await a.setRemoteDescription(b.localDescription);
  window.directPcs = [a, b];
};
window.takeRecv = () => window.recv.splice(0);
window.takeSent = () => [...window.sent.entries()];
</script></body></html>`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export default async function live(args: Map<string, string>): Promise<void> {
  const seconds = Number(args.get('seconds') ?? 10);
  const size = Number(args.get('size') ?? 512);
  const codec = (args.get('codec') ?? 'VP8') as 'VP8' | 'H264';
  const viewerCounts = (args.get('viewers') ?? '1').split(',').map(Number);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  const logger = pino({ level: process.env['LOG_LEVEL'] ?? 'silent' });
  const app = Fastify();
  let baseUrl = '';
  const node = new MediaNode({
    get publicUrl() {
      return baseUrl;
    },
    iceAddresses: ['127.0.0.1'],
    logger,
    createProcessor: async (params) => new ImageChainProcessor(null, null, params),
    resolveIngest: async (streamId, token) => (token === 'bench' ? { streamId, params: { width: size, height: size } } : null),
    resolvePlayback: async (id) => ({ streamId: id }),
  });
  node.registerRoutes(app);
  app.get('/bench.html', async (_req, reply) => reply.type('text/html').send(PAGE));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  baseUrl = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  try {
    const ctx = await launchChromium(t, { fakeMedia: false });
    const pub: Page = await ctx.newPage();
    await pub.goto(`${baseUrl}/bench.html`);
    await pub.evaluate((s) => (window as unknown as { startSource(s: number): void }).startSource(s), size);
    const view: Page = await ctx.newPage();
    await view.goto(`${baseUrl}/bench.html`);
    type Win = Window & {
      publish(u: string, tk: string, c: string): Promise<number>;
      play(u: string, attach: boolean): Promise<number>;
      closeViewers(): void;
      direct(c: string): Promise<void>;
      takeLatencies(): number[];
      takeRecv(): [number, number][];
      takeSent(): [number, number][];
    };
    /** Joins the viewer page's (counter, present time) with the publisher page's (counter, draw time). */
    const nodeLatencies = async (): Promise<number[]> => {
      const recv = await view.evaluate(() => (window as unknown as Win).takeRecv());
      const sent = new Map(await pub.evaluate(() => (window as unknown as Win).takeSent()));
      return recv.flatMap(([n, at]) => (sent.has(n) ? [at - (sent.get(n) as number)] : []));
    };

    // Baseline: direct browser → browser, same canvas source, same codec. The measuring page must be
    // in front: Chromium stops presenting video frames (requestVideoFrameCallback) in background tabs.
    await pub.bringToFront();
    await pub.evaluate((c) => (window as unknown as Win).direct(c), codec);
    await sleep(3000); // warm-up: BWE ramp, first keyframe
    await pub.evaluate(() => (window as unknown as Win).takeLatencies());
    await sleep(seconds * 1000);
    const direct = summarize(await pub.evaluate(() => (window as unknown as Win).takeLatencies()));
    await pub.evaluate(() => {
      for (const pc of (window as unknown as { directPcs: RTCPeerConnection[] }).directPcs) pc.close();
    });

    // Through the node.
    await view.bringToFront();
    const status = await pub.evaluate(([u, c]) => (window as unknown as Win).publish(u, 'bench', c), [`${baseUrl}/live/bench/whip`, codec] as const);
    if (status !== 201) throw new Error(`WHIP POST → ${status}`);
    const rows: Row[] = [];
    const result: Record<string, unknown> = { size, codec, seconds, direct };
    let baseCpu: number | undefined;
    for (const n of viewerCounts) {
      await view.evaluate(() => (window as unknown as Win).closeViewers());
      for (let i = 0; i < n; i++) await view.evaluate(([u, a]) => (window as unknown as Win).play(u, a), [`${baseUrl}/live/bench/whep`, i === 0] as const);
      await sleep(3000);
      await view.evaluate(() => (window as unknown as Win).takeRecv());
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await sleep(seconds * 1000);
      const cpu = process.cpuUsage(cpu0);
      const cpuPct = ((cpu.user + cpu.system) / 1000 / (performance.now() - t0)) * 100;
      baseCpu ??= cpuPct;
      const g2g = summarize(await nodeLatencies());
      const st = node.status('bench');
      const stages = node.getStream('bench')?.latencySamples();
      const s = (xs: readonly number[] | undefined) => summarize(xs ?? []);
      const stage = { decode: s(stages?.decode), process: s(stages?.process), encode: s(stages?.encode), node: s(stages?.node) };
      result[`viewers_${n}`] = { g2g, stage, cpuPct, outputFps: st?.outputFps, inputFps: st?.inputFps };
      rows.push({
        viewers: n,
        'g2g p50 ms': g2g.p50,
        'g2g p95 ms': g2g.p95,
        'direct p50 ms': direct.p50,
        'g2g/direct p50': g2g.p50 / direct.p50,
        'node p50 ms': stage.node.p50,
        'node p95 ms': stage.node.p95,
        'decode p50': stage.decode.p50,
        'process p50': stage.process.p50,
        'encode p50': stage.encode.p50,
        'out fps': st?.outputFps ?? 0,
        'node CPU %': cpuPct,
        'CPU vs 1st': cpuPct / baseCpu,
        frames: g2g.n,
      });
    }
    printTable(`live path, ${size}x${size} ${codec} → x264 → WHEP, loopback (${seconds} s per row)`, rows);
    console.log(`\nwrote ${writeResult('live', result)}`);
  } finally {
    node.close();
    await app.close();
    for (const fn of cleanups.reverse()) await fn();
  }
}
