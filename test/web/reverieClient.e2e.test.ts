/**
 * The browser client (web/reverie-client.js) in headless Chromium against the real server
 * (startServer: embedded store, streams API, media node, web routes): it reads capabilities,
 * creates a stream, publishes the fake camera over WHIP and plays the output over WHEP, opens the
 * control WebSocket with a control token, gets status and stats pushed, and has an update
 * acknowledged with a frame number. The page reaches the API through a TCP proxy in this test;
 * killing every connection of the proxy (the network path) makes the control channel reconnect
 * with backoff and resume: an update sent across the cut is acknowledged after it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { loadConfig } from '../../control/config.ts';
import { startServer } from '../../control/Server.ts';
import type * as ClientTypes from '../../web/reverie-client.js';
import { launchChromium } from '../helpers/chromium.ts';
import { until } from '../helpers/until.ts';

type Json = Record<string, any>;
type ClientModule = typeof ClientTypes;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** A TCP proxy to `port` whose connections can all be cut at once (the network path dies). */
async function tcpProxy(port: number): Promise<{ port: number; cut(): number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    cut: () => {
      const n = sockets.size;
      for (const s of sockets) s.destroy();
      return n;
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}

t.test('the browser client publishes, plays, controls over the WebSocket, gets pushes, and reconnects after the network path dies', { timeout: 180_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-client-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: port, HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent' });
  const server = await startServer(config, { logger: pino({ level: process.env['LOG_LEVEL'] ?? 'silent' }) });
  const proxy = await tcpProxy(port);
  t.teardown(async () => {
    await proxy.close();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const origin = `http://127.0.0.1:${proxy.port}`;
  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${origin}/web/index.html`);

  const setup = (await page.evaluate(
    async ({ key, origin }) => {
      // A page import, resolved by the browser (a variable, so TypeScript leaves it alone).
      const path = '/web/reverie-client.js';
      const m = (await import(path)) as ClientModule;
      const w = window as unknown as Json;
      const api = new m.ReverieClient({ baseUrl: origin, apiKey: key });
      const caps = (await api.capabilities()) as Json;
      const stream = await api.createStream({ params: { prompt: 'a red fox' } });
      const camera = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480, frameRate: 30 }, audio: true });
      const video = document.createElement('video');
      video.muted = true;
      document.body.append(video);
      const pub = api.publish(stream, camera);
      await pub.ready;

      const player = api.play(stream, video);
      await player.ready;
      const control = api.control(stream.id);
      const seen: Json = { status: 0, stats: 0, opens: 0, closes: 0, lastStats: null };
      control.addEventListener('status', () => seen.status++);
      control.addEventListener('stats', (e: Event) => {
        seen.stats++;
        seen.lastStats = (e as CustomEvent).detail;
      });
      control.addEventListener('open', () => seen.opens++);
      control.addEventListener('close', () => seen.closes++);
      await control.ready;
      Object.assign(w, { api, stream, pub, player, control, seen, video });
      return { models: caps.models.map((x: Json) => x.model_id), id: stream.id };
    },
    { key: server.firstKey!, origin },
  )) as Json;
  t.ok(setup.models.includes('stabilityai/sd-turbo'), 'capabilities read through the client');

  // Output frames reach the <video> through the client's WHEP player.
  const played = await page
    .waitForFunction(() => ((window as unknown as Json).video as HTMLVideoElement).getVideoPlaybackQuality().totalVideoFrames > 10, undefined, { timeout: 60_000 })
    .then(() => true)
    .catch(() => false);
  if (!played) {
    const diag = await page.evaluate(() => {
      const w = window as unknown as Json;
      const v = w.video as HTMLVideoElement;
      return { pub: w.pub.pc?.connectionState, pubState: w.pub.state, play: w.player.pc?.connectionState, playState: w.player.state, rs: v.readyState, frames: v.getVideoPlaybackQuality().totalVideoFrames, src: !!v.srcObject, seen: w.seen };
    });
    const st = (await (await fetch(`http://127.0.0.1:${port}/v1/streams/${setup.id}/status`, { headers: { authorization: `Bearer ${server.firstKey}` } })).json()) as Json;
    t.fail(`no output frames: ${JSON.stringify(diag)} status ${JSON.stringify({ state: st.data.state, inf: st.data.inference_status, v: st.data.viewers })}`);
    return;
  }
  t.pass('the client plays the processed output over WHEP');

  // Pushed stats show the live stream, without any polling by the page.
  const stats = (await page.waitForFunction(
    () => {
      const s = (window as unknown as Json).seen.lastStats;
      return s && s.output_fps > 0 && s.viewers >= 1 ? s : null;
    },
    undefined,
    { timeout: 30_000 },
  ).then((h) => h.jsonValue())) as Json;
  t.ok(stats.input_fps > 0 && stats.output_fps > 0, `stats pushed: in ${stats.input_fps} fps, out ${stats.output_fps} fps`);
  t.ok(stats.viewers >= 1, 'one viewer');
  t.type(stats.stage_latency_ms.node?.p50, 'number', 'per-stage latency');
  t.match(stats.ingest_quality, /^(good|fair|poor|unknown)$/);

  // Live frames output so far (the player's count above includes slate frames, which are not numbered).
  const statusBefore = (await (await fetch(`http://127.0.0.1:${port}/v1/streams/${setup.id}/status`, { headers: { authorization: `Bearer ${server.firstKey}` } })).json()) as Json;
  const sent = statusBefore.data.frames_out as number;
  t.type(sent, 'number', `status numbers the live frames sent (${sent})`);
  const ack = (await page.evaluate(() => (window as unknown as Json).control.update({ prompt: 'a blue whale' }))) as Json;
  t.equal(ack.mode, 'hot');
  t.type(ack.frame, 'number', `the ack names an output frame (${ack.frame})`);
  t.ok(ack.frame > sent, `after the frames already sent (${sent})`);

  // Cut the network path: every TCP connection through the proxy dies at once.
  const before = (await page.evaluate(() => ({ ...(window as unknown as Json).seen, lastStats: null }))) as Json;
  const cut = proxy.cut();
  t.ok(cut > 0, `${cut} connections cut`);
  const resumed = (await page.evaluate(() => (window as unknown as Json).control.update({ prompt: 'after the cut' }))) as Json;
  t.equal(resumed.mode, 'hot', 'an update sent across the cut is acknowledged once the channel is back');
  const after = (await page.evaluate(() => ({ ...(window as unknown as Json).seen, reconnects: (window as unknown as Json).control.reconnects }))) as Json;
  t.ok(after.closes > before.closes, 'the client saw the socket drop');
  t.ok(after.opens > before.opens, `and reconnected (${after.reconnects} reconnect(s))`);
  const stream = (await (await fetch(`http://127.0.0.1:${port}/v1/streams/${setup.id}`, { headers: { authorization: `Bearer ${server.firstKey}` } })).json()) as Json;
  t.equal(stream.params.prompt, 'after the cut', 'the server has the update sent across the cut');
  const statsAfter = (await page.waitForFunction((n) => (window as unknown as Json).seen.stats > n + 1, before.stats, { timeout: 10_000 }).then(() => true)) as boolean;
  t.ok(statsAfter, 'stats pushes resume');

  // Closing DELETEs both sessions; the publisher's carries its stream key (the server wants it).
  // (Either DELETE may find its session already gone, 404, when the closed peer connection got there first.)
  const deletes: { status: number; authorization: string | undefined }[] = [];
  page.on('response', (r) => {
    if (r.request().method() === 'DELETE' && r.url().includes('/live/sessions/')) deletes.push({ status: r.status(), authorization: r.request().headers()['authorization'] });
  });
  await page.evaluate(() => {
    const w = window as unknown as Json;
    w.control.close();
    w.player.close();
    w.pub.close();
  });
  await until('both sessions DELETEd', () => deletes.length, (n) => n >= 2, 10_000);
  t.ok(deletes.some((d) => /^Bearer sk_/.test(d.authorization ?? '')), `the publisher's DELETE carries the stream key (${JSON.stringify(deletes.map((d) => d.status))})`);
  t.notOk(deletes.some((d) => d.status === 401), 'no DELETE was refused');
  t.same(pageErrors, [], 'no page errors');
});
