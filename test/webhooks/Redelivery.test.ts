/**
 * Recover, resend and the attempts log, end to end: a real HTTPS receiver on loopback, the real
 * engine and service, on both stores (embedded SQLite and Redis); every re-sent request is
 * verified with the stripe library.
 */
import t from 'tap';
import type { Test } from 'tap';
import Stripe from 'stripe';
import { RedisStore } from '../../store/index.ts';
import type { Store } from '../../store/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { RETRY_DELAYS_MS, streamEndedEvent, webhookEventJob } from '../../webhooks/index.ts';
import type { DeliveryEngineOptions, WebhookEndpointView, WebhookEvent, WebhooksOptions } from '../../webhooks/index.ts';
import { makeTls, ManualClock, openStore, startWebhooks, TEST_STREAM, waitUntil } from './helpers.ts';
import type { ReceivedRequest } from './helpers.ts';

const stripe = new Stripe('sk_test_dummy');
const tls = makeTls();
t.teardown(() => tls.cleanup());

type Kind = 'embedded' | 'redis';

interface SetupOptions {
  engine?: Omit<DeliveryEngineOptions, 'store' | 'client' | 'logger' | 'now'>;
  service?: WebhooksOptions['service'];
}

async function setup(t: Test, kind: Kind, options: SetupOptions = {}) {
  const clock = new ManualClock(Date.now());
  let store: Store;
  if (kind === 'embedded') {
    store = openStore(t, clock.now).store;
  } else {
    const redis = await startRedis(t);
    const rs = await RedisStore.open({ url: redis.url, prefix: 'redeliver:', now: clock.now });
    t.teardown(() => rs.close());
    store = rs;
  }
  // One scheduled send per delivery: a failure is final at once (the schedule has its own tests).
  const { receiver, wh } = await startWebhooks(t, { store, clock, tls, engine: { retryDelaysMs: [], ...options.engine }, ...(options.service ? { service: options.service } : {}) });
  return { clock, store, receiver, wh, service: wh.service };
}

const stream = TEST_STREAM;

/** Stripe's verifier at the time the request was signed (its own header), so clock moves do not matter. */
function verified(req: ReceivedRequest | undefined, secret: string | undefined): WebhookEvent {
  const at = Number(req?.headers['reverie-webhook-timestamp']) * 1000;
  return stripe.webhooks.constructEvent(req?.body ?? '', String(req?.headers['reverie-webhook-signature']), String(secret), 300, undefined, at) as unknown as WebhookEvent;
}

/** Emits one stream.ended and waits until its delivery to `endpoint` is finished (not pending). */
async function deliverOne(store: Store, clock: ManualClock, endpoint: WebhookEndpointView) {
  const event = streamEndedEvent(stream, { nowMs: clock.ms });
  await store.queue.enqueue(webhookEventJob(event, 'acc_1'));
  const delivery = await finished(store, endpoint, event.id);
  return { event, delivery };
}

async function finished(store: Store, endpoint: WebhookEndpointView, eventId: string, attempts = 1) {
  let found = null as Awaited<ReturnType<Store['webhooks']['getDelivery']>>;
  await waitUntil(
    async () => {
      found = (await store.webhooks.listDeliveries(endpoint.id, {}, { limit: 100 })).items.find((d) => d.eventId === eventId) ?? null;
      return found !== null && found.status !== 'pending' && found.attempts === attempts && (await store.webhooks.deliveryQueueStats()).leased === 0;
    },
    `delivery of ${eventId} finished after ${attempts} sends`,
    20_000,
  );
  if (!found) throw new Error('unreachable');
  return found;
}

