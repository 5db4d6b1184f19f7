/**
 * Scale-out, live streams, everything real: redis-server, 2 `api`, 2 `media` and 2 `worker`
 * processes of `reverie serve --roles …` on loopback, WebRTC publishers over WHIP, an HTTPS
 * webhook receiver. Streams are placed over both media nodes; a WHIP publish through either api
 * replica reaches the owning node; a PATCH through api #1 applies on the node (seen in the status
 * read through api #2); `kill -9` of a media node ends its streams with `timeout` webhooks whose
 * `ended_at` is the last moment they were confirmed live.
 */
import t from 'tap';
import { Cluster, type Json } from './cluster.ts';

t.test('2 api + 2 media + 2 workers over Redis: placement, WHIP through either api, PATCH across processes, dead media node → timeout', { timeout: 280_000 }, async (t) => {
  const c = await Cluster.start(t);
  // The first media node writes the demo models the second one then finds on disk.
  const media1 = await c.spawn('media1', 'media');
  const [media2, api1, api2, worker1, worker2] = await Promise.all([
    c.spawn('media2', 'media'),
    c.spawn('api1', 'api'),
    c.spawn('api2', 'api'),
    c.spawn('worker1', 'worker', { RENDER_WORKERS: '0' }),
    c.spawn('worker2', 'worker', { RENDER_WORKERS: '0' }),
  ]);
  t.ok(worker1 && worker2, 'two workers running');
  const nodeOf = new Map([
    [`127.0.0.1:${media1.port}`, media1],
    [`127.0.0.1:${media2.port}`, media2],
  ]);
  await c.until('both media nodes registered', async () => (await c.store.nodes.list('media')).length === 2);

  const hook = await c.api(api1, 'POST', '/v1/webhooks', { url: c.receiver.url('/hook'), events: ['stream.started', 'stream.ended'] });
  t.equal(hook.status, 201, 'webhook endpoint registered through api #1');

  // ── placement: four creates, alternating api replicas, land on both nodes
  const streams: Json[] = [];
  for (let i = 0; i < 4; i++) {
    const r = await c.api(i % 2 ? api2 : api1, 'POST', '/v1/streams', { params: { prompt: `stream ${i}`, width: 384, height: 384 } });
    t.equal(r.status, 201, `create #${i} → 201 ${r.status === 201 ? "" : JSON.stringify(r.body)}`);
    streams.push(r.body);
  }
  const owners = await Promise.all(streams.map(async (s) => (await c.store.streams.get(s['id'] as string))?.nodeId));
  t.same(new Set(owners), new Set(nodeOf.keys()), `streams spread over both media nodes (${owners.join(', ')})`);
  t.match(streams[0], { whip_url: `${api1.url}/live/${streams[0]!['id']}/whip` }, 'whip_url is on the api entry point');

  // One stream on each node; publish one through api #1 and the other through api #2.
  const onA = streams[owners.indexOf(`127.0.0.1:${media1.port}`)]!;
  const onB = streams[owners.indexOf(`127.0.0.1:${media2.port}`)]!;
  const pubA = await c.publish(`${api1.url}/live/${onA['id']}/whip`, onA['stream_key'] as string);
  t.equal(pubA.status, 201, 'WHIP through api #1 → 201');
  t.match(pubA.location, new RegExp(`^${media1.url}/live/sessions/[0-9a-f]{32}$`), 'the session Location is on the owning node');
  const pubB = await c.publish(`${api2.url}/live/${onB['id']}/whip`, onB['stream_key'] as string);
  t.equal(pubB.status, 201, 'WHIP through api #2 → 201');
  t.match(pubB.location, new RegExp(`^${media2.url}/live/sessions/`), 'forwarded to the other node');

  const startedOf = (id: string) => c.events().find((e) => e.type === 'stream.started' && e.data['stream_id'] === id);
  const startedA = await c.until('stream.started for the stream on media1', async () => startedOf(onA['id'] as string));
  await c.until('stream.started for the stream on media2', async () => startedOf(onB['id'] as string));
  t.equal(startedA.headerId, startedA.id, 'delivery carries its event id');

  // ── status from either replica shows the owning node's live values
  const status = async (via: typeof api1, s: Json) => (await c.api(via, 'GET', `/v1/streams/${s['id']}/status`)).body['data'] as Json;
  const live = await c.until('output frames in the status read through api #2', async () => {
    const d = await status(api2, onA);
    return d['inference_status']['output_fps'] > 0 ? d : null;
  });
  t.equal(live['orchestrator_info']['address'], `127.0.0.1:${media1.port}`, 'status names the owning node');

  // ── PATCH through api #1 applies on the node (read back through api #2)
  const hot = await c.api(api1, 'PATCH', `/v1/streams/${onA['id']}`, { params: { prompt: 'a lighthouse at dusk' } });
  t.equal(hot.status, 200);
  t.equal(hot.headers.get('x-params-update'), 'hot');
  t.equal(hot.headers.get('x-params-update-by'), 'node', 'the engine on media node 1 planned it (over the bus)');
  let st = await status(api2, onA);
  t.equal(st['inference_status']['last_params']['prompt'], 'a lighthouse at dusk', 'the node applied the hot prompt');
  t.equal(st['inference_status']['restart_count'], 0, 'no restart for a hot param');
  const reload = await c.api(api1, 'PATCH', `/v1/streams/${onA['id']}`, { params: { do_add_noise: false } });
  t.equal(reload.headers.get('x-params-update'), 'reload', `reload PATCH (${reload.status} ${reload.status === 200 ? '' : JSON.stringify(reload.body)})`);
  t.equal(reload.headers.get('x-params-update-by'), 'node', 'the engine on media node 1 planned it (over the bus)');
  // The node rebuilds the pipeline in the background, then swaps: its status shows when it did.
  st = await c.until('the reload finishing on the node', async () => {
    const d = await status(api2, onA);
    return d['inference_status']['restart_count'] >= 1 ? d : null;
  });
  t.equal(st['inference_status']['last_params']['do_add_noise'], false, 'the node runs the reloaded params');

  // ── a clip asked through api #2 is cut by media node 1 (over the bus) into the shared blob store
  const clip = await c.until('a clip of stream A', async () => {
    const r = await c.api(api2, 'POST', `/v1/streams/${onA['id']}/clips`, { seconds: 2 });
    return r.status === 201 ? r.body : null;
  });
  const mp4 = await fetch(clip['mp4_url'] as string, { headers: { authorization: `Bearer ${c.key}` } });
  t.equal(mp4.status, 200, 'its MP4 downloads through the signed link');
  t.equal(mp4.headers.get('content-type'), 'video/mp4');
  t.equal((await mp4.arrayBuffer()).byteLength, clip['size'], 'the size the record says');

  // ── kill -9 the node that owns stream A: it ends with `timeout`, the other stream lives on
  await c.kill(media1, 'SIGKILL');
  const killedAt = Date.now();
  const endedA = await c.until(
    'stream.ended for the dead node’s stream',
    async () => c.events().find((e) => e.type === 'stream.ended' && e.data['stream_id'] === onA['id']),
    20_000,
  );
  t.equal(endedA.data['reason'], 'timeout', 'reason timeout');
  const endedAt = Date.parse(endedA.data['ended_at'] as string);
  t.ok(endedAt <= killedAt, 'ended_at is not after the kill');
  t.ok(killedAt - endedAt < 5_000, `ended_at is the last confirmed-live moment (${killedAt - endedAt} ms before the kill)`);
  t.equal(Date.parse(endedA.data['started_at'] as string), Date.parse(startedA.data['started_at'] as string), 'the session that started');
  t.ok(Date.now() - killedAt < 15_000, 'detected within the heartbeat TTL plus a sweep');
  t.equal((await c.store.streams.get(onB['id'] as string))?.state, 'started', 'the stream on the live node is untouched');
  t.equal(c.events().filter((e) => e.type === 'stream.ended').length, 1, 'one stream.ended (two workers swept; the CAS let one win)');
  t.same((await c.store.nodes.list('media')).map((n) => n.id), [`127.0.0.1:${media2.port}`], 'the dead node left the registry');

  // ── a new create only goes to the live node
  const after = await c.api(api2, 'POST', '/v1/streams', { params: { prompt: 'after' } });
  t.equal((await c.store.streams.get(after.body['id'] as string))?.nodeId, `127.0.0.1:${media2.port}`, 'placement skips the dead node');
  pubA.stop();
  pubB.stop();
});
