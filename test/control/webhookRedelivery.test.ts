/**
 * The HTTP face of recover, resend and the attempts log: statuses, the Area B envelope naming the
 * field for bad input, 429 with Retry-After, and the OpenAPI document. The engine is not started
 * (nothing is sent); deliveries are written to the store as the dispatcher would.
 */
import t, { type Test } from 'tap';
import pino from 'pino';
import { makeApp } from '../helpers/app.ts';
import { createWebhooks } from '../../webhooks/index.ts';
import type { WebhookDeliveryRecord } from '../../store/index.ts';

async function setup(t: Test) {
  const { app, key, store } = await makeApp(t, {
    services: ({ store }) => {
      // A public address for every name: registration passes without DNS, and no engine runs.
      const webhooks = createWebhooks({ store, logger: pino({ level: 'silent' }), resolve: async () => [{ address: '93.184.215.14', family: 4 }], service: { resendsPerMinute: 2 } });
      t.teardown(() => webhooks.close());
      return { webhooks: webhooks.service };
    },
  });
  const auth = { authorization: `Bearer ${await key('free')}` };
  const created = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: auth, payload: { url: 'https://hooks.example.com/in', events: ['stream.ended', 'webhook.endpoint.disabled'] } });
  t.equal(created.statusCode, 201, 'an endpoint may subscribe to an operational event type');
  const endpointId = created.json().id as string;
  const accountId = (await store.webhooks.getEndpoint(endpointId))?.accountId ?? '';
  const at = new Date(Date.now() - 60_000).toISOString();
  const delivery: WebhookDeliveryRecord = {
    id: 'dlv_http1',
    endpointId,
    accountId,
    eventId: 'evt_http1',
    eventType: 'stream.ended',
    streamId: 'str_1',
    payload: '{"id":"evt_http1"}',
    status: 'failed',
    attempts: 8,
    responseStatus: 503,
    responseBody: 'down',
    error: 'http_status: 503',
    createdAt: at,
    updatedAt: at,
    lastAttemptAt: at,
    nextAttemptAt: null,
  };
  await store.webhooks.createDeliveries([delivery]);
  await store.webhooks.addAttempt({ deliveryId: delivery.id, attempt: 8, trigger: 'scheduled', startedAt: at, durationMs: 12, responseStatus: 503, responseBody: 'down', error: 'http_status: 503' }, 20);
  return { app, auth, endpointId, delivery };
}

void t.test('attempts, resend and recover over HTTP: 200/202 bodies, 4xx envelopes naming the field, 429 with Retry-After', { timeout: 60_000 }, async (t) => {
  const { app, auth, endpointId, delivery } = await setup(t);
  const base = `/v1/webhooks/${endpointId}`;

  let res = await app.inject({ method: 'GET', url: `${base}/deliveries/${delivery.id}/attempts`, headers: auth });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { data: [{ attempt: 8, trigger: 'scheduled', started_at: delivery.createdAt, duration_ms: 12, response_status: 503, response_body: 'down', error: 'http_status: 503' }] });

  res = await app.inject({ method: 'POST', url: `${base}/recover`, headers: auth, payload: { since: 'last tuesday' } });
  t.equal(res.statusCode, 400);
  t.match(res.json(), { success: false, status: 400, code: 'REQUEST/INVALID', details: { field: 'since' } });
  res = await app.inject({ method: 'POST', url: `${base}/recover`, headers: auth, payload: { since: delivery.createdAt, extra: 1 } });
  t.equal(res.statusCode, 400, 'unknown fields are refused');
  t.match(JSON.stringify(res.json().details), /extra/);
  res = await app.inject({ method: 'POST', url: `${base}/recover`, headers: auth, payload: {} });
  t.equal(res.statusCode, 400);
  t.match(JSON.stringify(res.json().details), /since/, 'a missing since is named');

  res = await app.inject({ method: 'POST', url: `${base}/deliveries/dlv_nope/resend`, headers: auth });
  t.equal(res.statusCode, 404);
  t.match(res.json(), { code: 'WEBHOOKS/DELIVERY_NOT_FOUND' });
  res = await app.inject({ method: 'POST', url: `/v1/webhooks/whk_nope/deliveries/${delivery.id}/resend`, headers: auth });
  t.match(res.json(), { status: 404, code: 'WEBHOOKS/NOT_FOUND' });

  res = await app.inject({ method: 'POST', url: `${base}/recover`, headers: auth, payload: { since: new Date(Date.parse(delivery.createdAt) - 1000).toISOString() } });
  t.equal(res.statusCode, 202);
  t.same(res.json(), { requeued: 1, delivery_ids: [delivery.id], has_more: false });

  res = await app.inject({ method: 'POST', url: `${base}/deliveries/${delivery.id}/resend`, headers: auth });
  t.equal(res.statusCode, 409, 'the recovered delivery is pending');
  t.match(res.json(), { code: 'WEBHOOKS/DELIVERY_PENDING' });
  res = await app.inject({ method: 'POST', url: `${base}/deliveries/${delivery.id}/resend`, headers: auth });
  t.equal(res.statusCode, 409, 'a refused resend still counts against the minute');
  res = await app.inject({ method: 'POST', url: `${base}/deliveries/${delivery.id}/resend`, headers: auth });
  t.equal(res.statusCode, 429, 'the third resend in a minute (limit 2)');
  t.match(res.json(), { code: 'WEBHOOKS/RATE_LIMITED', details: { limit: 2 } });
  t.ok(Number(res.headers['retry-after']) >= 1, 'Retry-After says when');

  res = await app.inject({ method: 'GET', url: '/openapi.json' });
  const paths = res.json().paths as Record<string, Record<string, unknown>>;
  t.ok(paths['/v1/webhooks/{id}/recover']?.post, 'recover is in the OpenAPI document');
  t.ok(paths['/v1/webhooks/{id}/deliveries/{delivery_id}/resend']?.post, 'resend too');
  t.ok(paths['/v1/webhooks/{id}/deliveries/{delivery_id}/attempts']?.get, 'and the attempts log');
});
