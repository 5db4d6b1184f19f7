/**
 * The live benchmark against a deployment (`npm run bench -- live --url <base> --key <api key>`):
 * what an operator runs to see the latency their users get.
 *
 * 1. creates a stream through the API (processors only by default, so the stamped counter the
 *    viewer reads survives; `--params` changes that, and then only per-stage latency is read);
 * 2. measures the direct Chromium → Chromium baseline in the same run;
 * 3. publishes the stamped canvas over WHIP to the stream's `whip_url` (Chromium, the codec of
 *    `--codec`), waits for ONLINE, plays WHEP from `output_stream_url`, and reads the counter back
 *    from every presented frame: glass-to-glass = present time − draw time (one machine clock);
 * 4. reads the node's per-stage latency and fps from the status API;
 * 5. deletes the stream (also when something failed).
 */
import { createServer } from 'node:http';
import type { Page } from 'playwright-core';
import { launchChromium } from '../../test/helpers/chromium.ts';
import { printTable, progress, summarize, writeResult, type Row } from '../lib.ts';
import { PAGE } from './page.ts';

type Win = Window & {
  startSource(size: number): void;
  publish(u: string, tk: string, c: string): Promise<number>;
  play(u: string, attach: boolean): Promise<number>;
  direct(c: string): Promise<void>;
  takeLatencies(): number[];
  takeRecv(): [number, number][];
  takeSent(): [number, number][];
};

interface StreamView {
  id: string;
  whip_url: string;
  stream_key: string;
  output_stream_url: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function liveRemote(args: Map<string, string>): Promise<void> {
  const base = (args.get('url') ?? '').replace(/\/+$/, '');
  const key = args.get('key') ?? process.env['REVERIE_API_KEY'] ?? '';
  if (!/^https?:\/\//.test(base) || !key) throw new Error('--url <http(s)://deployment> and --key <api key> (or REVERIE_API_KEY) are required');
  const seconds = Number(args.get('seconds') ?? 10);
  const size = Number(args.get('size') ?? 512);
  const codec = (args.get('codec') ?? 'H264') as 'H264' | 'VP8';
  const params = { model_id: args.get('model') ?? 'stabilityai/sd-turbo', prompt: 'latency benchmark', width: size, height: size, skip_diffusion: true, ...(JSON.parse(args.get('params') ?? '{}') as Record<string, unknown>) };
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(20_000),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, any> };
  };
  const bar = progress(`live bench → ${base}`, 6);
  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  let stream: StreamView | null = null;
  try {
    const created = await api('POST', '/v1/streams', { pipeline: 'streamdiffusion', name: 'latency benchmark', params });
    if (created.status !== 201) throw new Error(`create stream → ${created.status}: ${JSON.stringify(created.body)}`);
    stream = created.body as StreamView;
    bar.tick();
    // The pages come from a loopback server of ours: WHIP/WHEP allow any origin (CORS), and a
    // page in the local address space may call public and local deployments alike (Chromium
    // blocks a page it considers public from calling a loopback one).
    const pageServer = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE));
    await new Promise<void>((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise((resolve) => pageServer.close(resolve)));
    const pageUrl = `http://127.0.0.1:${(pageServer.address() as { port: number }).port}/bench.html`;
    const ctx = await launchChromium(t, { fakeMedia: false });
    const pub: Page = await ctx.newPage();
    await pub.goto(pageUrl);
    await pub.evaluate((s) => (window as unknown as Win).startSource(s), size);
    const view: Page = await ctx.newPage();
    await view.goto(pageUrl);

    await pub.bringToFront();
    await pub.evaluate((c) => (window as unknown as Win).direct(c), codec);
    await sleep(3000);
    await pub.evaluate(() => (window as unknown as Win).takeLatencies());
    await sleep(seconds * 1000);
    const direct = summarize(await pub.evaluate(() => (window as unknown as Win).takeLatencies()));
    await pub.evaluate(() => {
      for (const pc of (window as unknown as { directPcs: RTCPeerConnection[] }).directPcs) pc.close();
    });
    bar.tick();

    const status = await pub.evaluate(([u, k, c]) => (window as unknown as Win).publish(u, k, c), [stream.whip_url, stream.stream_key, codec] as const);
    if (status !== 201) throw new Error(`WHIP POST → ${status}`);
    const deadline = Date.now() + 30_000;
    let data: Record<string, any> = {};
    for (;;) {
      data = (await api('GET', `/v1/streams/${stream.id}/status`)).body['data'] ?? {};
      if (data['state'] === 'ONLINE' || Date.now() > deadline) break;
      await sleep(500);
    }
    if (data['state'] !== 'ONLINE') throw new Error(`the stream did not come ONLINE in 30 s (state ${String(data['state'])}, last_error ${String(data['inference_status']?.['last_error'])})`);
    bar.tick();

    await view.bringToFront();
    const played = await view.evaluate((u) => (window as unknown as Win).play(u, true), stream.output_stream_url);
    if (played !== 201) throw new Error(`WHEP POST → ${played}`);
    await sleep(3000);
    await view.evaluate(() => (window as unknown as Win).takeRecv());
    await sleep(seconds * 1000);
    const recv = await view.evaluate(() => (window as unknown as Win).takeRecv());
    const sent = new Map(await pub.evaluate(() => (window as unknown as Win).takeSent()));
    const g2g = summarize(recv.flatMap(([n, at]) => (sent.has(n) ? [at - (sent.get(n) as number)] : [])));
    bar.tick();
    const st = (await api('GET', `/v1/streams/${stream.id}/status`)).body['data'] ?? {};
    const stages = (st['stage_latency_ms'] ?? {}) as Record<string, { p50: number; p95: number } | undefined>;
    bar.tick();

    const rows: Row[] = [
      { path: 'direct Chromium → Chromium (baseline)', 'g2g p50 ms': direct.p50, 'g2g p95 ms': direct.p95, frames: direct.n },
      {
        path: `through ${new URL(base).host}`,
        'g2g p50 ms': g2g.p50,
        'g2g p95 ms': g2g.p95,
        'g2g/direct p50': g2g.p50 / direct.p50,
        'node p50 ms': stages['node']?.p50 ?? null,
        'node p95 ms': stages['node']?.p95 ?? null,
        'decode p50': stages['decode']?.p50 ?? null,
        'process p50': stages['process']?.p50 ?? null,
        'encode p50': stages['encode']?.p50 ?? null,
        'in fps': st['inference_status']?.['input_fps'] ?? null,
        'out fps': st['inference_status']?.['output_fps'] ?? null,
        frames: g2g.n,
      },
    ];
    bar.done();
    printTable(`live path through a deployment, ${size}x${size} ${codec}, WHIP → ${params.skip_diffusion ? 'processors only' : params.model_id} → WHEP (${seconds} s per row)`, rows);
    const result = { url: base, size, codec, seconds, params, direct, g2g, stages, state: st['state'], demo: st['demo'] };
    console.log(`\nwrote ${writeResult('live-remote', result)}`);
  } finally {
    if (stream) await api('DELETE', `/v1/streams/${stream.id}`).catch(() => undefined);
    for (const fn of cleanups.reverse()) await fn();
  }
}
