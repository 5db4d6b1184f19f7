/**
 * The stream supervisor on a real embedded store and a real (idle) media node, with the clock
 * moved by hand: node events move the state and write webhook events in the same update; the
 * sweep ends silent sessions (timeout, ended_at backdated) and sessions over the allowance; CAS
 * keeps two detectors from both ending one session; a stream cycles started → ended → started.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import { createAccountWithKey } from '../../control/ApiKeys.ts';
import { InProcessMediaNodeClient } from '../../streams/InProcessMediaNodeClient.ts';
import { LIVE_STREAMS_PER_PLAN, StreamLifecycle, usageCounter, type LifecycleClock } from '../../streams/StreamLifecycle.ts';
import { StreamService } from '../../streams/StreamService.ts';
import { MediaNode } from '../../media/index.ts';
import { createStore, type Plan, type Store } from '../../store/index.ts';
import { EVENTS_QUEUE, parseEventJob, type EventJobPayload, type WebhookEvent } from '../../webhooks/index.ts';

const T0 = Date.parse('2026-03-10T12:00:00.000Z');

class HandClock implements LifecycleClock {
  ms = T0;
  intervals: (() => void)[] = [];
  now = () => this.ms;
  setInterval(fn: () => void) {
    this.intervals.push(fn);
    return this.intervals.length;
  }
  clearInterval() {}
}

async function setup(t: Test, opts: { plan?: Plan; allowances?: Record<Plan, number | null> } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rv-lifecycle-'));
  const clock = new HandClock();
  const store: Store = await createStore({ dataDir: dir, now: clock.now });
  const logger = pino({ level: 'silent' });
  const node = new MediaNode({ publicUrl: 'https://m.example.test', logger, resolveIngest: async () => null, resolvePlayback: async () => null });
  const media = new InProcessMediaNodeClient({ node, models: ['stabilityai/sd-turbo'], demo: true, logger });
  const service = new StreamService({ store, media, publicUrl: 'https://m.example.test', logger, now: clock.now, ...(opts.allowances ? { allowances: opts.allowances } : {}) });
  const lifecycle = new StreamLifecycle({ store, media, logger, clock, ...(opts.allowances ? { allowances: opts.allowances } : {}) });
  await lifecycle.start();
  const { account } = await createAccountWithKey(store, opts.plan ?? 'pro');
  t.teardown(async () => {
    await lifecycle.close();
    node.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  /** Every webhook event written to the outbox so far, in order. */
  const events = async (): Promise<WebhookEvent[]> => {
    const out: WebhookEvent[] = [];
    for (;;) {
      const job = await store.queue.lease(EVENTS_QUEUE, 60_000);
      if (!job) break;
      out.push(parseEventJob(job.payload)!.event as WebhookEvent); // stream code writes only stream events
      await store.queue.ack(job);
    }
    return out;
  };
  const stream = (await service.create(account, {})).stream;
  return { store, clock, lifecycle, service, account, stream, events, media };
}

t.test('created → started on the node started event, writing stream.started with the change', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream, events } = await setup(t);
  t.equal(clock.intervals.length, 1, 'the sweep runs on the injected timer');
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 + 1000 });
  const rec = await store.streams.get(stream.id);
  t.match(rec, { state: 'started', startedAt: new Date(T0 + 1000).toISOString(), lastLiveAt: new Date(T0 + 1000).toISOString(), nodeId: 'local' });
  const evs = await events();
  t.equal(evs.length, 1);
  t.match(evs[0], { type: 'stream.started', data: { stream_id: stream.id, pipeline_id: 'streamdiffusion', started_at: new Date(T0 + 1000).toISOString(), created_at: stream.created_at, gateway_host: 'm.example.test' } });
  t.match(evs[0]!.id, /^evt_/);

  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 + 5000 });
  t.same(await events(), [], 'a reconnect inside the window continues the session: no second started');
  t.equal((await store.streams.get(stream.id))?.startedAt, new Date(T0 + 1000).toISOString(), 'the session keeps its start');
});

