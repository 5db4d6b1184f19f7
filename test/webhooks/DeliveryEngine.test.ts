import t from 'tap';
import Stripe from 'stripe';
import { RedisStore } from '../../store/index.ts';
import type { EmbeddedStore } from '../../store/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { createWebhooks, RETRY_DELAYS_MS, streamEndedEvent, streamStartedEvent, webhookEventJob } from '../../webhooks/index.ts';
import type { DeliveryEngineOptions, WebhookEndpointView, WebhookEvent } from '../../webhooks/index.ts';
import { makeTls, ManualClock, openStore, startWebhooks, TEST_STREAM, testLogger, TestReceiver, waitUntil } from './helpers.ts';

const stripe = new Stripe('sk_test_dummy');
const tls = makeTls();
t.teardown(() => tls.cleanup());

type Teardown = { teardown: (fn: () => unknown) => void };

async function setup(t: Teardown, engine: Omit<DeliveryEngineOptions, 'store' | 'client' | 'logger' | 'now'> = {}) {
  const clock = new ManualClock(Date.now());
  const { store } = openStore(t, clock.now);
  const { receiver, wh } = await startWebhooks(t, { store, clock, tls, engine });
  return { clock, store, receiver, wh, service: wh.service };
}

const stream = TEST_STREAM;

async function emit(store: EmbeddedStore, clock: ManualClock, accountId = 'acc_1', type: 'stream.started' | 'stream.ended' = 'stream.ended'): Promise<WebhookEvent> {
  const event = type === 'stream.ended' ? streamEndedEvent(stream, { nowMs: clock.ms }) : streamStartedEvent(stream, { nowMs: clock.ms });
  await store.queue.enqueue(webhookEventJob(event, accountId));
  return event;
}

function verify(body: string, header: string | string[] | undefined, secret: string | undefined, clock: ManualClock): unknown {
  return stripe.webhooks.constructEvent(body, String(header), String(secret), 300, undefined, clock.ms);
}

/** Waits until the delivery for (event, endpoint) has made `attempts` sends and settled. */
async function settled(store: EmbeddedStore, endpoint: WebhookEndpointView, eventId: string, attempts: number) {
  let found = null as Awaited<ReturnType<EmbeddedStore['webhooks']['getDelivery']>>;
  await waitUntil(async () => {
    const page = await store.webhooks.listDeliveries(endpoint.id, {}, { limit: 100 });
    found = page.items.find((d) => d.eventId === eventId) ?? null;
    if (!found || found.attempts !== attempts) return false;
    if (found.status !== 'pending') return true;
    // Pending: settled once its job is back in the delayed set.
    const stats = await store.webhooks.deliveryQueueStats();
    return found.nextAttemptAt !== null && stats.leased === 0;
  }, `delivery ${eventId} at ${attempts} attempts`);
  if (!found) throw new Error('unreachable');
  return found;
}

