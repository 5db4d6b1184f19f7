/**
 * Order of a stream's events at each endpoint: `stream.ended` is never sent to an endpoint
 * before that endpoint's `stream.started` of the same session has succeeded or failed for good,
 * whatever the receiver does to the started one (fails it a few times, fails it every time) and
 * even when the ended event is fanned out first. Real HTTPS receiver on loopback, real clock,
 * short retry waits.
 */
import t from 'tap';
import { createWebhooks, streamEndedEvent, streamStartedEvent, webhookEventJob } from '../../webhooks/index.ts';
import type { WebhookEvent } from '../../webhooks/index.ts';
import { until } from '../helpers/until.ts';
import { makeTls, openStore, TEST_STREAM, testLogger, TestReceiver } from './helpers.ts';
import type { ReceivedRequest } from './helpers.ts';

const tls = makeTls();
t.teardown(() => tls.cleanup());

const session = { ...TEST_STREAM, id: 'str_order' };

const eventId = (r: ReceivedRequest): string => String(r.headers['reverie-webhook-id']);

void t.test('stream.ended waits at each endpoint until its stream.started succeeded or was exhausted', { timeout: 60_000 }, async (t) => {
  const { store } = openStore(t);
  const receiver = await TestReceiver.start(tls);
  const wh = createWebhooks({
    store,
    logger: testLogger(),
    allowLoopback: true,
    ca: tls.ca,
    // 8 sends 30 ms apart at most: /flaky's started succeeds on the 4th, /down's never does.
    engine: { idleWaitMs: 50, orderRecheckMs: 20, retryDelaysMs: [30, 30, 30, 30, 30, 30, 30], retryJitter: 0 },
  });
  t.teardown(async () => {
    await wh.close();
    await receiver.close();
  });

  const started = streamStartedEvent(session, { sequence: 1 });
  const ended = streamEndedEvent(session, { sequence: 2 });
  // Both endpoints fail every send of anything for a while; /flaky then takes its 4th started
  // send, /down never takes a started. Ended events are always answered 200.
  const startedSends = new Map<string, number>();
  receiver.reply = (r) => {
    if (eventId(r) !== started.id) return { status: 200 };
    const n = (startedSends.get(r.path) ?? 0) + 1;
    startedSends.set(r.path, n);
    if (r.path === '/flaky' && n >= 4) return { status: 200 };
    if (r.path === '/ok') return { status: 200 };
    return { status: 503 };
  };
  for (const path of ['/flaky', '/down', '/ok']) {
    await wh.service.create('acc_1', { url: receiver.url(path), events: ['stream.started', 'stream.ended'] });
  }

  // The ended event is due first and the started one 300 ms later, as after a dispatcher crash:
  // the ended one must not be fanned out before the started one.
  await store.queue.enqueue({ ...webhookEventJob(started, 'acc_1'), runAtMs: Date.now() + 300 });
  await store.queue.enqueue(webhookEventJob(ended, 'acc_1', { after: started.id }));
  await wh.engine.start();

  const byPath = (path: string) => receiver.requests.filter((r) => r.path === path);
  await until('every ended delivered', () => receiver.requests.filter((r) => eventId(r) === ended.id).length, (n) => n === 3, 30_000, 20);

  const flaky = byPath('/flaky').map(eventId);
  t.same(flaky, [started.id, started.id, started.id, started.id, ended.id], '/flaky: 3 failed starteds, the 4th succeeds, then ended');
  const down = byPath('/down').map(eventId);
  t.same(down, [...Array<string>(8).fill(started.id), ended.id], '/down: all 8 started sends fail, then ended');
  t.same(byPath('/ok').map(eventId), [started.id, ended.id], '/ok: started, then ended');

  const bodies = new Map(receiver.requests.map((r) => [eventId(r), JSON.parse(r.body) as WebhookEvent]));
  t.equal(bodies.get(started.id)?.data.sequence, 1, 'started carries sequence 1');
  t.equal(bodies.get(ended.id)?.data.sequence, 2, 'ended carries sequence 2');

  // Each endpoint by its URL: the three were created in one millisecond or so, and the list
  // orders endpoints made in the same millisecond by their random ids.
  // The engine writes a send's outcome with its next lease (one store transaction per cycle), so
  // a request the receiver has seen can still read pending for a cycle: wait for the outcome.
  for (const e of await wh.service.list('acc_1')) {
    const endedDelivery = await until(
      `${e.url}: the ended delivery settled`,
      async () => (await wh.service.deliveries('acc_1', e.id)).items.find((d) => d.event_id === ended.id),
      (d) => d !== undefined && d.status !== 'pending',
      10_000,
      20,
    );
    t.match(endedDelivery, { status: 'succeeded', attempts: 1 }, `${new URL(e.url).pathname}: waiting for the started one spent none of the ended one’s attempts`);
  }
});
