/**
 * How many streams and viewers one media node carries (`npm run bench -- capacity`).
 *
 * A real `reverie serve` (defaults; its capacity raised so that the bench, not the limit, finds
 * the ceiling) on loopback. OBS-like publishers (libdatachannel, 512² H.264 at 30 fps ≈ 1.5 Mb/s,
 * processors only) are added in steps; at each step the node's CPU (/proc, all its threads) and
 * every stream's output fps are measured over a window, and a Chromium viewer of stream 1 reads
 * the stamped counter back for glass-to-glass latency. The ramp stops when a stream's output falls
 * below 28 fps or glass-to-glass p95 doubles against the first step. Then receive-only WHEP
 * viewers (libdatachannel, no decoding, each from its own loopback address) are added to one
 * stream in steps, and the node's CPU per added viewer is the slope; the Chromium viewer stays
 * on, so each step also shows what a real browser still gets (its decoded fps and Mb/s).
 *
 *   npm run bench -- capacity [--steps 1,2,4,6,8,10,12,16,20,24] [--viewers 0,25,50,90] [--seconds 8]
 */
import { availableParallelism } from 'node:os';
import { createServer } from 'node:http';
import { freePort } from '../test/helpers/net.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { startServerProcess } from '../test/helpers/serverProcess.ts';
import { VIEWER_PAGE } from './live/stampedViewer.ts';
import { percentile, printTable, procCpuSeconds, progress, summarize, writeResult, type Row } from './lib.ts';


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU seconds (user + system, all threads) of a process so far. */

/** Least-squares slope of y over x. */
function slope(xs: number[], ys: number[]): number {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += ((xs[i] as number) - mx) * ((ys[i] as number) - my);
    den += ((xs[i] as number) - mx) ** 2;
  }
  return den === 0 ? Number.NaN : num / den;
}

