/**
 * Scale-out, workers and durability, everything real: redis-server with AOF (appendfsync always),
 * `reverie serve --roles …` processes, a WebRTC publisher, an HTTPS webhook receiver.
 *
 * - `kill -9` of the only worker mid-render and mid-delivery loses nothing: once the leases run
 *   out, a worker started afterwards renders the song and delivers the event with its event id;
 * - with no worker running, songs and a stream event queue up; Redis is killed and restarted from
 *   its AOF; workers started afterwards render every song and deliver the event, and the api
 *   replica that stayed up answers again.
 */
import t from 'tap';
import { Cluster, type Json } from './cluster.ts';

t.test('a worker killed mid-render and mid-delivery loses nothing; a Redis restart with AOF loses no queued song or delivery', { timeout: 290_000 }, async (t) => {
  const c = await Cluster.start(t, { appendonly: true });
  const [media, api, workerA] = await Promise.all([c.spawn('media', 'media'), c.spawn('api', 'api'), c.spawn('workerA', 'worker')]);
  await c.until('media node registered', async () => (await c.store.nodes.list('media')).length === 1);
  t.ok(media, 'media node up');
  const hook = await c.api(api, 'POST', '/v1/webhooks', { url: c.receiver.url('/hook'), events: ['stream.started', 'stream.ended'] });
  t.equal(hook.status, 201);

  // Two live streams: one is deleted mid-test (its stream.ended is the delivery in flight), the
  // other while no worker runs (its stream.ended is the delivery queued across the Redis restart).
  const live: Json[] = [];
  for (let i = 0; i < 2; i++) {
    const s = (await c.api(api, 'POST', '/v1/streams', { params: { prompt: `s${i}`, width: 384, height: 384 } })).body;
    const pub = await c.publish(`${api.url}/live/${s['id']}/whip`, s['stream_key'] as string);
    t.equal(pub.status, 201, `publisher ${i} through the api`);
    live.push(s);
  }
  await c.until('both stream.started delivered', async () => c.events().filter((e) => e.type === 'stream.started').length === 2);

  const song = async (id: string) => (await c.api(api, 'GET', `/music/v1/songs/${id}`)).body;
  const createSong = async (prompt: string, duration = 10) => {
    const r = await c.api(api, 'POST', '/music/v1/songs', { prompt, duration, seed: 11, variations: 1 });
    t.equal(r.status, 202, `song queued (${r.status === 202 ? 'ok' : JSON.stringify(r.body)})`);
    return r.body['id'] as string;
  };

  // ── mid-render and mid-delivery: the receiver holds the delivery; the song is rendering
  c.receiver.reply = () => 'hang';
  const before = c.receiver.requests.length;
  // A long song, so the render is still running when worker A dies.
  const songId = await createSong('slow ambient pads', 120);
  await c.until('the song rendering on worker A', async () => (await song(songId))['status'] === 'rendering', 60_000);
  const del = await c.api(api, 'DELETE', `/v1/streams/${live[0]!['id']}`);
  t.equal(del.status, 200, 'stream deleted (stream.ended queued in the same write)');
  await c.receiver.waitForCount(before + 1);
  const held = c.events()[before]!;
  t.match(held, { type: 'stream.ended', data: { stream_id: live[0]!['id'], reason: 'deleted' } }, 'worker A is delivering stream.ended');
  t.equal((await song(songId))['status'], 'rendering', 'and still rendering the song');
  await c.kill(workerA, 'SIGKILL');
  c.receiver.reply = () => ({ status: 200, body: 'ok' });

  const workerB = await c.spawn('workerB', 'worker');
  // Leases are 30 s: the jobs come back to worker B once worker A's leases run out.
  const redelivered = await c.until('the same event delivered again', async () => c.events().slice(before + 1).find((e) => e.id === held.id), 90_000);
  t.equal(redelivered.headerId, held.id, 'same event id in the Reverie-Webhook-Id header');
  const done = await c.until('the song rendered by worker B', async () => {
    const s = await song(songId);
    return s['status'] === 'done' || s['status'] === 'failed' ? s : null;
  }, 120_000);
  t.equal(done['status'], 'done', 'the abandoned render finished');
  t.equal((done['takes'] as unknown[]).length, 1, 'with its take');

  // ── Redis restart with AOF: nothing runs the queues while Redis goes down and comes back
  await c.kill(workerB, 'SIGTERM');
  const queuedSongs = [await createSong('lofi rain'), await createSong('synthwave night')];
  const eventsBefore = c.events().length;
  const del2 = await c.api(api, 'DELETE', `/v1/streams/${live[1]!['id']}`);
  t.equal(del2.status, 200, 'second stream deleted with no worker running: its event is queued');
  t.equal(c.events().length, eventsBefore, 'nothing delivered yet');
  await c.redis.stop({ signal: 'SIGKILL' });
  await c.redis.restart();
  await c.until('the api answers again after the restart', async () => (await c.api(api, 'GET', `/music/v1/songs/${queuedSongs[0]}`)).status === 200);
  t.equal((await song(queuedSongs[0]!))['status'], 'queued', 'the queued song survived the restart');

  await Promise.all([c.spawn('workerC', 'worker'), c.spawn('workerD', 'worker')]);
  const ended2 = await c.until('the queued stream.ended delivered', async () =>
    c.events().find((e) => e.type === 'stream.ended' && e.data['stream_id'] === live[1]!['id']), 60_000);
  t.equal(ended2.data['reason'], 'deleted');
  for (const id of queuedSongs) {
    const s = await c.until(`song ${id} rendered`, async () => {
      const r = await song(id);
      return r['status'] === 'done' || r['status'] === 'failed' ? r : null;
    }, 120_000);
    t.equal(s['status'], 'done', 'queued before the Redis restart, rendered after it');
  }
  const ids = c.events().map((e) => e.id);
  t.equal(new Set(ids).size, ids.length - 1, 'exactly one event was delivered twice (the one cut by the kill)');
});