t.test('silence past the window ends the session with timeout, ended_at backdated to the last signal', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream, events, account } = await setup(t);
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 });
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: T0 + 5000, outputFps: 30 });
  await lifecycle.handle({ type: 'ended', nodeId: 'local', streamId: stream.id, startedAt: T0, endedAt: T0 + 7400, reason: 'timeout' });
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: T0 + 6000, outputFps: 30 });
  t.equal((await store.streams.get(stream.id))?.lastLiveAt, new Date(T0 + 7400).toISOString(), 'lastLiveAt only moves forward');
  await events();

  clock.ms = T0 + 7400 + lifecycle.timeoutMs - 1;
  await lifecycle.sweep();
  t.equal((await store.streams.get(stream.id))?.state, 'started', 'not yet: inside the window');
  clock.ms = T0 + 7400 + lifecycle.timeoutMs;
  clock.intervals[0]!();
  await lifecycle.sweep();
  const rec = await store.streams.get(stream.id);
  t.match(rec, { state: 'ended', endReason: 'timeout', endedAt: new Date(T0 + 7400).toISOString() });
  t.ok(lifecycle.timeoutMs + 5000 <= 45_000, 'window + sweep interval ≤ 45 s: detected within the spec limit');
  const evs = await events();
  t.equal(evs.length, 1, 'exactly one stream.ended');
  t.match(evs[0], { type: 'stream.ended', data: { stream_id: stream.id, reason: 'timeout', started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 7400).toISOString(), duration_seconds: 7 } });
  t.equal(Date.parse(evs[0]!.created_at), clock.ms, 'noticed now, reported as of the last signal');
  t.equal(await store.counters.get(usageCounter(account.id, '2026-03')), 7, 'the session counted against the month');

  // Reconnect after the end: a fresh session and a fresh stream.started.
  clock.ms += 10_000;
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: clock.ms });
  const again = await events();
  t.equal(again.length, 1);
  t.match(again[0], { type: 'stream.started', data: { started_at: new Date(clock.ms).toISOString() } });
  t.not(again[0]!.id, evs[0]!.id);
  t.match(await store.streams.get(stream.id), { state: 'started', endedAt: null, endReason: null });
});

t.test('two detectors racing: only one ends the session and one event is written', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream, events, service, account } = await setup(t);
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 });
  await events();
  clock.ms = T0 + 60_000;
  // A sweep and a DELETE at once: the CAS lets exactly one through.
  await Promise.all([lifecycle.sweep(), service.delete(account, stream.id), lifecycle.sweep()]);
  const evs = await events();
  t.equal(evs.filter((e) => e.type === 'stream.ended').length, 1, 'one stream.ended');
  const rec = await store.streams.get(stream.id);
  t.equal(rec?.state, 'ended');
  t.equal(rec?.deleted, true, 'the delete still lands');
  t.ok(rec?.endReason === 'timeout' || rec?.endReason === 'deleted', `reason ${rec?.endReason}`);
});

t.test('DELETE of a started stream ends it with reason deleted', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream, events, service, account } = await setup(t);
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 });
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: T0 + 20_000, outputFps: 30 });
  await events();
  clock.ms = T0 + 21_000;
  await service.delete(account, stream.id);
  const evs = await events();
  t.equal(evs.length, 1);
  t.match(evs[0], { type: 'stream.ended', data: { reason: 'deleted', ended_at: new Date(T0 + 20_000).toISOString(), duration_seconds: 20 } });
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: clock.ms });
  t.same(await events(), [], 'a deleted stream never starts again');
  t.equal((await store.streams.get(stream.id))?.state, 'ended');
});

t.test('the monthly streaming allowance running out ends live sessions with credits_exhausted', { timeout: 20_000 }, async (t) => {
  const allowances = { anonymous: 60, free: 120, songs: 120, pro: 3600, max: 3600, internal: null };
  const { store, clock, lifecycle, stream, events, account, service } = await setup(t, { plan: 'free', allowances });
  await store.counters.add(usageCounter(account.id, '2026-03'), 100);
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 });
  await events();
  clock.ms = T0 + 10_000;
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: clock.ms, outputFps: 30 });
  await lifecycle.sweep();
  t.equal((await store.streams.get(stream.id))?.state, 'started', '110 s of 120: still running');
  clock.ms = T0 + 20_000;
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: clock.ms, outputFps: 30 });
  await lifecycle.sweep();
  const evs = await events();
  t.equal(evs.length, 1);
  t.match(evs[0], { type: 'stream.ended', data: { reason: 'credits_exhausted', duration_seconds: 20 } });
  t.equal(await store.counters.get(usageCounter(account.id, '2026-03')), 120);
  t.match(
    await service.resolveIngest(stream.id, stream.stream_key),
    { refused: /streaming allowance of the free plan \(2 min\) is used up/ },
    'a publisher with a valid key is refused (WHIP 402) while the allowance is used up',
  );
  clock.ms = Date.parse('2026-04-01T00:00:01Z');
  t.match(await service.resolveIngest(stream.id, stream.stream_key), { streamId: stream.id }, 'a new month brings a new allowance');
});

