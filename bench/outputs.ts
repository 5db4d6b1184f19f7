/**
 * Cost and latency of the HLS and RTMP outputs, against the WHEP-only path in the same run.
 *
 * A Chromium page draws a frame counter (4×4 block barcode) on a canvas at 30 fps and publishes it
 * with the fake microphone over WHIP; a second page plays the output and reads the counter back
 * from each presented frame (latency = present time − draw time, same machine clock).
 *   whep:      HLS off, no RTMP, one WHEP viewer (baseline)
 *   hls:       LL-HLS on (AAC encode + packaging), one hls.js viewer (lowLatencyMode)
 *   hls+rtmp:  as hls, plus an RTMP push to a local nginx-rtmp (ffmpeg child CPU counted)
 *   hls-100:   as hls, with 100 ms parts (HLS_PART_TARGET_MS=100; PART-HOLD-BACK 0.3 s)
 *   hls-100-250: 100 ms parts and PART-HOLD-BACK 0.25 s (HLS_PART_HOLD_BACK_MS=250)
 *
 *   npm run bench -- outputs [--seconds 10] [--size 512] [--phases whep,hls,hls+rtmp,hls-100,hls-100-250]
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import pino from 'pino';
import type { Page } from 'playwright-core';
import { HlsOutput, ImageChainProcessor, MediaNode, PRIMARY_RTMP, RtmpOutputs, registerMediaRoutes } from '../media/index.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { freePort } from '../test/helpers/net.ts';
import { STAMPED_FRAMES_JS } from '../test/helpers/stampedFrames.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

const HLS_JS = readFileSync(createRequire(import.meta.url).resolve('hls.js/dist/hls.min.js'));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const PAGE = `<!doctype html><html><body><canvas id="src"></canvas><video id="v" autoplay muted playsinline></video><canvas id="rd"></canvas>
<script src="/hls.min.js"></script><script>
${STAMPED_FRAMES_JS}
window.publish = async (url) => {
  window.pub?.close();
  const pc = new RTCPeerConnection(); window.pub = pc;
  for (const tr of window.srcStream.getTracks()) pc.addTransceiver(tr, { direction: 'sendonly', streams: [window.srcStream] });
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer bench' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  return res.status;
};
window.stop = () => { window.view?.close(); window.view = null; window.hls?.destroy(); window.hls = null; };
window.playWhep = async (url) => {
  window.stop();
  const pc = new RTCPeerConnection(); window.view = pc; const v = document.getElementById('v');
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.ontrack = (e) => { if (e.track.kind === 'video') { v.srcObject = new MediaStream([e.track]); v.play().catch(() => {}); } };
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
};
window.playHls = (url) => {
  window.stop();
  const v = document.getElementById('v'); v.srcObject = null;
  // As our viewer page (web/watch.js) plays it: hls.js may speed up to 1.5× to reach its target latency.
  const hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5, backBufferLength: 10 }); window.hls = hls; window.stalls = 0;
  hls.on(Hls.Events.ERROR, (_e, d) => { if (d.details === 'bufferStalledError') window.stalls++; });
  // As web/watch.js: further than 0.2 s behind its target latency, hls.js jumps to it.
  hls.on(Hls.Events.LEVEL_UPDATED, () => { if (hls.targetLatency) hls.config.liveMaxLatencyDuration = hls.targetLatency + 0.2; });
  hls.loadSource(url); hls.attachMedia(v); v.play().catch(() => {});
};
readStamps(document.getElementById('v'));
window.takeRecv = () => window.recv.splice(0);
window.stalls = 0;
window.takeStalls = () => { const n = window.stalls; window.stalls = 0; return n; };
window.takeSent = () => [...window.sent.entries()];
</script></body></html>`;

type Win = Window & {
  startSource(s: number, withAudio: boolean): Promise<void>;
  publish(u: string): Promise<number>;
  playWhep(u: string): Promise<void>;
  playHls(u: string): void;
  stop(): void;
  takeRecv(): [number, number][];
  takeStalls(): number;
  takeSent(): [number, number][];
};

/** CPU seconds (user+system) of this process's ffmpeg children, from /proc. */
function childFfmpegCpuS(): number {
  const tick = 100; // USER_HZ on Linux
  let total = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const comm = /\((.*)\)/.exec(stat)?.[1];
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (comm === 'ffmpeg' && Number(rest[1]) === process.pid) total += (Number(rest[11]) + Number(rest[12])) / tick;
    } catch {
      // exited meanwhile
    }
  }
  return total;
}

