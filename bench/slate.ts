/**
 * The slate (decision 0011), two parts:
 *
 * - `cpu`: node CPU (this process: JS thread and every GStreamer thread, from process.cpuUsage) of
 *   streams whose outputs are on slate, watched over LL-HLS (a playlist request every 5 s keeps a
 *   stream "watched", as a player does) with no publisher. Baseline in the same run: the same
 *   streams held unwatched (no slate: nothing encoded). Real MediaNode, real x264.
 * - `switch`: the switch from the slate to live as a waiting viewer sees it. Per switch, a new
 *   stream: a Chromium WHEP viewer joins before its publisher, an OBS-like publisher
 *   (libdatachannel, stamped H.264) starts, and the page logs every frame's arrival: the switch gap
 *   (last slate frame → first live frame), and the largest gap within 5 frames either side of the
 *   first live frame (what test/media/stream/SlateSwitch.e2e.test.ts bounds). Baseline in the same run: the
 *   gaps between the slate's own frames before the publish (its cadence).
 *
 *   npm run bench -- slate [--part cpu,switch] [--streams 1,4] [--size 512] [--seconds 20]
 *                          [--switches 5] [--slate-fps 10,30]
 */
import Fastify from 'fastify';
import pino from 'pino';
import { MediaNode, registerMediaRoutes } from '../media/index.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { until } from '../test/helpers/until.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from '../test/media/harness.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

async function cpuOver(ms: number, during: () => Promise<void>): Promise<number> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await during();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000 / (performance.now() - t0); // cores
}

export default async function slate(args: Map<string, string>): Promise<void> {
  const parts = (args.get('part') ?? 'cpu,switch').split(',');
  if (parts.includes('cpu')) await slateCpu(args);
  if (parts.includes('switch')) await slateSwitch(args);
}

async function slateCpu(args: Map<string, string>): Promise<void> {
  const counts = (args.get('streams') ?? '1,4').split(',').map(Number);
  const size = Number(args.get('size') ?? 512);
  const seconds = Number(args.get('seconds') ?? 20);
  const app = Fastify({ logger: false });
  const node = new MediaNode({
    publicUrl: 'http://127.0.0.1',
    iceAddresses: ['127.0.0.1'],
    logger: pino({ level: 'silent' }),
    // The slate never builds a processor: one that is asked for fails the bench.
    createProcessor: async () => {
      throw new Error('the slate built a processor');
    },
    resolveIngest: async () => null,
    resolvePlayback: async (playbackId) => ({ streamId: `str_${playbackId}` }),
  });
  registerMediaRoutes(app, node);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as { port: number }).port;
  const rows: Row[] = [];
  try {
    for (const n of counts) {
      const ids = Array.from({ length: n }, (_, i) => `b${n}_${i}`);
      for (const id of ids) node.createStream(`str_${id}`, { width: size, height: size });
      // Baseline: held, nobody watching → no slate.
      const idle = await cpuOver(seconds * 1000, () => new Promise((r) => setTimeout(r, seconds * 1000)));
      // Slate: each stream's playlist asked every 5 s (what keeps an HLS player's stream watched).
      const ask = () => Promise.all(ids.map((id) => fetch(`http://127.0.0.1:${port}/hls/${id}/index.m3u8`).then((r) => r.arrayBuffer()).catch(() => undefined)));
      await ask();
      await new Promise((r) => setTimeout(r, 3000)); // warm-up: encoders built, first key frames out
      const timer = setInterval(() => void ask(), 5000);
      const on = await cpuOver(seconds * 1000, () => new Promise((r) => setTimeout(r, seconds * 1000)));
      clearInterval(timer);
      const frames = ids.map((id) => node.status(`str_${id}`)?.slate.framesOut ?? 0);
      const outputs = ids.map((id) => node.status(`str_${id}`)?.output);
      rows.push({
        streams: n,
        size: `${size}²`,
        'idle CPU (% core)': +(idle * 100).toFixed(2),
        'slate CPU (% core)': +(on * 100).toFixed(2),
        'slate per stream (% core)': +(((on - idle) * 100) / n).toFixed(2),
        'slate frames/s per stream': +(frames.reduce((a, b) => a + b, 0) / n / (seconds + 3)).toFixed(1),
        'all on slate': outputs.every((o) => o === 'slate'),
      });
      for (const id of ids) node.endStream(`str_${id}`);
    }
  } finally {
    node.close();
    await app.close();
  }
  printTable('slate: node CPU of slate-only streams (HLS-watched, no publisher) vs the same streams unwatched', rows);
  console.log(`wrote ${writeResult('slate', { size, seconds, rows })}`);
}

