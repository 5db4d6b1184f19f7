/**
 * Operational events end to end: a real HTTPS receiver on loopback plays three endpoints of one
 * account; the real engine fails, exhausts and disables one of them, and the others receive
 * `webhook.*` events, verified with the stripe library.
 */
import t from 'tap';
import type { Test } from 'tap';
import Stripe from 'stripe';
import { EVENTS_QUEUE, OPERATIONAL_EVENT_TYPES, streamEndedEvent, webhookEventJob } from '../../webhooks/index.ts';
import type { AnyWebhookEvent, DeliveryEngineOptions, OperationalEvent } from '../../webhooks/index.ts';
import type { EmbeddedStore } from '../../store/index.ts';
import { makeTls, ManualClock, openStore, startWebhooks, TEST_STREAM, waitUntil } from './helpers.ts';
import type { ReceivedRequest, TestReceiver } from './helpers.ts';

const stripe = new Stripe('sk_test_dummy');
const tls = makeTls();
t.teardown(() => tls.cleanup());

async function setup(t: Test, engine: Omit<DeliveryEngineOptions, 'store' | 'client' | 'logger' | 'now'>) {
  const clock = new ManualClock(Date.now());
  const { store } = openStore(t, clock.now);
  // One send per delivery: each failure exhausts its delivery at once (the schedule has its own tests).
  const { receiver, wh } = await startWebhooks(t, { store, clock, tls, engine: { retryDelaysMs: [], ...engine } });
  return { clock, store, receiver, service: wh.service };
}

const stream = { ...TEST_STREAM, endReason: 'timeout' as const };

async function emit(store: EmbeddedStore, clock: ManualClock): Promise<string> {
  const event = streamEndedEvent(stream, { nowMs: clock.ms });
  await store.queue.enqueue(webhookEventJob(event, 'acc_1'));
  return event.id;
}

function verified(req: ReceivedRequest, secret: string | undefined): AnyWebhookEvent {
  const at = Number(req.headers['reverie-webhook-timestamp']) * 1000;
  return stripe.webhooks.constructEvent(req.body, String(req.headers['reverie-webhook-signature']), String(secret), 300, undefined, at) as unknown as AnyWebhookEvent;
}

/** Nothing queued, leased or waiting in either queue: every event dispatched, every send finished. */
async function drained(store: EmbeddedStore): Promise<void> {
  await waitUntil(
    async () => {
      for (const s of [await store.queue.stats(EVENTS_QUEUE), await store.webhooks.deliveryQueueStats()]) {
        if (s.ready + s.delayed + s.leased !== 0) return false;
      }
      return true;
    },
    'queues drained',
    20_000,
  );
}

const paths = (receiver: TestReceiver, path: string) => receiver.requests.filter((r) => r.path === path);

