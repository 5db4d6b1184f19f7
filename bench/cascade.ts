/**
 * Origin → edge cascade (decision 0030), `npm run bench -- cascade`: what relaying a stream
 * through an edge costs a viewer and the nodes, measured side by side in one run.
 *
 * A scale-out deployment on loopback: redis-server, an `api` process and three `media` processes
 * (`reverie serve --roles …`). An OBS-like publisher (libdatachannel, 512² stamped H.264 at 30 fps,
 * processors only) publishes to the origin. Two Chromium viewers read the stamped counter back
 * from every presented frame at once: one plays from the origin, the other from an edge that pulls
 * the stream from the origin. Per window, glass-to-glass p50/p95 of both: the edge's added latency
 * (target ≤ one frame interval, 33 ms). Then `--viewers` receive-only viewers (libdatachannel,
 * each from its own loopback address) join through the api, which keeps `--share` of them on the
 * origin and places the rest on the edges (each carries `--edge-cap` at most): viewers and CPU per
 * node (/proc, every thread of each process), and the marginal CPU per viewer on an edge.
 *
 * The alternative transport between nodes, RTP forwarded over the coordination Redis, is measured
 * beside it: the stream's packets (1,200-byte RTP at the rate the publisher sends) published on a
 * Redis channel and received by a subscriber, one-way latency p50/p95 and redis-server CPU.
 *
 *   npm run bench -- cascade [--viewers 60] [--share 20] [--edge-cap 25] [--seconds 6] [--rounds 5]
 */
import { createServer } from 'node:http';
import { Redis } from 'ioredis';
import type { Page } from 'playwright-core';
import type { Test } from 'tap';
import { Cluster, type Proc } from '../test/scaleout/cluster.ts';
import { launchChromium } from '../test/helpers/chromium.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { ObsPublishers } from '../test/helpers/obsPublisher.ts';
import { VIEWER_PAGE } from './live/stampedViewer.ts';
import { percentile, printTable, procCpuSeconds, progress, summarize, writeResult, type Row } from './lib.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** ms per frame at the publisher's 30 fps: the edge's budget. */
const FRAME_MS = 1000 / 30;