/** Frames either side of the first live frame whose gaps count as the switch (as test/media/stream/SlateSwitch.e2e.test.ts). */
const AROUND = 5;
const OUTPUT_FPS = 30;

async function slateSwitch(args: Map<string, string>): Promise<void> {
  const switches = Number(args.get('switches') ?? 5);
  const slateFpsList = (args.get('slate-fps') ?? '10,30').split(',').map(Number);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => void cleanups.push(fn) };
  const rows: Row[] = [];
  const raw: Record<string, { switchGaps: number[]; windowGaps: number[]; slateGaps: number[] }> = {};
  try {
    const ctx = await launchChromium(t, { fakeMedia: false });
    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const source = await stampedH264({ size: 256, frames: 150 });
    for (const slateFps of slateFpsList) {
      // One node per row; the viewer makes each stream at the default 512², its publisher brings 256².
      const srv = await startMediaServer(t, { params: { width: 256, height: 256 }, settings: { outputFps: OUTPUT_FPS, slateFps } });
      const switchGaps: number[] = [];
      const windowGaps: number[] = [];
      const slateGaps: number[] = [];
      for (let i = 0; i < switches; i++) {
        const page = await ctx.newPage();
        await page.goto(`${srv.baseUrl}/peer.html`);
        await page.evaluate(() => (window as unknown as Window & PeerPage).trackFrames());
        await page.evaluate((url) => (window as unknown as Window & PeerPage).play({ url }), srv.whepUrl.replace('play_test', `play_test_sw${i}`));
        await page.evaluate((n) => (window as unknown as Window & PeerPage).waitFrames(n, 30_000), slateFps * 2);
        const p = await pubs.publish({ url: srv.whipUrl.replace(STREAM_ID, `${STREAM_ID}_sw${i}`), token: STREAM_KEY, source });
        if (p.status !== 201) throw new Error(`publish ${i}: ${p.status} ${p.body}`);
        const log = await until(
          'the viewer plays the publisher',
          () => page.evaluate(() => (window as unknown as Window & PeerPage).frameLog ?? []),
          (l) => l.filter((f) => f[1]).length >= 2 * AROUND,
          60_000,
        );
        const first = log.findIndex((f) => f[1]);
        const gaps = log.slice(1).map((f, k) => f[0] - log[k]![0]);
        // Gap k lies between frames k and k+1: the switch window spans frames first-AROUND … first+AROUND.
        switchGaps.push(gaps[first - 1] ?? Number.NaN);
        windowGaps.push(Math.max(...gaps.slice(Math.max(0, first - AROUND), first + AROUND)));
        // The slate's cadence, away from the switch and from the player's start.
        slateGaps.push(...gaps.slice(2, Math.max(2, first - 2 * AROUND)));
        await pubs.stop(p.id);
        await page.close();
        srv.node.endStream(`${STREAM_ID}_sw${i}`);
      }
      raw[String(slateFps)] = { switchGaps, windowGaps, slateGaps };
      const sw = summarize(switchGaps);
      const win = summarize(windowGaps);
      const sl = summarize(slateGaps);
      rows.push({
        'slate fps': slateFps,
        switches: sw.n,
        'switch gap p50 (ms)': Math.round(sw.p50),
        'switch gap p95 (ms)': Math.round(sw.p95),
        'switch gap max (ms)': Math.round(sw.max),
        [`largest gap ±${AROUND} frames p50 (ms)`]: Math.round(win.p50),
        [`largest gap ±${AROUND} frames max (ms)`]: Math.round(win.max),
        'slate gap p50 (ms)': Math.round(sl.p50),
        'slate gap p95 (ms)': Math.round(sl.p95),
        'switch p50 / slate p50': +(sw.p50 / sl.p50).toFixed(2),
        'switch p50 / output interval': +(sw.p50 / (1000 / OUTPUT_FPS)).toFixed(2),
      });
    }
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
  printTable(`slate → live at a waiting WHEP viewer (frame arrival): the switch gap and the largest gap ±${AROUND} frames around it, vs the slate's own gaps`, rows);
  console.log(`wrote ${writeResult('slate-switch', { switches, slateFpsList, outputFps: OUTPUT_FPS, rows, raw })}`);
}