void t.test('an event reaches every active subscribed endpoint once, signed so stripe verifies, same id everywhere', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  const a = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.started', 'stream.ended'] });
  await service.create('acc_1', { url: receiver.url('/b'), events: ['stream.started'] });
  const c = await service.create('acc_1', { url: receiver.url('/c'), events: ['stream.ended'] });
  await service.update('acc_1', c.id, { is_active: false });
  const d = await service.create('acc_1', { url: receiver.url('/d'), events: ['stream.ended'] });
  await service.create('acc_2', { url: receiver.url('/other'), events: ['stream.ended'] });
  const event = await emit(store, clock);
  await receiver.waitForCount(2);
  await settled(store, a, event.id, 1);
  await settled(store, d, event.id, 1);
  t.same(receiver.requests.map((r) => r.path).sort(), ['/a', '/d'], 'only active, subscribed endpoints of the account');
  const secrets: Record<string, string | undefined> = { '/a': a.secret, '/d': d.secret };
  for (const req of receiver.requests) {
    const parsed = verify(req.body, req.headers['reverie-webhook-signature'], secrets[req.path], clock) as WebhookEvent;
    t.same(parsed, event, 'body is the event envelope');
    t.equal(req.headers['reverie-webhook-id'], event.id);
    t.equal(req.headers['reverie-webhook-event'], 'stream.ended');
    t.equal(req.headers['reverie-webhook-timestamp'], String(Math.floor(clock.ms / 1000)));
    t.equal(req.headers['content-type'], 'application/json');
  }
  const rec = await settled(store, a, event.id, 1);
  t.equal(rec.status, 'succeeded');
  t.equal(rec.responseStatus, 200);
  t.equal(rec.responseBody, 'ok');
  t.equal(rec.streamId, 'str_1');
  t.equal(rec.payload, JSON.stringify(event));
  // The same event dispatched again (an outbox replay) makes no second delivery and no send.
  t.equal(await store.queue.enqueue(webhookEventJob(event, 'acc_1')), true);
  await waitUntil(async () => {
    const s = await store.queue.stats('events');
    return s.ready + s.leased === 0;
  }, 'replayed event dispatched');
  t.equal((await store.webhooks.listDeliveries(a.id, {}, { limit: 10 })).items.length, 1);
  t.equal((await store.webhooks.deliveryQueueStats()).ready, 0);
  t.equal(receiver.requests.length, 2);
});

void t.test('a receiver that always fails gets exactly 8 sends, 15s … 16m apart, one event id, then the delivery is failed', { timeout: 30_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  receiver.reply = () => ({ status: 503, body: 'down' });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  // Spec "Limits": delivery attempts 8; "All 8 attempts used → failed". The 7 gaps between the
  // 8 sends are the spec's first 7 spacings.
  const gaps = [15e3, 30e3, 60e3, 120e3, 240e3, 480e3, 960e3];
  await receiver.waitForCount(1);
  let rec = await settled(store, e, event.id, 1);
  for (const [i, delay] of gaps.entries()) {
    t.equal(rec.status, 'pending');
    t.equal(rec.responseStatus, 503);
    t.equal(rec.error, 'http_status: 503');
    t.equal(Date.parse(rec.nextAttemptAt ?? ''), clock.ms + delay, `retry ${i + 1} scheduled ${delay / 1000}s later`);
    clock.advance(delay - 1);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 1, leased: 0 }, 'not due 1 ms early');
    clock.advance(1);
    await receiver.waitForCount(i + 2);
    rec = await settled(store, e, event.id, i + 2);
  }
  t.equal(rec.status, 'failed', 'the 8th failed send ends the delivery');
  t.equal(rec.attempts, 8);
  t.equal(rec.nextAttemptAt, null);
  t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 }, 'job gone: nothing left to send');
  // Well past where a 9th send would have been due (32 min more): still nothing queued, 8 sent.
  clock.advance(2 * 3_600_000);
  t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 });
  t.equal(receiver.requests.length, 8, 'exactly 8 requests reached the receiver');
  // The API's delivery view says the same.
  const view = (await service.deliveries('acc_1', e.id)).items.find((d) => d.event_id === event.id);
  t.match(view, { status: 'failed', attempts: 8, next_attempt_at: null, response_status: 503, error: 'http_status: 503' });
  const ts = receiver.requests.map((r) => Number(r.headers['reverie-webhook-timestamp']));
  t.same(
    ts.slice(1).map((x, i) => (x - (ts[i] as number)) * 1000),
    gaps,
    'gaps between sends follow the schedule',
  );
  t.same(RETRY_DELAYS_MS, gaps, 'the exported schedule is the one sent');
  t.same(new Set(receiver.requests.map((r) => r.headers['reverie-webhook-id'])), new Set([event.id]), 'one event id');
  for (const r of receiver.requests) {
    const sentAt = new ManualClock(Number(r.headers['reverie-webhook-timestamp']) * 1000);
    t.ok(verify(r.body, r.headers['reverie-webhook-signature'], e.secret, sentAt), 'each retry re-signed at send time');
  }
  // A receiver checking the first signature half an hour later rejects it: a fresh t per attempt matters.
  const first = receiver.requests[0];
  t.throws(() => verify(first?.body ?? '', first?.headers['reverie-webhook-signature'], e.secret, clock), /tolerance/);
  t.equal((await service.get('acc_1', e.id)).consecutive_failures, 1, 'the delivery counts once, not per attempt');
});

