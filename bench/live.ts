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
 *
 * Against a deployment (any Reverie reachable over HTTP; liveRemote.ts): creates a stream with the
 * API key, publishes the stamped source over WHIP, plays WHEP, prints glass-to-glass beside the
 * direct baseline and the node's per-stage latency from the status API, then deletes the stream.
 *
 *   npm run bench -- live --url https://live.example.com --key <api key> [--seconds 10] [--size 512]
 *     [--codec H264|VP8] [--model stabilityai/sd-turbo] [--params '{"skip_diffusion":false}']
 */
import Fastify from 'fastify';
import pino from 'pino';
import type { Page } from 'playwright-core';
import { ImageChainProcessor, MediaNode, registerMediaRoutes } from '../media/index.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { PAGE } from './live/page.ts';
import { liveRemote } from './live/remote.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';



const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export default async function live(args: Map<string, string>): Promise<void> {
  if (args.has('url')) {
    await liveRemote(args);
    return;
  }
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
    createProcessor: async (params) => new ImageChainProcessor(null, params),
    resolveIngest: async (streamId, token) => (token === 'bench' ? { streamId, params: { width: size, height: size } } : null),
    resolvePlayback: async (id) => ({ streamId: id }),
  });
  registerMediaRoutes(app, node);
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