export default async function capacity(args: Map<string, string>): Promise<void> {
  const steps = (args.get('steps') ?? '1,2,4,6,8,10,12,16,20,24,28').split(',').map(Number);
  const viewerSteps = (args.get('viewers') ?? '0,25,50,90').split(',').map(Number);
  const seconds = Number(args.get('seconds') ?? 8);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  try {
    const port = await freePort();
    const server = await startServerProcess(t, { env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', MEDIA_CAPACITY: '200' } });
    const pid = server.child.pid as number;
    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const SOURCE_FRAMES = 600; // a 20 s loop at 30 fps: counters repeat every LOOP_MS
    const LOOP_MS = (SOURCE_FRAMES / 30) * 1000;
    const source = await stampedH264({ size: 512, frames: SOURCE_FRAMES });
    const page = createServer((_q, r) => r.writeHead(200, { 'content-type': 'text/html' }).end(VIEWER_PAGE));
    await new Promise<void>((r) => page.listen(0, '127.0.0.1', r));
    t.teardown(() => new Promise((r) => page.close(r)));
    const ctx = await launchChromium(t, { fakeMedia: false });
    const viewer = await ctx.newPage();
    await viewer.goto(`http://127.0.0.1:${(page.address() as { port: number }).port}/`);

    const streams: { id: string; publisher: string; playback: string }[] = [];
    const addStream = async () => {
      const i = streams.length;
      const r = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: `capacity ${i}`, skip_diffusion: true } });
      if (r.status !== 201) throw new Error(`create → ${r.status} ${JSON.stringify(r.body)}`);
      const s = r.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
      const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source, httpFrom: `127.0.1.${(i % 250) + 1}` });
      if (p.status !== 201) throw new Error(`publish → ${p.status} ${p.body}`);
      streams.push({ id: s.id, publisher: p.id, playback: s.output_stream_url });
    };
    const fps = async (id: string) => ((await server.api('GET', `/v1/streams/${id}/status`)).body as { data: { inference_status: { output_fps: number } } }).data.inference_status.output_fps;

    // ── streams
    const rows: Row[] = [];
    const points: { streams: number; cores: number; g2g: ReturnType<typeof summarize>; minFps: number }[] = [];
    let baseP95: number | null = null;
    let ceiling: number | null = null;
    const bar = progress('streams', steps.length);
    for (const target of steps) {
      while (streams.length < target) await addStream();
      if (streams.length === target && points.length === 0) {
        const played = await viewer.evaluate((u) => (window as unknown as { play(u: string): Promise<number> }).play(u), streams[0]?.playback ?? '');
        if (played !== 201) throw new Error(`WHEP → ${played}`);
      }
      await sleep(4000); // key frames, warm-up
      await viewer.evaluate(() => (window as unknown as { takeRecv(): unknown }).takeRecv());
      const fpsSamples: number[][] = streams.map(() => []);
      const c0 = procCpuSeconds(pid);
      const t0 = performance.now();
      for (let k = 0; k < seconds; k++) {
        await sleep(1000);
        const all = await Promise.all(streams.map((s) => fps(s.id)));
        all.forEach((v, i) => fpsSamples[i]?.push(v));
      }
      const cores = (procCpuSeconds(pid) - c0) / ((performance.now() - t0) / 1000);
      const recv = await viewer.evaluate(() => (window as unknown as { takeRecv(): [number, number][] }).takeRecv());
      const sent = await pubs.sentTimes(streams[0]?.publisher ?? '');
      // `sent` holds each counter's latest send; a frame shown before it was sent one loop earlier.
      const g2g = summarize(recv.flatMap(([n, at]) => (sent.has(n) ? [((at - (sent.get(n) as number)) % LOOP_MS + LOOP_MS) % LOOP_MS] : [])));
      const medians = fpsSamples.map((xs) => percentile(xs, 50));
      const minFps = Math.min(...medians);
      baseP95 ??= g2g.p95;
      points.push({ streams: target, cores, g2g, minFps });
      rows.push({ streams: target, 'node cores': cores, 'cores/stream': cores / target, 'min out fps (median)': minFps, 'g2g p50 ms': g2g.p50, 'g2g p95 ms': g2g.p95, 'p95 vs first': g2g.p95 / baseP95 });
      bar.tick();
      if (minFps < 28 || g2g.p95 > 2 * baseP95) {
        ceiling = target;
        break;
      }
    }
    bar.done();
    const good = points.filter((p) => p.minFps >= 28 && p.g2g.p95 <= 2 * (baseP95 ?? Infinity));
    const perStream = slope(points.map((p) => p.streams), points.map((p) => p.cores));
    printTable(`streams on one node (512² H.264 30 fps, processors only, ${availableParallelism()} cores, publishers on the same machine)`, rows);

    // ── viewers on one stream, the others stopped
    for (const s of streams.slice(1)) await pubs.stop(s.publisher);
    type Inbound = { bytes: number; frames: number };
    const inbound = () => viewer.evaluate(() => (window as unknown as { inbound(): Promise<Inbound> }).inbound());
    const vrows: Row[] = [];
    const vpoints: { viewers: number; cores: number }[] = [];
    const vids: string[] = [];
    const vbar = progress('viewers', viewerSteps.length);
    for (const target of viewerSteps) {
      while (vids.length < target) {
        const v = await pubs.play({ url: streams[0]?.playback ?? '', httpFrom: `127.0.2.${(vids.length % 250) + 1}` });
        if (v.status !== 201) throw new Error(`viewer → ${v.status} ${v.body}`);
        await pubs.waitState(v.id, 'connected', 15_000);
        vids.push(v.id);
      }
      await sleep(3000);
      const in0 = await inbound();
      const c0 = procCpuSeconds(pid);
      const t0 = performance.now();
      await sleep(seconds * 1000);
      const elapsed = (performance.now() - t0) / 1000;
      const cores = (procCpuSeconds(pid) - c0) / elapsed;
      const in1 = await inbound();
      vpoints.push({ viewers: target, cores });
      vrows.push({
        viewers: target,
        'node cores': cores,
        'per viewer ms/s': target > 0 ? ((cores - (vpoints[0]?.cores ?? 0)) / target) * 1000 : null,
        'browser Mb/s': ((in1.bytes - in0.bytes) * 8) / elapsed / 1e6,
        'browser fps': (in1.frames - in0.frames) / elapsed,
      });
      vbar.tick();
    }
    vbar.done();
    const perViewer = slope(vpoints.map((p) => p.viewers), vpoints.map((p) => p.cores));
    printTable('WHEP viewers on one stream (receive-only libdatachannel viewers, no decoding)', vrows);
    const summary: Row[] = [
      { measure: 'node cores per added stream (slope)', value: perStream },
      { measure: 'streams per core', value: 1 / perStream },
      { measure: 'streams held at ≥ 28 fps, g2g p95 ≤ 2× (this machine, publishers beside)', value: good.at(-1)?.streams ?? 0 },
      { measure: 'ramp stopped at', value: ceiling ?? 'not reached' },
      { measure: 'node ms of CPU per second per added viewer', value: perViewer * 1000 },
      { measure: 'viewers per core', value: 1 / perViewer },
    ];
    printTable('capacity', summary);
    console.log(`\nwrote ${writeResult('capacity', { cores: availableParallelism(), seconds, streams: points, viewers: vpoints, perStream, perViewer, ceiling })}`);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}