export default async function cascade(args: Map<string, string>): Promise<void> {
  const viewerCount = Number(args.get('viewers') ?? 60);
  const share = Number(args.get('share') ?? 20);
  const edgeCap = Number(args.get('edge-cap') ?? 25);
  const seconds = Number(args.get('seconds') ?? 6);
  const rounds = Number(args.get('rounds') ?? 5);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) } as unknown as Test;
  try {
    const c = await Cluster.start(t);
    const origin = await c.spawn('origin', 'media');
    await c.until('the origin registered', async () => (await c.store.nodes.list('media')).length === 1);
    const api = await c.spawn('api', 'api', { CASCADE_ORIGIN_VIEWERS: String(share) });
    const created = await c.api(api, 'POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'cascade', skip_diffusion: true } });
    if (created.status !== 201) throw new Error(`create → ${created.status} ${JSON.stringify(created.body)}`);
    const stream = created.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string; output_playback_id: string };
    // Edges send what reaches them directly to an edge (share 0), so the edge viewer is relayed.
    const edgeEnv = { WHEP_VIEWERS_PER_NODE: String(edgeCap), CASCADE_ORIGIN_VIEWERS: '0' };
    const edges = [await c.spawn('edgeA', 'media', edgeEnv), await c.spawn('edgeB', 'media', edgeEnv)];
    await c.until('three media nodes registered', async () => (await c.store.nodes.list('media')).length === 3);

    const pubs = new ObsPublishers();
    t.teardown(() => pubs.close());
    const SOURCE_FRAMES = 600;
    const LOOP_MS = (SOURCE_FRAMES / 30) * 1000;
    const pub = await pubs.publish({ url: stream.whip_url, token: stream.stream_key, source: await stampedH264({ size: 512, frames: SOURCE_FRAMES }), httpFrom: '127.0.5.1' });
    if (pub.status !== 201) throw new Error(`publish → ${pub.status} ${pub.body}`);
    await pubs.waitState(pub.id, 'connected', 30_000);

    const http = createServer((_q, r) => r.writeHead(200, { 'content-type': 'text/html' }).end(VIEWER_PAGE));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    t.teardown(() => new Promise((r) => http.close(r)));
    const pageUrl = `http://127.0.0.1:${(http.address() as { port: number }).port}/`;
    const path = `/live/${stream.output_playback_id}/whep`;
    const paths = { direct: `${origin.url}${path}`, edge: `${(edges[0] as Proc).url}${path}` } as const;
    const PATHS = ['direct', 'edge'] as const;
    const pages = {} as Record<(typeof PATHS)[number], Page>;
    for (const p of PATHS) {
      // A browser per viewer: a page behind another tab of its browser gets few frame callbacks (23 of 180 in 6 s, measured).
      const page = await (await launchChromium(t, { fakeMedia: false })).newPage();
      await page.goto(pageUrl);
      const played = await page.evaluate((u) => (window as unknown as { play(u: string): Promise<number> }).play(u), paths[p]);
      if (played !== 201) throw new Error(`${p}: Chromium WHEP → ${played}`);
      pages[p] = page;
    }
    await sleep(5000); // key frames, warm-up

    // ── glass-to-glass, both viewers in the same windows
    type G2g = { round: number; path: string; p50: number; p95: number; frames: number };
    const g2g: G2g[] = [];
    const bar = progress('windows', rounds * 2);
    for (let r = 0; r < rounds; r++) {
      for (const p of PATHS) await pages[p].evaluate(() => (window as unknown as { takeRecv(): unknown }).takeRecv());
      await sleep(seconds * 1000);
      const sent = await pubs.sentTimes(pub.id);
      for (const p of PATHS) {
        const recv = await pages[p].evaluate(() => (window as unknown as { takeRecv(): [number, number][] }).takeRecv());
        const s = summarize(recv.flatMap(([n, at]) => (sent.has(n) ? [(((at - (sent.get(n) as number)) % LOOP_MS) + LOOP_MS) % LOOP_MS] : [])));
        g2g.push({ round: r, path: p, p50: s.p50, p95: s.p95, frames: recv.length });
      }
      bar.tick();
    }

    // ── an audience through the api: viewers and CPU per node
    const nodes = [origin, ...edges];
    const cpu = () => nodes.map((n) => procCpuSeconds(n.child.pid as number));
    /** Cores each node used over one window. */
    const cpuWindow = async () => {
      const c0 = cpu();
      const t0 = performance.now();
      await sleep(seconds * 1000);
      const wall = (performance.now() - t0) / 1000;
      return cpu().map((x, i) => (x - (c0[i] as number)) / wall);
    };
    const idle: number[][] = [];
    for (let r = 0; r < rounds; r++) idle.push(await cpuWindow());
    const viewers: string[] = [];
    while (viewers.length < viewerCount) {
      const v = await pubs.play({ url: stream.output_stream_url, httpFrom: `127.0.6.${viewers.length + 1}` });
      if (v.status !== 201) throw new Error(`viewer ${viewers.length} → ${v.status} ${v.body}`);
      await pubs.waitState(v.id, 'connected', 20_000);
      viewers.push(v.id);
    }
    await sleep(3000);
    const loaded: number[][] = [];
    for (let r = 0; r < rounds; r++) {
      loaded.push(await cpuWindow());
      bar.tick();
    }
    bar.done();
    const status = (await c.api(api, 'GET', `/v1/streams/${stream.id}/status`)).body as { data: { audience?: { viewers: number; nodes: { node: string; role: string; viewers: number }[] } } };
    const audience = status.data.audience?.nodes ?? [];
    const viewersOn = (n: Proc) => audience.find((a) => a.node === `127.0.0.1:${n.port}`)?.viewers ?? 0;

    // ── the alternative: the stream's packets over the coordination Redis
    const redisCost = await redisRelay(c.redis.url, c.redis.pid, seconds);

    const rows: Row[] = PATHS.map((p) => {
      const ws = g2g.filter((w) => w.path === p);
      return { viewer: p === 'direct' ? 'Chromium, from the origin' : 'Chromium, through an edge', 'g2g p50 ms': percentile(ws.map((w) => w.p50), 50), 'g2g p95 ms': percentile(ws.map((w) => w.p95), 50), 'frames / window': percentile(ws.map((w) => w.frames), 50) };
    });
    printTable(`glass-to-glass, both viewers at once (512² H.264 30 fps, ${rounds} windows of ${seconds} s)`, rows);
    const added = (key: 'p50' | 'p95') => g2g.filter((w) => w.path === 'edge').map((w, i) => w[key] - (g2g.filter((x) => x.path === 'direct')[i]?.[key] ?? Number.NaN));
    const addedRows: Row[] = (['p50', 'p95'] as const).map((key) => ({
      measure: `edge − direct, g2g ${key} (ms)`,
      'median over windows': percentile(added(key), 50),
      'p95 over windows': percentile(added(key), 95),
      'budget (1 frame)': FRAME_MS,
    }));
    printTable('what the edge adds, per window', addedRows);
    const nodeRows: Row[] = nodes.map((n, i) => {
      const before = percentile(idle.map((w) => w[i] as number), 50);
      const after = percentile(loaded.map((w) => w[i] as number), 50);
      const k = viewersOn(n);
      return { node: n.name, role: i === 0 ? 'origin' : 'edge', viewers: k, 'cores before': before, 'cores with viewers': after, 'ms CPU/s per viewer': k > 0 ? ((after - before) / k) * 1000 : '-' };
    });
    printTable(`${viewerCount} viewers through the api (origin share ${share}, edges ${edgeCap} each at most)`, nodeRows);
    // Edge B pulled nothing before its viewers came (edge A already relayed for the Chromium viewer): its
    // added CPU is one pull plus its viewers; edge A's is its viewers alone.
    const perViewerA = nodeRows[1]?.['ms CPU/s per viewer'];
    const addedB = (percentile(loaded.map((w) => w[2] as number), 50) - percentile(idle.map((w) => w[2] as number), 50)) * 1000;
    const pullMs = typeof perViewerA === 'number' ? addedB - perViewerA * viewersOn(edges[1] as Proc) : Number.NaN;
    printTable('one pull', [{ measure: "an edge's pull of the stream (edge B's added CPU less its viewers at edge A's cost)", 'ms CPU/s': pullMs, 'viewers it equals': typeof perViewerA === 'number' ? pullMs / perViewerA : '-' }]);
    printTable('between nodes: RTP over the coordination Redis instead of a WHEP pull', [
      { transport: 'Redis pub/sub, 1,200-byte packets at 1.5 Mb/s', 'one-way p50 ms': redisCost.p50, 'one-way p95 ms': redisCost.p95, 'redis-server cores': redisCost.redisCores, 'publisher+subscriber cores': redisCost.clientCores },
    ]);
    const edgePerViewer = nodeRows.slice(1).flatMap((r) => (typeof r['ms CPU/s per viewer'] === 'number' ? [r['ms CPU/s per viewer']] : []));
    console.log(`\nwrote ${writeResult('cascade', { viewers: viewerCount, share, edgeCap, seconds, rounds, g2g, idle, loaded, audience, nodes: nodeRows, redis: redisCost, edgeMsPerViewer: edgePerViewer, pullMs })}`);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}