for (const kind of ['embedded', 'redis'] as const) {
  void t.test(`${kind}: an endpoint down for a window, then recover: exactly the failed deliveries arrive again, same event ids, signed afresh`, { timeout: 60_000 }, async (t) => {
    const { clock, store, receiver, service } = await setup(t, kind);
    let down = false;
    // /b is another endpoint of the account, always up: recover of /a must never send to it.
    receiver.reply = (req) => (down && req.path === '/a' ? { status: 503, body: 'down for maintenance' } : { status: 200, body: 'ok' });
    const e = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended'] });
    const other = await service.create('acc_1', { url: receiver.url('/b'), events: ['stream.ended'] });
    const start = clock.ms;

    const before = await deliverOne(store, clock, e);
    clock.advance(60_000);
    down = true;
    const failed = [];
    for (let i = 0; i < 3; i++) {
      failed.push(await deliverOne(store, clock, e));
      clock.advance(60_000);
    }
    down = false;
    const after = await deliverOne(store, clock, e);
    t.same(failed.map((f) => f.delivery.status), ['failed', 'failed', 'failed'], 'the outage failed three deliveries');
    t.equal(before.delivery.status, 'succeeded');
    t.equal(after.delivery.status, 'succeeded');
    // /b shares the receiver and the outage, but is another endpoint: recover must not touch it.
    await waitUntil(async () => receiver.requests.length === 10, 'both endpoints sent 5 each', 20_000);
    const sent = receiver.requests.length;

    // A window holding only the 2nd and 3rd failure (since inclusive, until exclusive).
    const [f1, f2, f3] = failed as [(typeof failed)[0], (typeof failed)[0], (typeof failed)[0]];
    const part = await service.recover('acc_1', e.id, { since: f2.delivery.createdAt, until: after.delivery.createdAt });
    t.same(part, { requeued: 2, delivery_ids: [f2.delivery.id, f3.delivery.id], has_more: false }, 'oldest first, only the window');
    await receiver.waitForCount(sent + 2);
    for (const f of [f2, f3]) t.equal((await finished(store, e, f.event.id, 2)).status, 'succeeded');

    // The whole period: only the one still failed goes again, nothing that succeeded.
    const all = await service.recover('acc_1', e.id, { since: new Date(start).toISOString() });
    t.same(all, { requeued: 1, delivery_ids: [f1.delivery.id], has_more: false });
    await receiver.waitForCount(sent + 3);
    const rec = await finished(store, e, f1.event.id, 2);
    t.match(rec, { id: f1.delivery.id, status: 'succeeded', attempts: 2, responseStatus: 200, eventId: f1.event.id });

    const again = receiver.requests.slice(sent);
    t.equal(again.length, 3, 'exactly the three failed deliveries arrived again');
    t.same(again.map((r) => r.path), ['/a', '/a', '/a'], 'only to the recovered endpoint');
    t.same(
      again.map((r) => verified(r, e.secret).id),
      [f2.event.id, f3.event.id, f1.event.id],
      'same event ids, each verified by stripe with the endpoint secret',
    );
    for (const [i, r] of again.entries()) {
      const f = [f2, f3, f1][i];
      t.equal(r.body, f?.delivery.payload, 'the exact body of the first send');
      t.equal(r.headers['reverie-webhook-id'], f?.event.id);
    }
    t.same(await service.recover('acc_1', e.id, { since: new Date(start).toISOString() }), { requeued: 0, delivery_ids: [], has_more: false }, 'nothing left to recover');
    t.equal((await store.webhooks.listDeliveries(other.id, {}, { limit: 100 })).items.filter((d) => d.attempts !== 1).length, 0, "the other endpoint's deliveries were left alone");

    // The attempts log of the first failure: the scheduled send (503 and its body), then the recover.
    const log = await service.attempts('acc_1', e.id, f1.delivery.id);
    t.match(log, [
      { attempt: 1, trigger: 'scheduled', response_status: 503, response_body: 'down for maintenance', error: 'http_status: 503' },
      { attempt: 2, trigger: 'recover', response_status: 200, response_body: 'ok', error: null },
    ]);
    for (const a of log) {
      t.ok(Number.isFinite(Date.parse(a.started_at)), 'started_at is a time');
      t.ok(a.duration_ms >= 0, 'duration_ms is a duration');
    }
  });
}

