import t from 'tap';
import Stripe from 'stripe';
import type { WebhookDeliveryRecord } from '../../store/index.ts';
import { createWebhooks } from '../../webhooks/index.ts';
import { WebhookError } from '../../webhooks/errors.ts';
import { makeTls, openStore, testLogger, TestReceiver } from './helpers.ts';

const stripe = new Stripe('sk_test_dummy');
const tls = makeTls();
t.teardown(() => tls.cleanup());

async function setup(t: { teardown: (fn: () => unknown) => void }) {
  const { store } = openStore(t);
  const receiver = await TestReceiver.start(tls);
  const wh = createWebhooks({ store, logger: testLogger(), allowLoopback: true, ca: tls.ca });
  t.teardown(async () => {
    await wh.close();
    await receiver.close();
  });
  return { store, receiver, service: wh.service };
}

async function code(p: Promise<unknown>): Promise<string> {
  return p.then(
    () => 'resolved',
    (e: unknown) => (e instanceof WebhookError ? e.code : `other: ${String(e)}`),
  );
}

void t.test('create returns the full secret once; list and get show only the preview', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const created = await service.create('acc_1', { url: receiver.url(), events: ['stream.started', 'stream.ended'], name: 'main' });
  t.match(created.id, /^whk_[0-9a-f]{24}$/);
  t.match(created.secret, /^whsec_/);
  t.equal(created.secret_preview, `whsec_${created.secret?.slice(6, 10)}…${created.secret?.slice(-4)}`);
  t.same(created.events, ['stream.started', 'stream.ended']);
  t.equal(created.is_active, true);
  t.equal(created.consecutive_failures, 0);
  t.equal(created.name, 'main');
  const got = await service.get('acc_1', created.id);
  t.notOk('secret' in got, 'get hides the secret');
  t.equal(got.secret_preview, created.secret_preview);
  const list = await service.list('acc_1');
  t.equal(list.length, 1);
  t.notOk('secret' in (list[0] ?? {}), 'list hides the secret');
});

void t.test('an account may have at most 10 endpoints', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  for (let i = 0; i < 10; i++) await service.create('acc_1', { url: receiver.url(`/h${i}`), events: ['stream.ended'], name: `n${i}` });
  const err = await service.create('acc_1', { url: receiver.url('/h10'), events: ['stream.ended'] }).catch((e: unknown) => e);
  t.ok(err instanceof WebhookError);
  t.equal((err as WebhookError).code, 'WEBHOOKS/LIMIT_REACHED');
  t.equal((err as WebhookError).details.limit, 10);
  t.equal((await service.list('acc_1')).length, 10);
  // Another account is not affected.
  await service.create('acc_2', { url: receiver.url(), events: ['stream.ended'] });
});

void t.test("another account's endpoint is not found for every operation", { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  t.equal(await code(service.get('acc_2', e.id)), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.update('acc_2', e.id, { name: 'x' })), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.delete('acc_2', e.id)), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.rotateSecret('acc_2', e.id)), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.test('acc_2', e.id)), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.deliveries('acc_2', e.id)), 'WEBHOOKS/NOT_FOUND');
  t.equal(await code(service.get('acc_1', 'whk_missing')), 'WEBHOOKS/NOT_FOUND');
  t.equal(receiver.requests.length, 0, 'the test send did not happen');
  t.equal((await service.get('acc_1', e.id)).name, '', 'unchanged');
});

void t.test('events must be stream.started / stream.ended; bad input names its field', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const bad = async (input: { url: string; events: unknown; name?: unknown }) =>
    // @ts-expect-error deliberately wrong types reach the runtime check
    service.create('acc_1', input).then(
      () => null,
      (e: WebhookError) => [e.code, e.details.field],
    );
  t.same(await bad({ url: receiver.url(), events: [] }), ['REQUEST/INVALID', 'events']);
  t.same(await bad({ url: receiver.url(), events: ['stream.paused'] }), ['REQUEST/INVALID', 'events']);
  t.same(await bad({ url: receiver.url(), events: 'stream.ended' }), ['REQUEST/INVALID', 'events']);
  t.same(await bad({ url: receiver.url(), events: ['stream.ended'], name: 'x'.repeat(201) }), ['REQUEST/INVALID', 'name']);
  t.same(await bad({ url: 'http://example.com/', events: ['stream.ended'] }), ['WEBHOOKS/URL_REJECTED', 'url']);
  t.same(await bad({ url: 'https://10.0.0.1/', events: ['stream.ended'] }), ['WEBHOOKS/URL_REJECTED', 'url']);
  const dedup = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended', 'stream.ended'] });
  t.same(dedup.events, ['stream.ended']);
  t.equal((await service.list('acc_1')).length, 1, 'nothing else was created');
});

