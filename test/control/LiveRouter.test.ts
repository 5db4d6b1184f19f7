/**
 * WHIP/WHEP/HLS requests reaching a process that is not the stream's node: forwarded (default)
 * or 307-redirected to the owning node found through the registry; a stream whose node is dead
 * is placed again on a live one for WHIP. Real fastify servers on loopback, a real MediaNode's
 * routes as the "node", a real store and registry. (A full WebRTC publish through a forwarding
 * api replica is in test/scaleout/streams.e2e.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import t, { type Test } from 'tap';
import { BusMediaNodeClient } from '../../streams/BusMediaNodeClient.ts';
import { LiveRouter, type LiveRouting } from '../../control/LiveRouter.ts';
import { DEFAULT_PARAMS } from '../../native/params/index.ts';
import { MediaNode, registerMediaRoutes } from '../../media/index.ts';
import { EmbeddedStore, type StreamRecord } from '../../store/index.ts';

const logger = pino({ level: 'silent' });
const iso = (ms: number) => new Date(ms).toISOString();

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
}

async function setup(t: Test, routing: LiveRouting = 'proxy') {
  const dir = mkdtempSync(join(tmpdir(), 'rv-liverouter-'));
  const store = EmbeddedStore.open({ dataDir: dir });
  // The node: real WHIP/WHEP routes; it learns who may publish from the same store.
  let nodeUrl = '';
  const node = new MediaNode({
    get publicUrl() {
      return nodeUrl;
    },
    logger,
    resolveIngest: async (streamId, bearer) => {
      const s = await store.streams.get(streamId);
      return s && s.streamKey === bearer ? { streamId, params: {} } : null;
    },
    resolvePlayback: async (playbackId) => {
      const s = await store.streams.getByPlaybackId(playbackId);
      return s ? { streamId: s.id } : null;
    },
  });
  const nodeApp = Fastify();
  const seen: { url: string; forwarded: string | undefined }[] = [];
  nodeApp.addHook('onRequest', async (req) => {
    seen.push({ url: req.url, forwarded: req.headers['x-reverie-forwarded'] as string | undefined });
  });
  registerMediaRoutes(nodeApp, node);
  nodeUrl = await listen(nodeApp);

  // The router's clock, moved by hand to expire a node's beats.
  const skew = { ms: 0 };
  const media = new BusMediaNodeClient({ store, logger, now: () => Date.now() + skew.ms });
  const apiApp = Fastify();
  await apiApp.register(new LiveRouter({ store, media, logger, routing }).plugin());
  const apiUrl = await listen(apiApp);
  t.teardown(async () => {
    await apiApp.close();
    await nodeApp.close();
    node.close();
    await media.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const beat = (id: string, url: string, ttlMs = 60_000) => store.nodes.beat('media', id, { publicUrl: url, models: ['stabilityai/sd-turbo'], capacity: 4, load: 0, live: [] }, ttlMs);
  await beat('node-a', nodeUrl);
  const record: StreamRecord = {
    id: 'str_1',
    accountId: 'acc_1',
    name: '',
    pipeline: 'streamdiffusion',
    params: { ...DEFAULT_PARAMS, model_id: 'stabilityai/sd-turbo' },
    streamKey: 'sk_secret',
    playbackId: 'pb_1',
    outputRtmpUrl: null,
    fromPlayground: false,
    isSmokeTest: false,
    gatewayHost: 'h',
    nodeId: 'node-a',
    state: 'created',
    createdAt: iso(Date.now()),
    updatedAt: iso(Date.now()),
    startedAt: null,
    endedAt: null,
    endReason: null,
    lastLiveAt: null,
    deleted: false,
  };
  await store.streams.create(record);
  return { store, apiUrl, nodeUrl, seen, beat, skew };
}

const whip = (url: string, token: string, sdp = 'v=0\r\nnot an offer\r\n') =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/sdp', authorization: `Bearer ${token}` }, body: sdp, redirect: 'manual' });

t.test('proxy: WHIP and WHEP POSTs are forwarded to the owning node and its answer comes back as is', { timeout: 20_000 }, async (t) => {
  const { apiUrl, nodeUrl, seen } = await setup(t);
  const bad = await whip(`${apiUrl}/live/str_1/whip`, 'sk_wrong');
  t.equal(bad.status, 401, 'the node refused the key');
  t.match(bad.headers.get('www-authenticate'), /invalid_token/, 'with its own header');
  const garbage = await whip(`${apiUrl}/live/str_1/whip`, 'sk_secret');
  t.equal(garbage.status, 400, 'the node judged the offer');
  t.equal(garbage.headers.get('access-control-allow-origin'), '*');
  t.same(seen.map((s) => [s.url, s.forwarded]), [['/live/str_1/whip', '1'], ['/live/str_1/whip', '1']], 'both reached the node, marked forwarded');
  const whep = await fetch(`${apiUrl}/live/pb_1/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: 'v=0\r\n' });
  t.equal(whep.status, 400, 'WHEP forwarded too');
  t.equal(seen.at(-1)?.url, '/live/pb_1/whep');

  const hls = await fetch(`${apiUrl}/hls/pb_1/index.m3u8?_HLS_msn=3`, { redirect: 'manual' });
  t.equal(hls.status, 307, 'HLS is redirected');
  t.equal(hls.headers.get('location'), `${nodeUrl}/hls/pb_1/index.m3u8?_HLS_msn=3`);
});

t.test('unknown streams and hand-built session URLs are answered without a node', { timeout: 20_000 }, async (t) => {
  const { apiUrl, seen } = await setup(t);
  t.equal((await whip(`${apiUrl}/live/str_nope/whip`, 'sk_secret')).status, 401);
  t.equal((await fetch(`${apiUrl}/live/pb_nope/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: 'v=0' })).status, 404);
  t.equal((await fetch(`${apiUrl}/live/sessions/abc`, { method: 'DELETE' })).status, 404);
  const pre = await fetch(`${apiUrl}/live/str_1/whip`, { method: 'OPTIONS' });
  t.equal(pre.status, 204);
  t.equal(pre.headers.get('accept-post'), 'application/sdp');
  t.same(seen, [], 'nothing reached the node');
});

t.test('redirect: 307 to the node’s WHIP URL (RFC 9725 load balancing)', { timeout: 20_000 }, async (t) => {
  const { apiUrl, nodeUrl, seen } = await setup(t, 'redirect');
  const res = await whip(`${apiUrl}/live/str_1/whip`, 'sk_secret');
  t.equal(res.status, 307);
  t.equal(res.headers.get('location'), `${nodeUrl}/live/str_1/whip`);
  t.same(seen, [], 'the client goes there itself');
});

t.test('a stream whose node is dead is placed on a live node for WHIP; WHEP answers 503', { timeout: 20_000 }, async (t) => {
  const { store, apiUrl, seen, beat, nodeUrl, skew } = await setup(t);
  await beat('node-a', 'http://127.0.0.1:1', 1000); // node-a's last beat
  await beat('node-b', nodeUrl);
  skew.ms = 5000; // 5 s later: node-a missed its beats, node-b's are good for a minute
  const whep = await fetch(`${apiUrl}/live/pb_1/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: 'v=0' });
  t.equal(whep.status, 503, 'no live node holds it: WHEP cannot be served');
  const stranger = await whip(`${apiUrl}/live/str_1/whip`, 'sk_wrong');
  t.equal(stranger.status, 401, 'a WHIP POST without the stream key moves nothing');
  t.equal((await store.streams.get('str_1'))?.nodeId, 'node-a', 'the record still names the dead node');
  t.equal((await whip(`${apiUrl}/live/str_1/whip`, '')).status, 401, 'nor does one without a token');
  const res = await whip(`${apiUrl}/live/str_1/whip`, 'sk_secret');
  t.equal(res.status, 400, 'the WHIP POST reached a node');
  t.equal((await store.streams.get('str_1'))?.nodeId, 'node-b', 'the record follows the new placement');
  t.equal(seen.length, 1);
});

t.test('WHEP viewers go to the origin up to its share, then to edges: a relaying one first, the least loaded, never for an offer without H.264', { timeout: 20_000 }, async (t) => {
  const { store } = await setup(t);
  const media = new BusMediaNodeClient({ store, logger });
  t.teardown(() => media.close());
  const router = new LiveRouter({ store, media, logger, cascadeOriginViewers: 2 });
  // Counts as a node beats them (connected viewers are sessions too); taken long ago, so every placement of this router counts on top.
  const beat = (id: string, viewers: number, viewerCapacity: number, audience: Record<string, { role: 'origin' | 'edge'; viewers: number; edges: number }>) =>
    store.nodes.beat(
      'media',
      id,
      { publicUrl: `http://${id}`, models: ['stabilityai/sd-turbo'], capacity: 4, load: 0, live: [], viewers, viewerCapacity, audience: Object.fromEntries(Object.entries(audience).map(([k, a]) => [k, { ...a, sessions: a.viewers }])), countedAt: 0 },
      60_000,
    );
  const H264 = 'v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 102\r\na=rtpmap:102 H264/90000\r\n';
  const VP8 = 'v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n';
  const placed = async (offer = H264) => {
    const target = await router.target('whep', 'pb_1', undefined, offer);
    return target.to === 'remote' ? target.node.id : target.to;
  };
  await beat('node-a', 1, 100, { str_1: { role: 'origin', viewers: 1, edges: 0 } });
  await beat('node-b', 50, 100, {});
  await beat('node-c', 10, 100, {});
  t.equal(await placed(), 'node-a', 'the origin takes viewers up to its share (1 + this one = 2)');
  t.equal(await placed(), 'node-c', 'past its share: the least loaded other node, which will relay the stream');
  t.equal(await placed(), 'node-c', 'the same edge again: it already relays the stream (one pull per edge)');
  t.equal(await placed(VP8), 'node-a', 'an offer without H.264 stays on the origin (an edge relays H.264 only)');

  await beat('node-b', 50, 100, { str_1: { role: 'edge', viewers: 50, edges: 0 } });
  await beat('node-c', 100, 100, { str_1: { role: 'edge', viewers: 100, edges: 0 } });
  t.equal(await placed(), 'node-b', 'a full edge takes no more: another relaying edge with room does');

  await beat('node-b', 100, 100, {});
  await beat('node-c', 100, 100, {});
  t.equal(await placed(), 'node-a', 'no edge with room: the origin (it answers 503 itself when full)');

  await beat('node-c', 0, 0, {});
  t.equal(await placed(), 'node-a', 'a node from before the cascade (no viewer capacity) is never an edge');

  const pinned = new LiveRouter({ store, media, logger, cascadeOriginViewers: 0 });
  await beat('node-b', 0, 100, {});
  const first = await pinned.target('whep', 'pb_1', undefined, H264);
  t.equal(first.to === 'remote' ? first.node.id : first.to, 'node-b', 'share 0: every viewer goes to an edge while one has room');
});
