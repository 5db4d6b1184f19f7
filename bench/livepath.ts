/**
 * The whole live path of this checkout against a baseline commit's, side by side in one run
 * (`npm run bench -- livepath`): what a change to the media path (a refactor such as the stream
 * hub, decision 0028) costs in node CPU per stream, node CPU per WHEP viewer and glass-to-glass
 * latency, measured where both sides share the same machine load.
 *
 * Two `reverie serve` processes run at once on loopback: this checkout, and the baseline commit's
 * tree (`git archive` into bench/results/.livepath-<rev>/, with this checkout's node_modules and
 * GStreamer addon; the addon's source must not differ). Each gets `--streams` OBS-like publishers
 * (libdatachannel, 512² stamped H.264 at 30 fps, processors only) and a Chromium viewer of its
 * first stream, which reads the stamped counter back for glass-to-glass latency. Then `--rounds`
 * windows of `--seconds` measure both nodes' CPU (/proc, every thread) and each stream's output
 * fps, first with the streams alone, then with `--viewers` receive-only WHEP viewers
 * (libdatachannel, each from its own loopback address) on each side's first stream. Ratios are
 * this checkout over the baseline, per window, then the median and p95 over the windows.
 *
 *   npm run bench -- livepath [--baseline <rev>] [--streams 2] [--viewers 40] [--seconds 6] [--rounds 5] [--swap]
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { launchChromium } from '../test/helpers/chromium.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { freePort } from '../test/helpers/net.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { startServerProcess, type ServerProcess } from '../test/helpers/serverProcess.ts';
import { VIEWER_PAGE } from './live/stampedViewer.ts';
import { percentile, printTable, procCpuSeconds, progress, RESULTS_DIR, summarize, writeResult, type Row } from './lib.ts';

/** main before the stream hub (decision 0028). */
const DEFAULT_BASELINE = '77e1ece';
const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** The GStreamer addon's sources: the baseline borrows this checkout's build, so they must match. */
const ADDON_SOURCES = ['media/gst/reverie_gst.c', 'media/gst/binding.gyp'];
const SIDES = ['baseline', 'current'] as const;
type Side = (typeof SIDES)[number];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The baseline commit's tree beside this checkout, run with our node_modules and addon build. */
function baselineTree(rev: string): { rev: string; root: string } {
  const full = execFileSync('git', ['rev-parse', '--verify', `${rev}^{commit}`], { cwd: ROOT, encoding: 'utf8' }).trim();
  const changed = execFileSync('git', ['diff', '--name-only', full, '--', ...ADDON_SOURCES], { cwd: ROOT, encoding: 'utf8' }).trim();
  if (changed) throw new Error(`the GStreamer addon differs from ${rev} (${changed}): the baseline cannot borrow this build`);
  const root = join(RESULTS_DIR, `.livepath-${full.slice(0, 12)}`);
  if (!existsSync(join(root, 'control', 'main.ts'))) {
    mkdirSync(root, { recursive: true });
    const tar = execFileSync('git', ['archive', full], { cwd: ROOT, maxBuffer: 256 << 20 });
    execFileSync('tar', ['-x', '-C', root], { input: tar });
    symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'));
    symlinkSync(join(ROOT, 'media', 'gst', 'build'), join(root, 'media', 'gst', 'build'));
  }
  return { rev: full, root };
}

interface SideState {
  server: ServerProcess;
  pid: number;
  streams: { id: string; publisher: string; playback: string }[];
  page: Page;
  viewers: string[];
}

