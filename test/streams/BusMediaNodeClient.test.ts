/**
 * The scale-out media-node client and the agent on the node's side, over a real store bus and
 * registry: the embedded store (one process) and a real redis-server with the client and the
 * agent on separate connections (two "processes"). A real MediaNode holds the stream (no
 * publisher: an update is applied to the LiveStream, the same call a live pipeline gets).
 */
import pino from 'pino';
import t, { type Test } from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BusMediaNodeClient, MEDIA_EVENTS_CHANNEL, MediaNodeUnreachableError } from '../../streams/BusMediaNodeClient.ts';
import { InProcessMediaNodeClient } from '../../streams/InProcessMediaNodeClient.ts';
import { MediaNodeAgent } from '../../streams/MediaNodeAgent.ts';
import type { NodeEvent, ParamsUpdate } from '../../streams/MediaNodeClient.ts';
import { MediaNode, type Frame, type FrameProcessorFactory } from '../../media/index.ts';
import { DEFAULT_PARAMS, type ParamsChange } from '../../native/params/index.ts';
import { EmbeddedStore, RedisStore, type Store } from '../../store/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { STREAM_ID, startMediaServer } from '../media/harness.ts';
import { wrtcPublish } from '../media/wrtcPeers.ts';

const logger = pino({ level: 'silent' });
const redis = await startRedis(t);
let prefixes = 0;

type Pair = { client: Store; node: Store };

