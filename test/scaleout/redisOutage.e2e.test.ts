/**
 * Redis outages with every role running and a publisher live (api, 2 media, 2 workers, real
 * `reverie serve` processes, Redis with AOF killed with SIGKILL and restarted): after outages of
 * 2, 6 and 15 s no stream is ended, the publisher's WebRTC session goes on (same session id),
 * status recovers, and both media nodes stay registered. What an API caller sees while Redis is
 * down is measured and printed (docs/operations.md states it). A media node killed with `kill -9`
 * afterwards still has its stream ended promptly.
 */
import t from 'tap';
import { Cluster, type Json } from './cluster.ts';

t.test('Redis outages of 2, 6 and 15 s end no stream; the publisher goes on; a dead node is still detected', { timeout: 300_000 }, async (t) => {
  const c = await Cluster.start(t, { appendonly: true });
  // Info-level logs (a few lines a second): a failure's tails then say what each process did.
  const info = { LOG_LEVEL: process.env['SCALEOUT_LOG'] ?? 'info' };
  const media1 = await c.spawn('media1', 'media', info);
  const [media2, api] = await Promise.all([
    c.spawn('media2', 'media', info),
    c.spawn('api', 'api', info),
    c.spawn('worker1', 'worker', { ...info, RENDER_WORKERS: '0' }),
    c.spawn('worker2', 'worker', { ...info, RENDER_WORKERS: '0' }),
  ]);
  await c.until('both media nodes registered', async () => (await c.store.nodes.list('media')).length === 2);
  const hook = await c.api(api, 'POST', '/v1/webhooks', { url: c.receiver.url('/hook'), events: ['stream.started', 'stream.ended'] });
  t.equal(hook.status, 201);
  const created = await c.api(api, 'POST', '/v1/streams', { params: { prompt: 'outage', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201);
  const s = created.body;
  const pub = await c.publish(`${api.url}/live/${s['id']}/whip`, s['stream_key'] as string);
  t.equal(pub.status, 201, 'publisher live');
  await c.until('stream.started', async () => c.events().find((e) => e.type === 'stream.started' && e.data['stream_id'] === s['id']));
  const status = async () => {
    const r = await c.api(api, 'GET', `/v1/streams/${s['id']}/status`);
    return r.status === 200 ? (r.body['data'] as Json) : null;
  };
  let last: unknown = null; // the last status seen, for the failure message
  const online = () =>
    c
      .until('status ONLINE with input', async () => {
        const d = await status().catch((err: unknown) => ({ error: String(err) }) as Json);
        last = d;
        return d && d['state'] === 'ONLINE' && (d['inference_status'] as Json | undefined)?.['input_fps'] > 0 ? d : null;
      }, 60_000)
      .catch(async (err: unknown) => {
        // What a CI failure needs first: the api's view, the record, the registry, the events; then the logs.
        const record = await c.store.streams.get(s['id'] as string).catch((e: unknown) => String(e));
        const nodes = await c.store.nodes.list('media').catch((e: unknown) => String(e));
        const now = Date.now();
        const registry = Array.isArray(nodes) ? nodes.map((n) => ({ id: n.id, beatAgoMs: now - n.lastBeatMs, expiresInMs: n.expiresAtMs - now })) : nodes;
        const facts = { lastStatus: last, record, registry, events: c.events().map((e) => e.type) };
        throw new Error(`status never ONLINE again: ${JSON.stringify(facts)}\n${(err as Error).message}`);
      });
  const before = await online();
  const session = before['request_id'] as string;
  t.match(session, /^[0-9a-f]{32}$/, 'the publisher session');

  for (const outageMs of [2_000, 6_000, 15_000]) {
    await c.redis.stop({ signal: 'SIGKILL' });
    const downAt = Date.now();
    // An API caller during the outage: what does it see, and when?
    const during = c
      .api(api, 'GET', `/v1/streams/${s['id']}/status`)
      .then((r) => ({ status: r.status, ms: Date.now() - downAt }))
      .catch((err: unknown) => ({ status: 0, ms: Date.now() - downAt, error: String(err) }));
    await new Promise((r) => setTimeout(r, outageMs)); // the outage itself (the scenario, not a wait for a result)
    await c.redis.restart();
    const upAt = Date.now();
    const caller = await during;
    t.comment(`outage ${outageMs / 1000} s: a status request made during it answered ${caller.status} after ${caller.ms} ms (Redis back after ${upAt - downAt} ms)`);
    t.ok(caller.status === 200 || caller.status === 503, `the request during the outage was held, then answered 200 or 503 (${caller.status})`);
    const after = await online();
    t.comment(`outage ${outageMs / 1000} s: status ONLINE again ${Date.now() - upAt} ms after Redis returned`);
    t.equal(after['request_id'], session, `after ${outageMs / 1000} s: the same publisher session goes on`);
    t.equal((await c.store.streams.get(s['id'] as string))?.state, 'started', `after ${outageMs / 1000} s: the stream is still started`);
    // Give the sweepers time to (wrongly) act: a TTL and more after Redis is back.
    await c.until('nodes beating again', async () => (await c.store.nodes.list('media')).filter((n) => n.expiresAtMs > Date.now()).length === 2, 20_000);
    await new Promise((r) => setTimeout(r, 6_000)); // longer than the node TTL (4 s) + a sweep: what a wrong sweep would need
    t.same(c.events().filter((e) => e.type === 'stream.ended'), [], `after ${outageMs / 1000} s: no stream.ended`);
    t.equal((await c.store.nodes.list('media')).length, 2, `after ${outageMs / 1000} s: both media nodes still registered (the idle one too)`);
  }

  // A node that really dies is still found promptly.
  const owner = (await c.store.streams.get(s['id'] as string))?.nodeId;
  const victim = owner === `127.0.0.1:${media1.port}` ? media1 : media2;
  await c.kill(victim, 'SIGKILL');
  const killedAt = Date.now();
  const ended = await c.until('stream.ended after kill -9', async () => c.events().find((e) => e.type === 'stream.ended' && e.data['stream_id'] === s['id']), 30_000);
  t.equal(ended.data['reason'], 'timeout');
  t.ok(Date.now() - killedAt < 15_000, `ended ${Date.now() - killedAt} ms after the kill`);
  pub.stop();
});
