/**
 * The dead-node sweep on a real (embedded) store with a hand-moved clock: a node whose heartbeat
 * expired has its started streams ended with `timeout` and `stream.ended` queued in the same
 * write, `ended_at` = the last confirmed-live moment; live nodes and other streams are untouched;
 * nobody is declared dead until reads have been healthy for one TTL.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import { DeadNodeSweeper } from '../../streams/DeadNodeSweeper.ts';
import { DEFAULT_PARAMS } from '../../native/params/index.ts';
import { EmbeddedStore, type StreamRecord } from '../../store/index.ts';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

function setup(t: Test) {
  const clock = { ms: T0 };
  const now = () => clock.ms;
  const dir = mkdtempSync(join(tmpdir(), 'rv-deadnode-'));
  const store = EmbeddedStore.open({ dataDir: dir, now });
  const sweeper = new DeadNodeSweeper({ store, logger: pino({ level: 'silent' }), ttlMs: 4000, now });
  t.teardown(async () => {
    await sweeper.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, sweeper, clock };
}

function stream(id: string, nodeId: string, over: Partial<StreamRecord> = {}): StreamRecord {
  return {
    id,
    accountId: 'acc_1',
    name: '',
    pipeline: 'streamdiffusion',
    params: { ...DEFAULT_PARAMS },
    streamKey: `sk_${id}`,
    playbackId: `pb_${id}`,
    outputRtmpUrl: null,
    fromPlayground: false,
    isSmokeTest: false,
    gatewayHost: 'h',
    nodeId,
    state: 'started',
    createdAt: iso(T0 - 60_000),
    updatedAt: iso(T0 - 60_000),
    startedAt: iso(T0 - 50_000),
    endedAt: null,
    endReason: null,
    lastLiveAt: iso(T0 - 3_000),
    deleted: false,
    ...over,
  };
}

t.test('a dead node’s started streams end with timeout at their last confirmed-live moment; the node leaves the registry', { timeout: 20_000 }, async (t) => {
  const { store, sweeper, clock } = setup(t);
  await store.accounts.create({ id: 'acc_1', plan: 'pro', name: 'a', createdAt: iso(T0) });
  await store.streams.create(stream('str_listed', 'node-a'));
  await store.streams.create(stream('str_unlisted', 'node-a'));
  await store.streams.create(stream('str_other', 'node-b'));
  await store.streams.create(stream('str_created', 'node-a', { state: 'created', startedAt: null, lastLiveAt: null }));
  sweeper.start();
  // node-a's last beat (at T0) listed one stream as live; node-b keeps beating.
  await store.nodes.beat('media', 'node-a', { live: ['str_listed'] }, 4000);
  await store.nodes.beat('media', 'node-b', { live: ['str_other'] }, 4000);

  clock.ms = T0 + 3000;
  t.same(await sweeper.sweep(), [], 'inside the TTL nobody is dead');
  await store.nodes.beat('media', 'node-b', { live: ['str_other'] }, 4000);
  clock.ms = T0 + 4500;
  t.same(await sweeper.sweep(), ['node-a'], 'node-a missed its beats');

  const listed = await store.streams.get('str_listed');
  t.match(listed, { state: 'ended', endReason: 'timeout', endedAt: iso(T0) }, 'listed at the last beat: live until that beat');
  const unlisted = await store.streams.get('str_unlisted');
  t.match(unlisted, { state: 'ended', endReason: 'timeout', endedAt: iso(T0 - 3_000) }, 'not listed: live until its last signal');
  t.equal((await store.streams.get('str_other'))?.state, 'started', 'a live node’s stream is untouched');
  t.equal((await store.streams.get('str_created'))?.state, 'created', 'a stream that never started is untouched');
  t.same((await store.nodes.list('media')).map((n) => n.id), ['node-b'], 'node-a left the registry');

  const events = await store.queue.stats('events');
  t.equal(events.ready, 2, 'one stream.ended queued per ended stream, in the same writes');
  const job = await store.queue.lease('events', 1000);
  t.match(job?.payload, { event: { type: 'stream.ended', data: { reason: 'timeout' } } });

  t.same(await sweeper.sweep(), [], 'the next pass finds nothing more');
});

t.test('two sweepers end each session once', { timeout: 20_000 }, async (t) => {
  const { store, sweeper, clock } = setup(t);
  const other = new DeadNodeSweeper({ store, logger: pino({ level: 'silent' }), ttlMs: 4000, now: () => clock.ms });
  t.teardown(() => other.close());
  await store.accounts.create({ id: 'acc_1', plan: 'pro', name: 'a', createdAt: iso(T0) });
  await store.streams.create(stream('str_1', 'node-a'));
  sweeper.start();
  other.start();
  await store.nodes.beat('media', 'node-a', { live: ['str_1'] }, 4000);
  clock.ms = T0 + 5000;
  await Promise.all([sweeper.sweep(), other.sweep()]);
  t.equal((await store.queue.stats('events')).ready, 1, 'one stream.ended');
});

t.test('a sweeper that just started waits one TTL before declaring deaths', { timeout: 20_000 }, async (t) => {
  const { store, sweeper, clock } = setup(t);
  await store.nodes.beat('media', 'node-a', {}, 4000);
  clock.ms = T0 + 60_000; // e.g. Redis was down for a minute: every beat looks old
  sweeper.start();
  t.same(await sweeper.sweep(), [], 'not yet');
  clock.ms += 4000;
  t.same(await sweeper.sweep(), ['node-a'], 'after a TTL of healthy reads');
});

t.test('a registry read Redis held through an outage is an outage: nodes get one TTL to beat again', { timeout: 20_000 }, async (t) => {
  const { store, sweeper, clock } = setup(t);
  await store.nodes.beat('media', 'node-a', {}, 4000);
  await store.nodes.beat('media', 'node-b', {}, 4000);
  sweeper.start();
  clock.ms = T0 + 2000;
  t.same(await sweeper.sweep(), [], 'both alive');
  // Redis goes away for 15 s; the read is held (ioredis's offline queue) and lands afterwards.
  const list = store.nodes.list.bind(store.nodes);
  store.nodes.list = async (kind) => {
    clock.ms += 15_000;
    return list(kind);
  };
  t.same(await sweeper.sweep(), [], 'the held read does not declare the nodes dead, though every beat is 17 s old');
  store.nodes.list = list;
  await store.nodes.beat('media', 'node-b', {}, 4000); // node-b beats again after the outage; node-a never does
  clock.ms += 3000;
  t.same(await sweeper.sweep(), [], 'still inside the TTL after the outage');
  await store.nodes.beat('media', 'node-b', {}, 4000);
  clock.ms += 1500;
  t.same(await sweeper.sweep(), ['node-a'], 'one TTL after the outage, the node that never beat again is dead');
});