void t.test('resend sends one delivery again (once, no schedule); a pending one is refused; the log keeps network errors', { timeout: 60_000 }, async (t) => {
  // The spec's schedule: a failed manual send must still not be retried on it.
  const { clock, store, receiver, service } = await setup(t, 'embedded', { engine: { timeoutMs: 1_000, leaseMs: 5_000, retryDelaysMs: RETRY_DELAYS_MS } });
  receiver.reply = () => ({ status: 200, body: 'ok' });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const { event, delivery } = await deliverOne(store, clock, e);
  t.equal(delivery.status, 'succeeded');

  clock.advance(1_000);
  const queued = await service.resend('acc_1', e.id, delivery.id);
  t.match(queued, { id: delivery.id, status: 'pending', attempts: 1, event_id: event.id });
  await receiver.waitForCount(2);
  t.equal((await finished(store, e, event.id, 2)).status, 'succeeded');
  t.equal(verified(receiver.requests[1], e.secret).id, event.id, 'resent with the same event id, verified by stripe');
  t.equal(receiver.requests[1]?.headers['reverie-webhook-timestamp'], String(Math.floor(clock.ms / 1000)), 'signed at resend time');

  // A receiver that never answers: the resend is in flight (pending) until the 1 s deadline.
  receiver.reply = () => 'hang';
  await service.resend('acc_1', e.id, delivery.id);
  await receiver.waitForCount(3);
  await t.rejects(service.resend('acc_1', e.id, delivery.id), { code: 'WEBHOOKS/DELIVERY_PENDING', httpStatus: 409 });
  const timedOut = await finished(store, e, event.id, 3);
  t.equal(timedOut.status, 'failed', 'a failed resend ends the delivery failed');
  t.equal(timedOut.nextAttemptAt, null, 'with no retry scheduled, though the schedule has sends left');
  t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 });
  t.equal((await service.get('acc_1', e.id)).consecutive_failures, 0, 'a manual send does not count toward health');

  const log = await service.attempts('acc_1', e.id, delivery.id);
  t.match(log, [
    { attempt: 1, trigger: 'scheduled', response_status: 200, response_body: 'ok', error: null },
    { attempt: 2, trigger: 'resend', response_status: 200 },
    { attempt: 3, trigger: 'resend', response_status: null, response_body: null, error: /^timeout/ },
  ]);
  t.ok((log[2]?.duration_ms ?? 0) >= 900, 'the timed-out send took its deadline');
  t.equal(receiver.requests.length, 3);
});

void t.test('the attempts log keeps the first 1 KiB of each body and the newest N sends', { timeout: 60_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, 'embedded', { engine: { attemptsKept: 3 }, service: { resendsPerMinute: 100 } });
  let n = 0;
  receiver.reply = () => ({ status: 500, body: `${++n}:` + 'é'.repeat(2_000) });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const { event, delivery } = await deliverOne(store, clock, e);
  for (let i = 2; i <= 5; i++) {
    await service.resend('acc_1', e.id, delivery.id);
    await finished(store, e, event.id, i);
  }
  const log = await service.attempts('acc_1', e.id, delivery.id);
  t.same(log.map((a) => [a.attempt, a.trigger]), [[3, 'resend'], [4, 'resend'], [5, 'resend']], 'only the newest 3 kept');
  for (const a of log) {
    t.ok(Buffer.byteLength(a.response_body ?? '', 'utf8') <= 1024 + 2, 'at most 1 KiB (a cut character becomes U+FFFD)');
    t.match(a.response_body, new RegExp(`^${a.attempt}:éé`));
  }
  t.equal((await store.webhooks.getDelivery(delivery.id))?.attempts, 5, 'the record counts every send');
});

void t.test('resend and recover: rate-limited per account, refused on a disabled endpoint, bad input names its field', { timeout: 60_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, 'embedded', { service: { resendsPerMinute: 2, recoversPerMinute: 2 } });
  receiver.reply = () => ({ status: 500 });
  const e = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended'] });
  const other = await service.create('acc_2', { url: receiver.url('/b'), events: ['stream.ended'] });
  const since = new Date(clock.ms).toISOString();
  const { delivery } = await deliverOne(store, clock, e);
  clock.advance(1_000); // until defaults to now, exclusive

  await t.rejects(service.recover('acc_1', e.id, { since: 'yesterday' }), { code: 'REQUEST/INVALID', details: { field: 'since' } });
  await t.rejects(service.recover('acc_1', e.id, { since, until: '2026-13-01T00:00:00Z' }), { code: 'REQUEST/INVALID', details: { field: 'until' } });
  await t.rejects(service.recover('acc_1', e.id, { since, until: since }), { code: 'REQUEST/INVALID', details: { field: 'since' } });
  // @ts-expect-error since is required
  await t.rejects(service.recover('acc_1', e.id, {}), { code: 'REQUEST/INVALID', details: { field: 'since' } });
  await t.rejects(service.resend('acc_1', e.id, 'dlv_missing'), { code: 'WEBHOOKS/DELIVERY_NOT_FOUND', httpStatus: 404 });
  await t.rejects(service.resend('acc_1', e.id, 'not/a:delivery'), { code: 'WEBHOOKS/DELIVERY_NOT_FOUND' });
  await t.rejects(service.attempts('acc_2', other.id, delivery.id), { code: 'WEBHOOKS/DELIVERY_NOT_FOUND' }, "another endpoint's delivery is not found");
  await t.rejects(service.resend('acc_2', e.id, delivery.id), { code: 'WEBHOOKS/NOT_FOUND' }, "another account's endpoint is not found");

  for (let i = 0; i < 2; i++) {
    await service.resend('acc_1', e.id, delivery.id);
    await finished(store, e, delivery.eventId, i + 2);
  }
  const sent = receiver.requests.length;
  await t.rejects(service.resend('acc_1', e.id, delivery.id), { code: 'WEBHOOKS/RATE_LIMITED', httpStatus: 429, details: { limit: 2 } });
  for (let i = 0; i < 2; i++) {
    t.equal((await service.recover('acc_1', e.id, { since })).requeued, 1);
    await finished(store, e, delivery.eventId, i + 4);
  }
  await t.rejects(service.recover('acc_1', e.id, { since }), { code: 'WEBHOOKS/RATE_LIMITED', details: { limit: 2 } });
  t.equal(receiver.requests.length, sent + 2, 'the refused calls sent nothing');
  clock.advance(60_000);
  t.equal((await service.recover('acc_1', e.id, { since })).requeued, 1, 'a minute later the account may recover again');
  await finished(store, e, delivery.eventId, 6);

  await service.update('acc_1', e.id, { is_active: false });
  await t.rejects(service.resend('acc_1', e.id, delivery.id), { code: 'WEBHOOKS/ENDPOINT_DISABLED', httpStatus: 409 });
  await t.rejects(service.recover('acc_1', e.id, { since }), { code: 'WEBHOOKS/ENDPOINT_DISABLED' });
});