void t.test('a longer injected schedule still stops at 8 sends', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, { retryDelaysMs: [10, 10, 10, 10, 10, 10, 10, 10, 10, 10] });
  receiver.reply = () => ({ status: 500 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  let rec = await settled(store, e, event.id, 1);
  for (let sends = 2; sends <= 8; sends++) {
    clock.advance(10);
    rec = await settled(store, e, event.id, sends);
  }
  t.equal(rec.status, 'failed');
  t.equal(rec.attempts, 8);
  t.equal(rec.nextAttemptAt, null);
  t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 });
  t.equal(receiver.requests.length, 8);
});

void t.test('jittered retries stay within ±10% of the schedule', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, { random: () => 0.999 });
  receiver.reply = () => ({ status: 500 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  const rec = await settled(store, e, event.id, 1);
  const wait = Date.parse(rec.nextAttemptAt ?? '') - clock.ms;
  t.ok(wait > 15_000 && wait <= 16_500, `first wait ${wait} ms within 15 s +10%`);
});

void t.test('a 3xx is a failure and the redirect is not followed', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  receiver.reply = (r) => (r.path === '/hook' ? { status: 302, headers: { location: receiver.url('/elsewhere') } } : { status: 200 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  const rec = await settled(store, e, event.id, 1);
  t.equal(rec.status, 'pending');
  t.equal(rec.responseStatus, 302);
  t.equal(rec.error, 'redirect: 302 not followed');
  t.same(
    receiver.requests.map((r) => r.path),
    ['/hook'],
  );
});

void t.test('a receiver that hangs fails the attempt at the deadline', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, { timeoutMs: 300, leaseMs: 2_000 });
  receiver.reply = () => 'hang';
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  const rec = await settled(store, e, event.id, 1);
  t.equal(rec.responseStatus, null);
  t.match(rec.error, /^timeout: no complete response within 300 ms/);
});

void t.test('the response body kept on the record is capped at 4 KiB', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  receiver.reply = () => ({ status: 200, body: 'z'.repeat(50_000) });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  const rec = await settled(store, e, event.id, 1);
  t.equal(rec.status, 'succeeded');
  t.equal(rec.responseBody?.length, 4096);
});