void t.test("exhausted and disabled events reach the account's other subscribed endpoint, never the endpoint they are about; then recovered", { timeout: 60_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, { disableAfter: 3 });
  let aDown = true;
  receiver.reply = (req) => (req.path === '/a' && aDown ? { status: 500, body: 'boom' } : { status: 200, body: 'ok' });
  // A subscribes to the operational types too: it must still never hear about itself.
  const a = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended', ...OPERATIONAL_EVENT_TYPES] });
  const b = await service.create('acc_1', { url: receiver.url('/b'), events: [...OPERATIONAL_EVENT_TYPES] });
  await service.create('acc_1', { url: receiver.url('/c'), events: ['stream.ended'] });
  await service.create('acc_2', { url: receiver.url('/other-account'), events: [...OPERATIONAL_EVENT_TYPES] });

  const streamEvents: string[] = [];
  for (let i = 0; i < 3; i++) {
    streamEvents.push(await emit(store, clock));
    clock.advance(1_000);
  }
  await waitUntil(() => paths(receiver, '/b').length >= 4, 'three exhausted and one disabled event at /b', 20_000);
  await drained(store);
  t.equal((await service.get('acc_1', a.id)).is_active, false, 'A is disabled after 3 failed deliveries');

  const atB = paths(receiver, '/b').map((r) => verified(r, b.secret) as OperationalEvent);
  t.equal(atB.length, 4, 'exactly four events at /b');
  const exhausted = atB.filter((e) => e.type === 'webhook.delivery.exhausted');
  const aDeliveries = (await store.webhooks.listDeliveries(a.id, {}, { limit: 100 })).items;
  t.same(
    exhausted.map((e) => (e.type === 'webhook.delivery.exhausted' ? e.data.event_id : '')).sort(),
    [...streamEvents].sort(),
    'one exhausted event per failed delivery, naming the event that was not delivered',
  );
  for (const e of exhausted) {
    t.match(e.data, { endpoint_id: a.id, event_type: 'stream.ended', attempts: 1, response_status: 500, error: 'http_status: 500' });
    if (e.type === 'webhook.delivery.exhausted') t.ok(aDeliveries.some((d) => d.id === e.data.delivery_id), 'names the delivery');
  }
  const disabled = atB.filter((e) => e.type === 'webhook.endpoint.disabled');
  t.equal(disabled.length, 1, 'one disabled event');
  t.match(disabled[0]?.data, { endpoint_id: a.id, url: a.url, consecutive_failures: 3 });
  for (const r of paths(receiver, '/b')) t.match(String(r.headers['reverie-webhook-event']), /^webhook\./, 'the event header names the type');

  t.same(
    paths(receiver, '/a').map((r) => r.headers['reverie-webhook-event']),
    ['stream.ended', 'stream.ended', 'stream.ended'],
    'A received none of its own operational events',
  );
  t.equal(paths(receiver, '/c').length, 3, 'C (stream.ended only) got its 3 stream events');
  t.ok(paths(receiver, '/c').every((r) => r.headers['reverie-webhook-event'] === 'stream.ended'), 'and nothing operational');
  t.equal(paths(receiver, '/other-account').length, 0, 'another account hears nothing');

  // Re-enabled (count cleared), one more failure, then a success: recovered, with the count it ended.
  await service.update('acc_1', a.id, { is_active: true });
  await emit(store, clock);
  await waitUntil(() => paths(receiver, '/b').length >= 5, 'a fourth exhausted event', 20_000);
  await drained(store);
  aDown = false;
  clock.advance(1_000);
  await emit(store, clock);
  await waitUntil(() => paths(receiver, '/b').length >= 6, 'a recovered event', 20_000);
  await drained(store);
  const last = verified(paths(receiver, '/b')[5] as ReceivedRequest, b.secret) as OperationalEvent;
  t.equal(last.type, 'webhook.endpoint.recovered');
  t.match(last.data, { endpoint_id: a.id, failures_before: 1 });
  t.equal((await service.get('acc_1', a.id)).consecutive_failures, 0);
  t.equal(paths(receiver, '/b').length, 6, 'nothing else arrived');
});

void t.test('one endpoint causes at most N events of a type an hour; deliveries of operational events cause none', { timeout: 60_000 }, async (t) => {
  const { clock, store, receiver, service } = await setup(t, { operationalEventsPerHour: 2, disableAfter: 100 });
  let bUp = true;
  receiver.reply = (req) => (req.path === '/a' || (req.path === '/b' && !bUp) ? { status: 500 } : { status: 200 });
  const a = await service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended', 'webhook.delivery.exhausted'] });
  const b = await service.create('acc_1', { url: receiver.url('/b'), events: ['webhook.delivery.exhausted'] });

  for (let i = 0; i < 5; i++) await emit(store, clock);
  await waitUntil(async () => (await store.webhooks.listDeliveries(a.id, { status: 'failed' }, { limit: 100 })).items.length === 5, "A's 5 deliveries failed", 20_000);
  await drained(store);
  t.equal(paths(receiver, '/b').length, 2, 'a flapping endpoint sends at most 2 exhausted events an hour');
  t.ok(paths(receiver, '/b').every((r) => (verified(r, b.secret) as OperationalEvent).data.endpoint_id === a.id));

  clock.advance(3_600_000);
  await emit(store, clock);
  await waitUntil(() => paths(receiver, '/b').length === 3, 'the next hour allows one more', 20_000);
  await drained(store);

  // B now fails too: its failed delivery of an operational event must not come back to A.
  bUp = false;
  clock.advance(3_600_000);
  await emit(store, clock);
  await waitUntil(async () => (await store.webhooks.listDeliveries(b.id, { status: 'failed' }, { limit: 100 })).items.length === 1, "B's delivery failed", 20_000);
  await drained(store);
  t.equal(paths(receiver, '/b').length, 4);
  t.same(
    [...new Set(paths(receiver, '/a').map((r) => r.headers['reverie-webhook-event']))],
    ['stream.ended'],
    'A never received an exhausted event about B: no ping-pong between failing endpoints',
  );
});