/** Two views of one store: the client's and the node's (separate connections on Redis). */
async function stores(t: Test, kind: 'embedded' | 'redis'): Promise<Pair> {
  if (kind === 'embedded') {
    const dir = mkdtempSync(join(tmpdir(), 'rv-busclient-'));
    const store = EmbeddedStore.open({ dataDir: dir });
    t.teardown(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    return { client: store, node: store };
  }
  const prefix = `bus${prefixes++}:`;
  const [client, node] = await Promise.all([RedisStore.open({ url: redis.url, prefix }), RedisStore.open({ url: redis.url, prefix })]);
  t.teardown(async () => {
    await client.close();
    await node.close();
  });
  return { client, node };
}

function startNode(t: Test, store: Store, nodeId: string, publicUrl = `http://${nodeId}`, songsDir?: string) {
  const node = new MediaNode({ publicUrl, logger, capacity: 3, resolveIngest: async () => null, resolvePlayback: async () => null, ...(songsDir ? { songsDir } : {}) });
  const local = new InProcessMediaNodeClient({ node, nodeId, models: ['stabilityai/sd-turbo'], demo: true, logger });
  const agent = new MediaNodeAgent({ store, local, logger });
  t.teardown(async () => {
    node.close();
    await agent.close();
  });
  return { node, local, agent };
}

const hot = (streamId: string, prompt: string): ParamsUpdate => ({ streamId, change: { target: { ...DEFAULT_PARAMS, prompt }, plan: { mode: 'hot', hot: ['prompt'], reload: [] } } });

for (const kind of ['embedded', 'redis'] as const) {
  t.test(`${kind}: a registered node is listed, and updates, status and end reach it and apply`, { timeout: 30_000 }, async (t) => {
    const s = await stores(t, kind);
    const { node, agent } = startNode(t, s.node, 'node-a');
    await agent.start();
    const client = new BusMediaNodeClient({ store: s.client, logger });
    t.teardown(() => client.close());

    const [listed] = await client.nodes();
    t.ok((listed?.countedAt ?? 0) > 0, 'counted at its beat');
    t.same(await client.nodes(), [{ id: 'node-a', publicUrl: 'http://node-a', models: ['stabilityai/sd-turbo'], demo: true, capacity: 3, load: 0, viewers: 0, viewerCapacity: 1000, audience: {}, countedAt: listed?.countedAt }], 'the node as it registered, with its viewers');
    t.same(await client.updateParams('node-a', hot('str_1', 'a cat')), { delivered: false }, 'a stream the node does not hold: not delivered');
    t.equal(await client.status('node-a', 'str_1'), null);

    node.createStream('str_1');
    const r = await client.updateParams('node-a', hot('str_1', 'a dog'));
    t.same(r, { delivered: true }, 'delivered (no processor runs the idle stream, so no plan of its own)');
    t.equal(node.getStream('str_1')?.status().params['prompt'], 'a dog', 'applied on the node');
    const status = await client.status('node-a', 'str_1');
    t.match(status, { streamId: 'str_1', state: 'idle', lastParams: { prompt: 'a dog' }, restartCount: 0, viewers: 0 }, 'live values from the node');
    t.type(status?.lastParamsUpdateTime, 'number');

    await agent.beat();
    t.equal((await client.nodes())[0]?.load, node.activeStreamCount, 'the beat carries the load: streams with a publisher (none here; a stream waiting for one costs no capacity)');
    t.equal(await client.endStream('node-a', 'str_1'), true, 'ended on the node');
    t.equal(node.getStream('str_1'), undefined);
    t.equal(await client.endStream('node-a', 'str_1'), false, 'twice: not there');
  });

  t.test(`${kind}: a soundtrack crosses the bus: the node reads the take from the shared songs folder, reports where it is, and clears it`, { timeout: 30_000 }, async (t) => {
    const s = await stores(t, kind);
    const songsDir = mkdtempSync(join(tmpdir(), 'rv-songs-'));
    t.teardown(() => rmSync(songsDir, { recursive: true, force: true }));
    // A 2 s take as the renderer writes it: 44-byte header, 48 kHz 16-bit stereo.
    const frames = 96_000;
    const wav = Buffer.alloc(44 + frames * 4);
    wav.write('RIFF', 0, 'ascii');
    wav.writeUInt32LE(36 + frames * 4, 4);
    wav.write('WAVEfmt ', 8, 'ascii');
    wav.writeUInt32LE(16, 16);
    wav.writeUInt16LE(1, 20);
    wav.writeUInt16LE(2, 22);
    wav.writeUInt32LE(48_000, 24);
    wav.writeUInt32LE(192_000, 28);
    wav.writeUInt16LE(4, 32);
    wav.writeUInt16LE(16, 34);
    wav.write('data', 36, 'ascii');
    wav.writeUInt32LE(frames * 4, 40);
    mkdirSync(join(songsDir, 'sng_bus'));
    writeFileSync(join(songsDir, 'sng_bus', '1.wav'), wav);
    const { node, agent } = startNode(t, s.node, 'node-st', undefined, songsDir);
    await agent.start();
    const client = new BusMediaNodeClient({ store: s.client, logger });
    t.teardown(() => client.close());
    const spec = { songId: 'sng_bus', take: 1 as const, wavKey: 'songs/sng_bus/1.wav', startAt: Date.now() - 500, loop: true, gainDb: -3, duckPublisherDb: -12 };
    t.equal(await client.setSoundtrack('node-st', 'str_st', spec), false, 'a stream the node does not hold: false');
    node.createStream('str_st');
    t.equal(await client.setSoundtrack('node-st', 'str_st', spec), true, 'held: taken');
    const st = (await client.status('node-st', 'str_st'))?.soundtrack;
    t.match(st, { songId: 'sng_bus', take: 1, state: 'playing', loop: true, gainDb: -3, duckPublisherDb: -12, durationS: 2 }, 'the node plays it and says so');
    t.ok((st?.positionS ?? -1) >= 0.5 && (st?.positionS ?? 9) < 2, `half a second in, or more (${st?.positionS} s)`);
    await t.rejects(client.setSoundtrack('node-st', 'str_st', { ...spec, songId: 'sng_none', wavKey: 'songs/sng_none/1.wav' }), 'a take the node cannot read: the error comes back');
    t.equal(await client.setSoundtrack('node-st', 'str_st', null), true, 'cleared');
    t.equal((await client.status('node-st', 'str_st'))?.soundtrack, null, 'nothing plays');
  });

  t.test(`${kind}: a timed change crosses the bus, waits on the node for its time, and its landing comes back`, { timeout: 30_000 }, async (t) => {
    const s = await stores(t, kind);
    const { node, agent } = startNode(t, s.node, 'node-a');
    await agent.start();
    const client = new BusMediaNodeClient({ store: s.client, logger });
    t.teardown(() => client.close());
    const landed: NodeEvent[] = [];
    let gotLanding: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => (gotLanding = resolve));
    t.teardown(
      await client.subscribe((e) => {
        if (e.type !== 'landed') return;
        landed.push(e);
        gotLanding();
      }),
    );
    node.createStream('str_1');
    const at = Date.now() + 300;
    const r = await client.updateParams('node-a', { ...hot('str_1', 'on time'), schedule: { id: 'k1', applyAt: at } });
    t.same(r, { delivered: true, scheduled: true }, 'the node holds it');
    t.not(node.getStream('str_1')?.status().params['prompt'], 'on time', 'not applied before its time');
    const never = await client.updateParams('node-a', { ...hot('str_1', 'never'), schedule: { id: 'k2', applyAt: Date.now() + 60_000 } });
    t.equal(never.scheduled, true);
    t.equal(await client.cancelScheduled('node-a', 'str_1', 'k2'), true, 'cancelled over the bus');
    t.equal(await client.cancelScheduled('node-a', 'str_1', 'k2'), false, 'once');
    await arrived;
    t.equal(node.getStream('str_1')?.status().params['prompt'], 'on time', 'applied on the node');
    t.match(landed, [{ type: 'landed', nodeId: 'node-a', streamId: 'str_1', id: 'k1', kind: 'applied', error: null, frame: null }], 'its landing, without a frame (no publisher)');
    const e = landed[0] as Extract<NodeEvent, { type: 'landed' }>;
    t.ok(e.appliedAt >= at, `not before its time (${e.appliedAt - at} ms after)`);
  });

  t.test(`${kind}: node events fan in to every subscriber`, { timeout: 30_000 }, async (t) => {
    const s = await stores(t, kind);
    const client = new BusMediaNodeClient({ store: s.client, logger });
    t.teardown(() => client.close());
    const got: NodeEvent[] = [];
    let arrivedResolve: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => (arrivedResolve = resolve));
    // Resolves once the subscription is in place on the server.
    const off = await client.subscribe((e) => {
      got.push(e);
      if (got.length === 2) arrivedResolve();
    });
    t.teardown(off);
    const events: NodeEvent[] = [
      { type: 'started', nodeId: 'node-a', streamId: 'str_1', startedAt: 1 },
      { type: 'ended', nodeId: 'node-a', streamId: 'str_1', startedAt: 1, endedAt: 2, reason: 'closed' },
    ];
    for (const e of events) await s.node.bus.publish(MEDIA_EVENTS_CHANNEL, e);
    await arrived;
    t.same(got, events, 'in order, as published by the node side');
  });

  t.test(`${kind}: dead nodes are not listed and answer at once; a silent one times out`, { timeout: 30_000 }, async (t) => {
    const s = await stores(t, kind);
    // The client's clock runs 1 s ahead: a 1 ms beat is expired for it, a 60 s one is not.
    const client = new BusMediaNodeClient({ store: s.client, logger, requestTimeoutMs: 300, now: () => Date.now() + 1000 });
    t.teardown(() => client.close());
    await s.node.nodes.beat('media', 'dead', { publicUrl: 'http://dead', models: [], capacity: 1, load: 0 }, 1);
    await s.node.nodes.beat('media', 'silent', { publicUrl: 'http://silent', models: [], capacity: 1, load: 0 }, 60_000);
    t.same((await client.nodes()).map((n) => n.id), ['silent'], 'expired entries are left out');
    const t0 = performance.now();
    t.equal(await client.status('dead', 'str_1'), null, 'a dead node holds nothing');
    t.same(await client.updateParams('dead', hot('str_1', 'x')), { delivered: false });
    t.equal(await client.endStream('dead', 'str_1'), false);
    t.ok(performance.now() - t0 < 250, 'without waiting for a reply');

    await t.rejects(client.status('silent', 'str_1'), MediaNodeUnreachableError, 'no agent answers: unreachable after the timeout');
    const r = await client.updateParams('silent', hot('str_1', 'x'));
    t.equal(r.delivered, false);
    t.match(r.error, /did not answer updateParams in 300 ms/, 'the PATCH reports the node error');
  });
}

