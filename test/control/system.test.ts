/**
 * Operability: /openapi.json is a valid OpenAPI 3.1 document (checked by an independent
 * validator) covering both areas; /livez is 200 whenever the process answers, /readyz (and its
 * older name /healthz) is 200 when ready and its store answers, 503 otherwise; /metrics is
 * Prometheus text with our request counters; request ids come back in X-Request-Id.
 */
import { Validator } from '@seriousme/openapi-schema-validator';
import t from 'tap';
import { makeApp } from '../helpers/app.ts';
import { startRedis } from '../helpers/redis.ts';
import { createStore } from '../../store/index.ts';
import { songServices } from '../helpers/songs.ts';
import { webhookServices } from '../helpers/webhooks.ts';

t.test('GET /openapi.json is a valid OpenAPI 3.1 document with both areas', async (t) => {
  const { app } = await makeApp(t, {
    services: (base) => ({ ...songServices(base), ...webhookServices(t, base) }),
  });
  const res = await app.inject({ method: 'GET', url: '/openapi.json' });
  t.equal(res.statusCode, 200);
  const doc = res.json();
  t.equal(doc.openapi, '3.1.0');
  const result = await new Validator().validate(doc);
  t.ok(result.valid, `valid OpenAPI: ${JSON.stringify(result.errors ?? []).slice(0, 2000)}`);
  for (const path of ['/music/v1/songs', '/music/v1/songs/{id}', '/music/v1/usage', '/v1/webhooks', '/v1/webhooks/{id}/rotate-secret']) {
    t.ok(doc.paths[path], `documents ${path}`);
  }
  t.equal(doc.paths['/music/v1/songs'].post.operationId, 'createSong');
  t.ok(doc.components.schemas.Song, 'Song is a named schema');
  t.notOk(doc.paths['/healthz'], 'internal routes are hidden');

  const page = await app.inject({ method: 'GET', url: '/docs' });
  t.ok([200, 302].includes(page.statusCode), 'a readable docs page is served');
});

t.test('/readyz and /healthz are 503 while starting or draining, 200 when ready; /livez is 200 throughout', async (t) => {
  let ready = false;
  const { app } = await makeApp(t, { services: () => ({ isReady: () => ready }) });
  for (const url of ['/readyz', '/healthz']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 503, `${url} while not ready`);
    t.match(res.json(), { status: 'unavailable', reason: /starting or draining/ });
  }
  t.equal((await app.inject({ method: 'GET', url: '/livez' })).statusCode, 200, 'alive while not ready');
  ready = true;
  for (const url of ['/readyz', '/healthz']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 200, `${url} when ready`);
    t.match(res.json(), { status: 'ok', store: 'embedded' });
  }
});

t.test('a Redis outage makes /readyz 503 within a probe timeout but leaves /livez 200 (no restart storm)', { timeout: 60_000 }, async (t) => {
  const redis = await startRedis(t);
  const { app } = await makeApp(t, {
    services: async ({ dataDir }) => {
      const store = await createStore({ dataDir, redisUrl: redis.url, redisPrefix: `rv-ready-${process.pid}:` });
      t.teardown(() => store.close());
      return { store };
    },
  });
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200, 'ready while Redis answers');
  await redis.stop({ signal: 'SIGKILL' });
  const started = performance.now();
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  const ms = performance.now() - started;
  t.equal(res.statusCode, 503, 'unready during the outage');
  t.match(res.json().reason, /store unreachable/);
  // 800 ms ping timeout plus scheduling on a loaded machine; the point is it does not wait out
  // ioredis' reconnect hold (≈ 10 s), which would time every probe out.
  t.ok(ms < 4000, `answered in ${ms.toFixed(0)} ms (ping bounded at 800 ms), not after Redis' 10 s hold`);
  const live = await app.inject({ method: 'GET', url: '/livez' });
  t.equal(live.statusCode, 200, 'still alive');
  t.equal(live.json().status, 'ok');
  await redis.restart();
  let back = 0;
  // Poll (not sleep): ioredis reconnects on its own schedule.
  for (let i = 0; i < 100 && back !== 200; i++) back = (await app.inject({ method: 'GET', url: '/readyz' })).statusCode;
  t.equal(back, 200, 'ready again once Redis is back');
});

t.test('/metrics exposes request counters by route; responses carry X-Request-Id', async (t) => {
  const { app } = await makeApp(t);
  const first = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'trace-me-123' } });
  t.equal(first.headers['x-request-id'], 'trace-me-123', 'a sane caller id is kept');
  const odd = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'bad id with spaces' } });
  t.match(odd.headers['x-request-id'], /^req_/, 'an unsafe one is replaced');
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /text\/plain/);
  t.match(res.body, /reverie_http_requests_total\{method="GET",route="\/healthz",status="200"\} 2/);
  t.match(res.body, /reverie_http_request_duration_seconds_bucket/);
});

t.test('with METRICS_TOKEN, /metrics answers only its bearer token (401 in the envelope otherwise)', async (t) => {
  const token = 'm3trics-t0ken-0123456789';
  const { app } = await makeApp(t, { env: { METRICS_TOKEN: token } });
  for (const authorization of [undefined, 'Bearer nope', `Bearer ${token}x`, token]) {
    const res = await app.inject({ method: 'GET', url: '/metrics', headers: authorization ? { authorization } : {} });
    t.equal(res.statusCode, 401, `${authorization ?? 'no header'} → 401`);
    t.equal(res.json().code, 'AUTH/UNAUTHORIZED');
    t.notMatch(res.body, /reverie_/, 'no metric leaks');
  }
  const ok = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${token}` } });
  t.equal(ok.statusCode, 200);
  t.match(ok.body, /reverie_http_requests_total/);
});

t.test('/healthz says the store is unreachable without echoing its error', async (t) => {
  const { app, store, dataDir } = await makeApp(t, { services: () => ({ isReady: () => true }) });
  await store.close();
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 503);
  t.same(res.json(), { status: 'unavailable', reason: 'store unreachable' });
  t.notOk(res.body.includes(dataDir), 'no path');
});