/**
 * One stream's video packets over Redis pub/sub for `seconds`: 1,200-byte RTP-sized messages at
 * 1.5 Mb/s (≈ 156 a second), each stamped with its send time; the subscriber takes the one-way
 * latency of each. CPU of redis-server and of this process (publisher and subscriber) over the run.
 */
async function redisRelay(url: string, redisPid: number, seconds: number): Promise<{ p50: number; p95: number; redisCores: number; clientCores: number }> {
  const pubClient = new Redis(url);
  const subClient = new Redis(url);
  try {
    const lat: number[] = [];
    await subClient.subscribe('bench:cascade:rtp');
    subClient.on('messageBuffer', (_ch: Buffer, msg: Buffer) => lat.push(performance.now() - msg.readDoubleBE(0)));
    const payload = Buffer.alloc(1200);
    const perSecond = Math.round(1_500_000 / 8 / 1200);
    const r0 = procCpuSeconds(redisPid);
    const s0 = procCpuSeconds('self');
    const t0 = performance.now();
    for (let k = 0; k < perSecond * seconds; k++) {
      // At the stream's pace (packets of a frame leave together; 5 frames' worth of packets per tick here).
      if (k % Math.ceil(perSecond / 30) === 0) await sleep(1000 / 30);
      payload.writeDoubleBE(performance.now(), 0);
      await pubClient.publish('bench:cascade:rtp', payload);
    }
    await sleep(200);
    const wall = (performance.now() - t0) / 1000;
    const s = summarize(lat);
    return { p50: s.p50, p95: s.p95, redisCores: (procCpuSeconds(redisPid) - r0) / wall, clientCores: (procCpuSeconds('self') - s0) / wall };
  } finally {
    pubClient.disconnect();
    subClient.disconnect();
  }
}