t.test('redis: placement ties rotate across clients (api replicas) through a shared counter', { timeout: 30_000 }, async (t) => {
  const s = await stores(t, 'redis');
  for (const id of ['node-a', 'node-b']) await s.node.nodes.beat('media', id, { publicUrl: `http://${id}`, models: ['m'], capacity: 4, load: 0 }, 60_000);
  const api1 = new BusMediaNodeClient({ store: s.client, logger });
  const api2 = new BusMediaNodeClient({ store: s.node, logger });
  t.teardown(async () => {
    await api1.close();
    await api2.close();
  });
  const firsts = [];
  for (let i = 0; i < 4; i++) firsts.push((await (i % 2 ? api2 : api1).nodes())[0]?.id);
  t.equal(new Set(firsts).size, 2, `alternating replicas still alternate nodes (${firsts.join(', ')})`);
  t.not(firsts[0], firsts[1]);
});

t.test('redis: closing the agent leaves the registry', { timeout: 30_000 }, async (t) => {
  const s = await stores(t, 'redis');
  const { agent } = startNode(t, s.node, 'node-c');
  await agent.start();
  t.same((await s.client.nodes.list('media')).map((n) => n.id), ['node-c']);
  await agent.close();
  await agent.close();
  t.same(await s.client.nodes.list('media'), [], 'gone on close (idempotent)');
});