export default async function outputs(args: Map<string, string>): Promise<void> {
  const seconds = Number(args.get('seconds') ?? 10);
  const size = Number(args.get('size') ?? 512);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  const dir = mkdtempSync(join(tmpdir(), 'rv-bench-outputs-'));
  const rtmpPort = await freePort();
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;\nmaster_process off;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\nload_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\nevents { worker_connections 64; }\nrtmp { server { listen 127.0.0.1:${rtmpPort}; application live { live on; } } }\n`,
  );
  const nginx = spawn('/usr/sbin/nginx', ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
  cleanups.push(() => nginx.kill('SIGKILL'));
  const rows: Row[] = [];
  const result: Record<string, unknown> = { seconds, size };
  try {
    const ctx = await launchChromium(t);
    const wanted = (args.get('phases') ?? 'whep,hls,hls+rtmp,hls-100,hls-100-250').split(',');
    const phases = (
      [
        { name: 'whep', hls: false, rtmp: false, partMs: 200, holdBackMs: null },
        { name: 'hls', hls: true, rtmp: false, partMs: 200, holdBackMs: null },
        { name: 'hls+rtmp', hls: true, rtmp: true, partMs: 200, holdBackMs: null },
        { name: 'hls-100', hls: true, rtmp: false, partMs: 100, holdBackMs: null },
        { name: 'hls-100-250', hls: true, rtmp: false, partMs: 100, holdBackMs: 250 },
      ] as const
    ).filter((p) => wanted.includes(p.name));
    let baseCpu: number | undefined;
    for (const phase of phases) {
      const app = Fastify();
      let baseUrl = '';
      const node = new MediaNode({
        get publicUrl() {
          return baseUrl;
        },
        iceAddresses: ['127.0.0.1'],
        logger: pino({ level: process.env['LOG_LEVEL'] ?? 'silent' }),
        settings: { hlsEnabled: phase.hls, hlsPartTargetMs: phase.partMs, hlsPartHoldBackMs: phase.holdBackMs },
        createProcessor: async (params) => new ImageChainProcessor(null, params),
        resolveIngest: async (streamId, token) =>
          token === 'bench' ? { streamId, params: { width: size, height: size }, outputRtmpUrl: phase.rtmp ? `rtmp://127.0.0.1:${rtmpPort}/live/bench` : undefined } : null,
        resolvePlayback: async (id) => ({ streamId: id }),
      });
      registerMediaRoutes(app, node);
      await app.listen({ host: '127.0.0.1', port: 0 });
      const addr = app.server.address();
      baseUrl = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
      await ctx.route(`${baseUrl}/bench.html`, (r) => r.fulfill({ body: PAGE, contentType: 'text/html' }));
      await ctx.route(`${baseUrl}/hls.min.js`, (r) => r.fulfill({ body: HLS_JS, contentType: 'text/javascript' }));
      const pub: Page = await ctx.newPage();
      await pub.goto(`${baseUrl}/bench.html`);
      await pub.evaluate((s) => (window as unknown as Win).startSource(s, true), size);
      const view: Page = await ctx.newPage();
      await view.goto(`${baseUrl}/bench.html`);
      await view.bringToFront();
      if ((await pub.evaluate((u) => (window as unknown as Win).publish(u), `${baseUrl}/live/bench/whip`)) !== 201) throw new Error('WHIP failed');
      if (phase.hls) await view.evaluate((u) => (window as unknown as Win).playHls(u), `${baseUrl}/hls/bench/index.m3u8`);
      else await view.evaluate((u) => (window as unknown as Win).playWhep(u), `${baseUrl}/live/bench/whep`);
      await sleep(6000); // warm-up: first keyframe, hls.js reaching its live edge
      await view.evaluate(() => (window as unknown as Win).takeRecv());
      await view.evaluate(() => (window as unknown as Win).takeStalls());
      const cpu0 = process.cpuUsage();
      const ff0 = childFfmpegCpuS();
      const t0 = performance.now();
      await sleep(seconds * 1000);
      const wallMs = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      const nodeCpu = ((cpu.user + cpu.system) / 1000 / wallMs) * 100;
      const ffCpu = ((childFfmpegCpuS() - ff0) * 1000 * 100) / wallMs;
      const recv = await view.evaluate(() => (window as unknown as Win).takeRecv());
      const stalls = await view.evaluate(() => (window as unknown as Win).takeStalls());
      const sent = new Map(await pub.evaluate(() => (window as unknown as Win).takeSent()));
      const lat = summarize(recv.flatMap(([n, at]) => (sent.has(n) ? [at - (sent.get(n) as number)] : [])));
      const st = node.status('bench');
      const rtmpPush = () => node.getStream('bench')?.readers.find(RtmpOutputs)?.pushStatus(PRIMARY_RTMP);
      baseCpu ??= nodeCpu + ffCpu;
      result[phase.name] = { stalls, latency: lat, nodeCpu, ffmpegCpu: ffCpu, outputFps: st?.outputFps, hls: node.getStream('bench')?.readers.find(HlsOutput)?.packager.stats(), rtmp: rtmpPush() };
      rows.push({
        outputs: phase.name,
        viewer: phase.hls ? 'hls.js LL' : 'WHEP',
        'latency p50 ms': lat.p50,
        'latency p95 ms': lat.p95,
        'node CPU %': nodeCpu,
        'ffmpeg CPU %': ffCpu,
        'total vs whep': (nodeCpu + ffCpu) / baseCpu,
        'out fps': st?.outputFps ?? 0,
        'hls.js stalls': phase.hls ? stalls : '-',
        rtmp: rtmpPush()?.state ?? '-',
      });
      await view.evaluate(() => (window as unknown as Win).stop());
      await pub.close();
      await view.close();
      node.close();
      await app.close();
    }
    printTable(`outputs (${size}×${size}, ${seconds} s per phase)`, rows);
    writeResult('outputs', result);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
    rmSync(dir, { recursive: true, force: true });
  }
}