void t.test('rotate-secret takes effect at once: the queued retry is signed with the new secret only', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  receiver.reply = () => ({ status: 500 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  await settled(store, e, event.id, 1);
  const rotated = await service.rotateSecret('acc_1', e.id);
  receiver.reply = () => ({ status: 200 });
  clock.advance(15_000);
  await receiver.waitForCount(2);
  const rec = await settled(store, e, event.id, 2);
  t.equal(rec.status, 'succeeded');
  const retry = receiver.requests[1];
  if (!retry) throw new Error('no retry');
  t.ok(verify(retry.body, retry.headers['reverie-webhook-signature'], rotated.secret, clock), 'new secret verifies');
  t.throws(() => verify(retry.body, retry.headers['reverie-webhook-signature'], e.secret, clock), /No signatures found/, 'old secret does not');
  t.match(String(retry.headers['reverie-webhook-signature']).split(',').length, 2, 'exactly one v1: no old-secret signature rides along');
});

void t.test('20 failed deliveries in a row disable the endpoint; a success resets; PATCH is_active re-enables', { timeout: 30_000 }, async (t) => {
  // One send per delivery keeps the test short; the count is per delivery either way.
  const { clock, store, receiver, service } = await setup(t, { retryDelaysMs: [] });
  let ok = false;
  receiver.reply = () => ({ status: ok ? 200 : 500 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const run = async () => {
    const event = await emit(store, clock);
    return settled(store, e, event.id, 1);
  };
  for (let i = 0; i < 19; i++) t.equal((await run()).status, 'failed');
  t.equal((await service.get('acc_1', e.id)).consecutive_failures, 19);
  ok = true;
  t.equal((await run()).status, 'succeeded');
  t.equal((await service.get('acc_1', e.id)).consecutive_failures, 0, 'a success resets the count');
  ok = false;
  for (let i = 0; i < 19; i++) await run();
  t.equal((await service.get('acc_1', e.id)).is_active, true, 'still active at 19');
  await run();
  const disabled = await service.get('acc_1', e.id);
  t.equal(disabled.is_active, false, 'disabled at 20');
  t.equal(disabled.consecutive_failures, 20);
  const sent = receiver.requests.length;
  const skipped = await emit(store, clock);
  await waitUntil(async () => (await store.queue.stats('events')).ready + (await store.queue.stats('events')).leased === 0, 'event dispatched');
  t.equal((await store.webhooks.listDeliveries(e.id, {}, { limit: 100 })).items.filter((d) => d.eventId === skipped.id).length, 0, 'no delivery for a disabled endpoint');
  t.equal(receiver.requests.length, sent);
  const back = await service.update('acc_1', e.id, { is_active: true });
  t.equal(back.is_active, true);
  t.equal(back.consecutive_failures, 0);
  ok = true;
  t.equal((await run()).status, 'succeeded', 'receives events again');
});

void t.test('queued retries of a disabled endpoint end unsent; those of a deleted endpoint vanish', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t);
  receiver.reply = () => ({ status: 500 });
  const a = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended'] });
  const b = await service.create('acc_1', { url: receiver.url('/b'), events: ['stream.ended'] });
  const event = await emit(store, clock);
  await settled(store, a, event.id, 1);
  await settled(store, b, event.id, 1);
  await service.update('acc_1', a.id, { is_active: false });
  await service.delete('acc_1', b.id);
  clock.advance(15_000);
  // Drained = no job left at all: leased ones are still being handled (outcomes are written in
  // batches after the handler's sends).
  await waitUntil(async () => {
    const q = await store.webhooks.deliveryQueueStats();
    return q.delayed + q.ready + q.leased === 0;
  }, 'jobs drained');
  const after = (await store.webhooks.listDeliveries(a.id, {}, { limit: 10 })).items[0];
  t.equal(after?.status, 'failed');
  t.equal(after?.error, 'endpoint_disabled: not sent');
  t.equal(receiver.requests.length, 2, 'no further sends');
});

void t.test('a name that resolves public at registration and private at delivery is never sent to', { timeout: 20_000 }, async (t) => {
  const clock = new ManualClock(Date.now());
  const { store } = openStore(t, clock.now);
  let answer = '93.184.216.34';
  const wh = createWebhooks({
    store,
    logger: testLogger(),
    now: clock.now,
    resolve: async () => [{ address: answer, family: 4 }],
    engine: { idleWaitMs: 10, random: () => 0.5 },
  });
  t.teardown(() => wh.close());
  await wh.engine.start();
  const e = await wh.service.create('acc_1', { url: 'https://rebind.example.com/hook', events: ['stream.ended'] });
  answer = '127.0.0.1';
  const event = await emit(store, clock);
  const rec = await settled(store, e, event.id, 1);
  t.equal(rec.responseStatus, null);
  t.match(rec.error, /^blocked_address: rebind\.example\.com resolves to 127\.0\.0\.1/);
});

void t.test('the purge job deletes delivery records older than 14 days and reschedules itself', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service, wh } = await setup(t, { purgeIntervalMs: 3_600_000 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const old = await emit(store, clock);
  await settled(store, e, old.id, 1);
  clock.advance(13 * 24 * 3_600_000);
  const recent = await emit(store, clock);
  await settled(store, e, recent.id, 1);
  t.equal(await wh.engine.purgeNow(), 0, 'nothing is 14 days old yet');
  clock.advance(24 * 3_600_000 + 1);
  // The periodic job is due (it runs hourly); no call from the test.
  await waitUntil(async () => (await store.webhooks.listDeliveries(e.id, {}, { limit: 10 })).items.length === 1, 'purge ran', 10_000);
  const left = (await store.webhooks.listDeliveries(e.id, {}, { limit: 10 })).items;
  t.equal(left[0]?.eventId, recent.id, 'the recent record stays');
  t.same(await store.queue.stats('webhooks.maintenance'), { ready: 0, delayed: 1, leased: 0 }, 'rescheduled');
});

void t.test('close() is idempotent and waits for sends in flight', { timeout: 20_000 }, async (t) => {
  const { clock, store, receiver, service, wh } = await setup(t, { timeoutMs: 500, leaseMs: 2_000 });
  receiver.reply = () => 'hang';
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const event = await emit(store, clock);
  await receiver.waitForCount(1);
  const p1 = wh.engine.close();
  const p2 = wh.engine.close();
  t.equal(p1, p2);
  await p1;
  const rec = (await store.webhooks.listDeliveries(e.id, {}, { limit: 1 })).items[0];
  t.equal(rec?.eventId, event.id);
  t.match(rec?.error, /^timeout/, 'the in-flight attempt finished and was recorded before close resolved');
});

void t.test('on a RedisStore the same engine delivers, retries on the injected clock and fails for good', { timeout: 30_000 }, async (t) => {
  const redis = await startRedis(t);
  const clock = new ManualClock(Date.now());
  const store = await RedisStore.open({ url: redis.url, prefix: 'whk-test:', now: clock.now });
  const receiver = await TestReceiver.start(tls);
  const wh = createWebhooks({
    store,
    logger: testLogger(),
    now: clock.now,
    allowLoopback: true,
    ca: tls.ca,
    engine: { idleWaitMs: 10, random: () => 0.5, retryDelaysMs: [15_000] },
  });
  t.teardown(async () => {
    await wh.close();
    await store.close();
    await receiver.close();
  });
  await wh.engine.start();
  let status = 500;
  receiver.reply = () => ({ status });
  const e = await wh.service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const failing = streamEndedEvent(stream, { nowMs: clock.ms });
  await store.queue.enqueue(webhookEventJob(failing, 'acc_1'));
  await receiver.waitForCount(1);
  const rec = async (eventId: string) => (await store.webhooks.listDeliveries(e.id, {}, { limit: 10 })).items.find((d) => d.eventId === eventId);
  await waitUntil(async () => (await rec(failing.id))?.nextAttemptAt != null && (await store.webhooks.deliveryQueueStats()).leased === 0, 'retry scheduled');
  clock.advance(15_000);
  await receiver.waitForCount(2);
  await waitUntil(async () => (await rec(failing.id))?.status === 'failed', 'failed after 2 sends');
  t.equal((await rec(failing.id))?.attempts, 2);
  t.equal((await wh.service.get('acc_1', e.id)).consecutive_failures, 1);
  status = 200;
  const ok = streamEndedEvent(stream, { nowMs: clock.ms });
  await store.queue.enqueue(webhookEventJob(ok, 'acc_1'));
  await receiver.waitForCount(3);
  await waitUntil(async () => (await rec(ok.id))?.status === 'succeeded', 'succeeded');
  const last = receiver.requests[2];
  t.ok(verify(last?.body ?? '', last?.headers['reverie-webhook-signature'], e.secret, clock));
  t.equal((await wh.service.get('acc_1', e.id)).consecutive_failures, 0);
});