t.test('redis: the plan the stream’s processor ran, its restart count and its error come back over the bus', { timeout: 90_000 }, async (t) => {
  const s = await stores(t, 'redis');
  // A processor of the test's own at the node's seam: it answers a prompt change as a reload (the
  // API's table says hot), so the answer can only be the node's, and keeps its own restart count.
  let restarts = 0;
  const processor: FrameProcessorFactory = async () => ({
    process: async (frame: Frame) => frame,
    update: ({ target, plan }: ParamsChange) => {
      const keys = [...plan.hot, ...plan.reload];
      if (keys.includes('guidance_scale') && target.guidance_scale > 10) throw new Error('guidance_scale too high for this engine');
      restarts++;
      return { mode: 'reload' as const, hot: [], reload: keys };
    },
    status: () => ({ restartCount: restarts, lastRestartTime: Date.now(), lastRestartLogs: [`reload ${restarts}`], lastError: null, lastErrorTime: null }),
    close: () => undefined,
  });
  const srv = await startMediaServer(t, { createProcessor: processor });
  const local = new InProcessMediaNodeClient({ node: srv.node, nodeId: 'node-p', models: ['stabilityai/sd-turbo'], demo: true, logger });
  const agent = new MediaNodeAgent({ store: s.node, local, logger });
  t.teardown(() => agent.close());
  await agent.start();
  const client = new BusMediaNodeClient({ store: s.client, logger });
  t.teardown(() => client.close());

  t.equal((await wrtcPublish(t, srv.whipUrl, [200, 200, 200])).status, 201, 'WHIP publish accepted');
  const deadline = Date.now() + 60_000;
  while (srv.node.getStream(STREAM_ID)?.status().processor !== 'ready') {
    if (Date.now() > deadline) throw new Error('the processor was not built within 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  const r = await client.updateParams('node-p', hot(STREAM_ID, 'a heron'));
  t.same(r, { delivered: true, plan: { mode: 'reload', hot: [], reload: ['prompt'] } }, 'the answer is the plan the processor ran, not the one sent');
  const st = await client.status('node-p', STREAM_ID);
  t.match(st, { restartCount: 1, lastRestartLogs: ['reload 1'], lastError: null, lastParams: { prompt: 'a heron' } }, 'status reads the processor’s own restart count');

  // An api older than ParamsChange sent the params and their plan side by side (a rolling upgrade).
  const older = { streamId: STREAM_ID, params: { ...DEFAULT_PARAMS, prompt: 'an older api' }, mode: 'hot', hot: ['prompt'], reload: [] } as unknown as ParamsUpdate;
  t.match(await client.updateParams('node-p', older), { delivered: true, plan: { mode: 'reload', reload: ['prompt'] } }, "an older api's update still reaches the processor");
  t.match(await client.status('node-p', STREAM_ID), { lastParams: { prompt: 'an older api' } }, 'and the node holds it');

  const refused = await client.updateParams('node-p', { streamId: STREAM_ID, change: { target: { ...DEFAULT_PARAMS, guidance_scale: 20 }, plan: { mode: 'hot', hot: ['guidance_scale'], reload: [] } } });
  t.match(refused, { delivered: true, error: /guidance_scale too high/ }, 'a refusal comes back as the node error');
  t.notOk('plan' in refused, 'and with no plan');
  const after = await client.status('node-p', STREAM_ID);
  t.match(after, { restartCount: 2, lastError: /guidance_scale too high/ }, 'the node recorded the refusal as its last error; no restart was counted for it');
  t.type(after?.lastErrorTime, 'number', 'stamped by the node when it happened');
});