void t.test('rate_limit is a whole number of deliveries per second from 1 to 1000, or null; bad values name the field', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const bad = async (p: Promise<unknown>) =>
    p.then(
      () => null,
      (e: WebhookError) => [e.code, e.details.field],
    );
  for (const rate of [0, -1, 1001, 2.5, '5', Number.NaN]) {
    // @ts-expect-error deliberately wrong types reach the runtime check
    t.same(await bad(service.create('acc_1', { url: receiver.url(), events: ['stream.ended'], rate_limit: rate })), ['REQUEST/INVALID', 'rate_limit'], `create refuses ${String(rate)}`);
  }
  t.equal((await service.list('acc_1')).length, 0, 'nothing was created');
  const plain = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  t.equal(plain.rate_limit, null, 'no limit by default');
  const limited = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'], rate_limit: 1000 });
  t.equal(limited.rate_limit, 1000);
  t.equal((await service.update('acc_1', plain.id, { rate_limit: 5 })).rate_limit, 5);
  t.equal((await service.get('acc_1', plain.id)).rate_limit, 5, 'kept');
  t.same(await bad(service.update('acc_1', plain.id, { rate_limit: 0 })), ['REQUEST/INVALID', 'rate_limit']);
  t.equal((await service.update('acc_1', plain.id, { rate_limit: null })).rate_limit, null, 'null removes it');
});

void t.test('update changes url, events, name; a new url is checked; is_active true clears failures', { timeout: 15_000 }, async (t) => {
  const { service, receiver, store } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'], name: 'a' });
  const u = await service.update('acc_1', e.id, { url: receiver.url('/v2'), events: ['stream.started'], name: 'b' });
  t.equal(u.url, receiver.url('/v2'));
  t.same(u.events, ['stream.started']);
  t.equal(u.name, 'b');
  t.equal(await code(service.update('acc_1', e.id, { url: 'https://192.168.0.1/' })), 'WEBHOOKS/URL_REJECTED');
  t.equal((await service.get('acc_1', e.id)).url, receiver.url('/v2'), 'a rejected update changes nothing');
  for (let i = 0; i < 20; i++) await store.webhooks.recordOutcome(e.id, false, 20);
  const disabled = await service.get('acc_1', e.id);
  t.equal(disabled.is_active, false);
  t.equal(disabled.consecutive_failures, 20);
  const enabled = await service.update('acc_1', e.id, { is_active: true });
  t.equal(enabled.is_active, true);
  t.equal(enabled.consecutive_failures, 0);
  const off = await service.update('acc_1', e.id, { is_active: false });
  t.equal(off.is_active, false);
});

void t.test('rotate-secret returns a new full secret; get shows its preview', { timeout: 15_000 }, async (t) => {
  const { service, receiver, store } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const r = await service.rotateSecret('acc_1', e.id);
  t.match(r.secret, /^whsec_/);
  t.not(r.secret, e.secret);
  t.equal((await service.get('acc_1', e.id)).secret_preview, r.secret_preview);
  t.equal((await store.webhooks.getEndpoint(e.id))?.secret, r.secret);
});

void t.test('test sends a signed synthetic stream.ended now and reports status, body and round trip', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.started'] });
  receiver.reply = () => ({ status: 202, body: 'thanks' });
  const res = await service.test('acc_1', e.id);
  t.equal(res.status, 202);
  t.equal(res.body, 'thanks');
  t.equal(res.error, null);
  t.ok(res.round_trip_ms >= 0 && res.round_trip_ms < 5_000);
  const req = receiver.requests[0];
  if (!req) throw new Error('no request');
  const event = stripe.webhooks.constructEvent(req.body, req.headers['reverie-webhook-signature'] as string, e.secret as string) as unknown as {
    id: string;
    type: string;
    data: { reason: string; duration_seconds: number };
  };
  t.equal(event.type, 'stream.ended');
  t.equal(event.id, res.event_id);
  t.equal(req.headers['reverie-webhook-id'], res.event_id);
  t.equal(req.headers['reverie-webhook-event'], 'stream.ended');
  t.equal(event.data.duration_seconds, 60);

  receiver.reply = () => ({ status: 500, body: 'boom' });
  const failed = await service.test('acc_1', e.id);
  t.equal(failed.status, 500);
  t.equal(failed.error, 'http_status: 500');
  t.equal((await service.get('acc_1', e.id)).consecutive_failures, 0, 'test sends do not count toward health');
});