t.test('internal plan has no allowance; wrong stream key is refused at ingest', { timeout: 20_000 }, async (t) => {
  const { service, stream, account, store } = await setup(t, { plan: 'internal' });
  t.ok(await service.resolveIngest(stream.id, stream.stream_key));
  // Change the last character to a different one (replacing it by a fixed 'x' kept the key 1 time in 64).
  const last = stream.stream_key.at(-1);
  t.equal(await service.resolveIngest(stream.id, `${stream.stream_key.slice(0, -1)}${last === 'x' ? 'y' : 'x'}`), null);
  t.equal(await service.resolveIngest('str_nope', stream.stream_key), null);
  const stored = await store.streams.get(stream.id);
  t.same(
    await service.resolvePlayback(stream.output_playback_id),
    { streamId: stream.id, accountId: account.id, ...(stored?.nodeId ? { nodeId: stored.nodeId } : {}) },
    'playback names the owner (what bounds its waiting viewers) and the node that holds the stream (an edge pulls from it)',
  );
});

t.test("an account's plan caps its live streams at once: a publisher past it is refused with 429, a reconnect of a live one is not", { timeout: 20_000 }, async (t) => {
  const { service, stream, account, lifecycle } = await setup(t, { plan: 'free' });
  const limit = LIVE_STREAMS_PER_PLAN.free ?? 0;
  t.equal(limit, 2, 'free: two live streams at once');
  const others = [];
  for (let i = 0; i < limit; i++) others.push((await service.create(account, { params: { model_id: 'stabilityai/sd-turbo' } })).stream);
  for (const s of others) await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: s.id, startedAt: T0 });
  const refused = await service.resolveIngest(stream.id, stream.stream_key);
  t.match(refused, { refused: /free plan allows 2 live streams at once/, status: 429 }, 'a third stream is refused (WHIP 429)');
  t.match(await service.resolveIngest(others[0]?.id ?? '', others[0]?.stream_key ?? ''), { streamId: others[0]?.id }, 'a live stream reconnecting is let in');
  await service.delete(account, others[1]?.id ?? '');
  t.match(await service.resolveIngest(stream.id, stream.stream_key), { streamId: stream.id }, 'once one ends, the third may go live');
});

t.test('silence during a store outage does not count: a sweep whose read was held does not end live streams', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream, events } = await setup(t);
  await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt: T0 });
  await lifecycle.handle({ type: 'live', nodeId: 'local', streamId: stream.id, lastSignalAt: T0 + 10_000, outputFps: 30 });
  await events();
  // A 45 s outage: the read is held and lands after it, when the last signal is 45 s old.
  const listByState = store.streams.listByState.bind(store.streams);
  store.streams.listByState = async (states) => {
    clock.ms = T0 + 55_000;
    return listByState(states);
  };
  clock.ms = T0 + 10_000;
  await lifecycle.sweep();
  store.streams.listByState = listByState;
  t.equal((await store.streams.get(stream.id))?.state, 'started', 'not ended right after the outage');
  t.same(await events(), []);
  clock.ms = T0 + 55_000 + 41_000;
  await lifecycle.sweep();
  const evs = await events();
  t.match(evs, [{ type: 'stream.ended', data: { reason: 'timeout', ended_at: new Date(T0 + 10_000).toISOString() } }], 'still silent a window after the outage: ended, at its real last signal');
});

t.test('each event carries the stream’s next sequence number; stream.ended names its session’s stream.started', { timeout: 20_000 }, async (t) => {
  const { store, clock, lifecycle, stream } = await setup(t);
  const jobs = async () => {
    const out: EventJobPayload[] = [];
    for (let job = await store.queue.lease(EVENTS_QUEUE, 60_000); job; job = await store.queue.lease(EVENTS_QUEUE, 60_000)) {
      out.push(parseEventJob(job.payload)!);
      await store.queue.ack(job);
    }
    return out;
  };
  const session = async () => {
    const startedAt = clock.ms;
    await lifecycle.handle({ type: 'started', nodeId: 'local', streamId: stream.id, startedAt });
    await lifecycle.handle({ type: 'ended', nodeId: 'local', streamId: stream.id, startedAt, endedAt: startedAt + 1000, reason: 'timeout' });
    clock.ms = startedAt + 1000 + lifecycle.timeoutMs;
    await lifecycle.sweep();
    clock.ms += 10_000;
  };
  await session();
  await session();
  const all = await jobs();
  t.same(all.map((j) => [j.event.type, 'sequence' in j.event.data ? j.event.data.sequence : null]), [['stream.started', 1], ['stream.ended', 2], ['stream.started', 3], ['stream.ended', 4]]);
  t.equal(all[0]!.after, undefined, 'a started follows nothing');
  t.equal(all[1]!.after, all[0]!.event.id, 'the first ended follows the first started');
  t.equal(all[3]!.after, all[2]!.event.id, 'the second ended follows the second started');
  t.equal((await store.streams.get(stream.id))?.eventSeq, 4);
});