void t.test('recover requeues at most maxPerRecover per call and says has_more; the next call takes the rest', { timeout: 60_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, 'embedded', { service: { maxPerRecover: 2 } });
  let down = true;
  receiver.reply = () => ({ status: down ? 502 : 200 });
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const since = new Date(clock.ms).toISOString();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    ids.push((await deliverOne(store, clock, e)).delivery.id);
    clock.advance(1_000);
  }
  down = false;
  const first = await service.recover('acc_1', e.id, { since });
  t.same(first, { requeued: 2, delivery_ids: ids.slice(1), has_more: true }, 'the newest two of three, has_more');
  const second = await service.recover('acc_1', e.id, { since });
  t.same(second, { requeued: 1, delivery_ids: ids.slice(0, 1), has_more: false }, 'the pending ones are skipped, the rest taken');
  await receiver.waitForCount(6);
});

for (const kind of ['embedded', 'redis'] as const) {
  void t.test(`${kind}: a resend waits for the endpoint's rate-limit slot, then makes its one send, logged as a resend`, { timeout: 60_000 }, async (t) => {
    // The spec's schedule: a deferred manual send must still not be retried on it.
    const { clock, store, receiver, service } = await setup(t, kind, { engine: { retryDelaysMs: RETRY_DELAYS_MS } });
    receiver.reply = () => ({ status: 200, body: 'ok' });
    const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'], rate_limit: 1 });
    const { event, delivery } = await deliverOne(store, clock, e);
    t.equal(delivery.status, 'succeeded');

    // The scheduled send took this second's slot: the resend waits for the next one, unsent.
    receiver.reply = () => ({ status: 503, body: 'busy' });
    await service.resend('acc_1', e.id, delivery.id);
    await waitUntil(async () => (await store.webhooks.deliveryQueueStats()).delayed === 1, 'the resend is held back for its slot', 20_000);
    t.equal(receiver.requests.length, 1, 'not sent before its slot');
    const held = await store.webhooks.getDelivery(delivery.id);
    t.match(held, { status: 'pending', attempts: 1 }, 'the wait spends no attempt');
    t.ok(held?.nextAttemptAt && Date.parse(held.nextAttemptAt) > clock.ms, 'next_attempt_at shows the slot');

    clock.advance(1_000);
    const done = await finished(store, e, event.id, 2);
    t.match(done, { status: 'failed', nextAttemptAt: null, responseStatus: 503 }, 'still one send: a failure ends it, no schedule');
    t.equal(receiver.requests.length, 2);
    t.same(await store.webhooks.deliveryQueueStats(), { ready: 0, delayed: 0, leased: 0 });
    t.equal((await service.get('acc_1', e.id)).consecutive_failures, 0, 'a manual send does not count toward health');
    t.match(await service.attempts('acc_1', e.id, delivery.id), [
      { attempt: 1, trigger: 'scheduled', response_status: 200 },
      { attempt: 2, trigger: 'resend', response_status: 503, response_body: 'busy' },
    ]);
  });
}
