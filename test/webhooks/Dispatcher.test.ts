import t from 'tap';
import { JobLoop } from '../../store/index.ts';
import { createWebhooks, Dispatcher, EVENTS_QUEUE, streamEndedEvent, webhookEventJob } from '../../webhooks/index.ts';
import { openStore, TEST_STREAM, testLogger, waitUntil } from './helpers.ts';

void t.test('a burst of events is fanned out in one store call: every event once per endpoint, every event job acked', { timeout: 20_000 }, async (t) => {
  const { store } = openStore(t);
  // The service only validates and stores the endpoints; no engine runs (nothing is sent).
  const wh = createWebhooks({ store, logger: testLogger(), allowLoopback: true });
  t.teardown(() => wh.close());
  const a = await wh.service.create('acc_1', { url: 'https://127.0.0.1:9/a', events: ['stream.ended'] });
  const b = await wh.service.create('acc_1', { url: 'https://127.0.0.1:9/b', events: ['stream.ended'] });
  const events = Array.from({ length: 16 }, () => streamEndedEvent(TEST_STREAM));
  for (const e of events) await store.queue.enqueue(webhookEventJob(e, 'acc_1'));

  // Counts the fan-out's store calls (each is one transaction) and passes them on unchanged.
  let calls = 0;
  const createDeliveries = store.webhooks.createDeliveries.bind(store.webhooks);
  store.webhooks.createDeliveries = (...args) => {
    calls++;
    return createDeliveries(...args);
  };
  const dispatcher = new Dispatcher({ store, logger: testLogger(), now: Date.now, orderRecheckMs: 250 });
  // Wired as DeliveryEngine wires its events loop (16 at once, leased 16 at a time).
  const loop = new JobLoop({
    store,
    queue: EVENTS_QUEUE,
    logger: testLogger(),
    concurrency: 16,
    batch: 16,
    leaseMs: 30_000,
    idleWaitMs: 10,
    handler: (job) => dispatcher.handle(job),
  });
  t.teardown(() => loop.close());
  loop.start();

  await waitUntil(async () => {
    const left = await store.queue.stats(EVENTS_QUEUE);
    return left.ready + left.delayed + left.leased === 0;
  }, 'every event job acked');
  t.equal(calls, 1, 'the 16 events handled in one turn share one createDeliveries call');
  t.same(await store.queue.stats('webhooks.deliver'), { ready: 0, delayed: 0, leased: 0 }, 'no job row per delivery: the deliveries table is the queue');
  t.same(await store.webhooks.deliveryQueueStats(), { ready: 32, delayed: 0, leased: 0 }, 'one queued delivery per event and endpoint');
  for (const endpoint of [a, b]) {
    const page = await store.webhooks.listDeliveries(endpoint.id, {}, { limit: 100 });
    t.same(
      page.items.map((d) => d.eventId).sort(),
      events.map((e) => e.id).sort(),
      `endpoint ${endpoint.url} has exactly one delivery of each event`,
    );
  }
});