void t.test('test reports a connection error without a status', { timeout: 15_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  await receiver.close();
  const res = await service.test('acc_1', e.id);
  t.equal(res.status, null);
  t.match(res.error, /^connection: /);
});

void t.test('deliveries are newest first, filtered by status, event type and stream, and paginated', { timeout: 15_000 }, async (t) => {
  const { service, receiver, store } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.started', 'stream.ended'] });
  const base = Date.parse('2026-03-01T00:00:00Z');
  const records: WebhookDeliveryRecord[] = [];
  for (let i = 0; i < 25; i++) {
    const at = new Date(base + i * 1000).toISOString();
    records.push({
      id: `dlv_${String(i).padStart(3, '0')}`,
      endpointId: e.id,
      accountId: 'acc_1',
      eventId: `evt_${i}`,
      eventType: i % 2 === 0 ? 'stream.started' : 'stream.ended',
      streamId: i < 10 ? 'str_a' : 'str_b',
      payload: '{}',
      status: i % 5 === 0 ? 'failed' : 'succeeded',
      attempts: 1,
      responseStatus: 200,
      responseBody: 'ok',
      error: null,
      createdAt: at,
      updatedAt: at,
      lastAttemptAt: at,
      nextAttemptAt: null,
    });
  }
  await store.webhooks.createDeliveries(records);
  const first = await service.deliveries('acc_1', e.id);
  t.equal(first.items.length, 20, 'default page size 20');
  t.equal(first.items[0]?.id, 'dlv_024', 'newest first');
  t.ok(first.next_cursor);
  const second = await service.deliveries('acc_1', e.id, { cursor: first.next_cursor });
  t.same(
    second.items.map((d) => d.id),
    ['dlv_004', 'dlv_003', 'dlv_002', 'dlv_001', 'dlv_000'],
  );
  t.equal(second.next_cursor, null);
  const failed = await service.deliveries('acc_1', e.id, { status: 'failed', limit: 100 });
  t.same(
    failed.items.map((d) => d.id),
    ['dlv_020', 'dlv_015', 'dlv_010', 'dlv_005', 'dlv_000'],
  );
  const ended = await service.deliveries('acc_1', e.id, { event_type: 'stream.ended', stream_id: 'str_a', limit: 100 });
  t.same(
    ended.items.map((d) => d.id),
    ['dlv_009', 'dlv_007', 'dlv_005', 'dlv_003', 'dlv_001'],
  );
  const view = ended.items[0];
  t.same(Object.keys(view ?? {}).sort(), [
    'attempts', 'created_at', 'endpoint_id', 'error', 'event_id', 'event_type', 'id', 'last_attempt_at',
    'next_attempt_at', 'payload', 'response_body', 'response_status', 'status', 'stream_id', 'updated_at',
  ]);
  t.equal(await code(service.deliveries('acc_1', e.id, { limit: 101 })), 'REQUEST/INVALID');
  t.equal(await code(service.deliveries('acc_1', e.id, { status: 'done' })), 'REQUEST/INVALID');
  t.equal(await code(service.deliveries('acc_1', e.id, { event_type: 'x' })), 'REQUEST/INVALID');

  await service.delete('acc_1', e.id);
  t.equal(await store.webhooks.getDelivery('dlv_000'), null, 'delete removes the delivery log');
  t.equal(await code(service.get('acc_1', e.id)), 'WEBHOOKS/NOT_FOUND');
});

void t.test('test sends are limited to 10 per minute per account; the 11th is refused before any request', { timeout: 30_000 }, async (t) => {
  const { service, receiver } = await setup(t);
  const e = await service.create('acc_1', { url: receiver.url(), events: ['stream.ended'] });
  const other = await service.create('acc_2', { url: receiver.url(), events: ['stream.ended'] });
  for (let i = 0; i < 10; i++) t.equal((await service.test('acc_1', e.id)).status, 200, `send ${i + 1}`);
  await t.rejects(service.test('acc_1', e.id), { code: 'WEBHOOKS/RATE_LIMITED', httpStatus: 429, details: { limit: 10 } });
  t.equal(receiver.requests.length, 10, 'the refused send reached nobody');
  t.equal((await service.test('acc_2', other.id)).status, 200, 'another account has its own budget');
});