export default async function livepath(args: Map<string, string>): Promise<void> {
  const streamCount = Number(args.get('streams') ?? 2);
  const viewerCount = Number(args.get('viewers') ?? 40);
  const seconds = Number(args.get('seconds') ?? 6);
  const rounds = Number(args.get('rounds') ?? 5);
  const base = baselineTree(args.get('baseline') ?? DEFAULT_BASELINE);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  try {
    const start = async (root: string | undefined) => {
      const port = await freePort();
      return startServerProcess(t, { ...(root ? { root } : {}), env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', MEDIA_CAPACITY: '100' } });
    };
    const servers = { baseline: await start(base.root), current: await start(undefined) };
    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const SOURCE_FRAMES = 600; // a 20 s loop at 30 fps: counters repeat every LOOP_MS
    const LOOP_MS = (SOURCE_FRAMES / 30) * 1000;
    const source = await stampedH264({ size: 512, frames: SOURCE_FRAMES });
    const http = createServer((_q, r) => r.writeHead(200, { 'content-type': 'text/html' }).end(VIEWER_PAGE));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    t.teardown(() => new Promise((r) => http.close(r)));
    const pageUrl = `http://127.0.0.1:${(http.address() as { port: number }).port}/`;

    // Each side's address block: every publisher and viewer its own loopback client address.
    const block: Record<Side, number> = { baseline: 1, current: 2 };
    const sides = {} as Record<Side, SideState>;
    // --swap sets this checkout up first. Each side's glass-to-glass carries a phase fixed when its
    // publisher and encoder start (up to a frame, 33 ms): the same commit on both sides (an A/A run,
    // --baseline HEAD) measured 0.79–0.80 for p50, so compare a change in both orders and beside A/A.
    for (const side of args.has('swap') ? [...SIDES].reverse() : SIDES) {
      const server = servers[side];
      const streams: SideState['streams'] = [];
      for (let i = 0; i < streamCount; i++) {
        const r = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: `livepath ${side} ${i}`, skip_diffusion: true } });
        if (r.status !== 201) throw new Error(`${side}: create → ${r.status} ${JSON.stringify(r.body)}`);
        const s = r.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
        const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source, httpFrom: `127.0.${block[side]}.${i + 1}` });
        if (p.status !== 201) throw new Error(`${side}: publish → ${p.status} ${p.body}`);
        streams.push({ id: s.id, publisher: p.id, playback: s.output_stream_url });
      }
      // A browser per side: a page behind another tab of its browser gets few frame callbacks (23 of 180 in 6 s,
      // measured in the cascade bench), which skewed whichever side was set up first.
      const page = await (await launchChromium(t, { fakeMedia: false })).newPage();
      await page.goto(pageUrl);
      const played = await page.evaluate((u) => (window as unknown as { play(u: string): Promise<number> }).play(u), streams[0]?.playback ?? '');
      if (played !== 201) throw new Error(`${side}: Chromium WHEP → ${played}`);
      sides[side] = { server, pid: server.child.pid as number, streams, page, viewers: [] };
    }

    const fps = async (s: SideState, id: string) =>
      ((await s.server.api('GET', `/v1/streams/${id}/status`)).body as { data: { inference_status: { output_fps: number } } }).data.inference_status.output_fps;
    type Window = { phase: string; round: number; side: Side; cores: number; minFps: number; g2gP50: number; g2gP95: number; frames: number };
    const windows: Window[] = [];
    /** One window on both sides at once. */
    const measure = async (phase: string, round: number) => {
      for (const side of SIDES) await sides[side].page.evaluate(() => (window as unknown as { takeRecv(): unknown }).takeRecv());
      const c0 = Object.fromEntries(SIDES.map((s) => [s, procCpuSeconds(sides[s].pid)])) as Record<Side, number>;
      const t0 = performance.now();
      const fpsSamples: Record<Side, number[][]> = { baseline: [], current: [] };
      for (let k = 0; k < seconds; k++) {
        await sleep(1000);
        for (const side of SIDES) fpsSamples[side].push(await Promise.all(sides[side].streams.map((st) => fps(sides[side], st.id))));
      }
      const wall = (performance.now() - t0) / 1000;
      for (const side of SIDES) {
        const s = sides[side];
        const cores = (procCpuSeconds(s.pid) - c0[side]) / wall;
        const recv = await s.page.evaluate(() => (window as unknown as { takeRecv(): [number, number][] }).takeRecv());
        const sent = await pubs.sentTimes(s.streams[0]?.publisher ?? '');
        // `sent` holds each counter's latest send; a frame shown before it was sent one loop earlier.
        const g2g = summarize(recv.flatMap(([n, at]) => (sent.has(n) ? [(((at - (sent.get(n) as number)) % LOOP_MS) + LOOP_MS) % LOOP_MS] : [])));
        const perStream = s.streams.map((_st, i) => percentile(fpsSamples[side].map((row) => row[i] ?? 0), 50));
        windows.push({ phase, round, side, cores, minFps: Math.min(...perStream), g2gP50: g2g.p50, g2gP95: g2g.p95, frames: recv.length });
      }
    };

    await sleep(5000); // key frames, warm-up
    const bar = progress('windows', rounds * 2);
    for (let r = 0; r < rounds; r++) {
      await measure('streams', r);
      bar.tick();
    }
    for (const side of SIDES) {
      const s = sides[side];
      while (s.viewers.length < viewerCount) {
        const v = await pubs.play({ url: s.streams[0]?.playback ?? '', httpFrom: `127.0.${block[side] + 10}.${(s.viewers.length % 250) + 1}` });
        if (v.status !== 201) throw new Error(`${side}: viewer → ${v.status} ${v.body}`);
        s.viewers.push(v.id);
      }
    }
    for (const side of SIDES) for (const id of sides[side].viewers) await pubs.waitState(id, 'connected', 20_000);
    await sleep(3000);
    for (let r = 0; r < rounds; r++) {
      await measure('viewers', r);
      bar.tick();
    }
    bar.done();

    // Per window, this checkout over the baseline; per-viewer cost from each side's median cores with and without viewers.
    const of = (phase: string, side: Side) => windows.filter((w) => w.phase === phase && w.side === side);
    const rows: Row[] = [];
    for (const phase of ['streams', 'viewers']) {
      for (const side of SIDES) {
        const ws = of(phase, side);
        rows.push({
          phase: phase === 'streams' ? `${streamCount} streams` : `+ ${viewerCount} viewers`,
          side: side === 'baseline' ? `baseline ${base.rev.slice(0, 7)}` : 'this checkout',
          'node cores p50': percentile(ws.map((w) => w.cores), 50),
          'node cores p95': percentile(ws.map((w) => w.cores), 95),
          'min out fps p50': percentile(ws.map((w) => w.minFps), 50),
          'g2g p50 ms': percentile(ws.map((w) => w.g2gP50), 50),
          'g2g p95 ms': percentile(ws.map((w) => w.g2gP95), 50),
        });
      }
    }
    printTable(`live path, both nodes at once (512² H.264 30 fps, processors only, ${rounds} windows of ${seconds} s per phase)`, rows);
    const ratio = (phase: string, key: 'cores' | 'g2gP50' | 'g2gP95') =>
      of(phase, 'current').map((w, i) => w[key] / ((of(phase, 'baseline')[i]?.[key] as number) || Number.NaN));
    const perViewer = (side: Side) =>
      ((percentile(of('viewers', side).map((w) => w.cores), 50) - percentile(of('streams', side).map((w) => w.cores), 50)) / viewerCount) * 1000;
    const ratios: Row[] = [];
    for (const phase of ['streams', 'viewers']) {
      for (const key of ['cores', 'g2gP50', 'g2gP95'] as const) {
        const xs = ratio(phase, key);
        ratios.push({ measure: `${phase}: ${key === 'cores' ? 'node CPU' : key === 'g2gP50' ? 'glass-to-glass p50' : 'glass-to-glass p95'}`, 'current / baseline p50': percentile(xs, 50), 'p95': percentile(xs, 95) });
      }
    }
    ratios.push({ measure: 'CPU per viewer (ms/s), baseline → current', 'current / baseline p50': perViewer('current') / perViewer('baseline'), p95: `${perViewer('baseline').toFixed(2)} → ${perViewer('current').toFixed(2)}` });
    printTable('this checkout / baseline, per window (1.00 = the same)', ratios);
    console.log(`\nwrote ${writeResult('livepath', { baseline: base.rev, swap: args.has('swap'), streams: streamCount, viewers: viewerCount, seconds, rounds, windows, perViewerMs: { baseline: perViewer('baseline'), current: perViewer('current') } })}`);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}
