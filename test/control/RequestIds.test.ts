/**
 * Request ids: unique per request within a process and apart between apps (each app draws its own
 * random prefix), a caller's well-formed `X-Request-Id` kept, ours otherwise; the id comes back
 * in the `X-Request-Id` header and in Area B's error envelope beside the trace id, which is the
 * caller's `traceparent` trace id when that is valid and a new one otherwise.
 */
import t from 'tap';
import { RequestIds } from '../../control/RequestIds.ts';
import { makeApp } from '../helpers/app.ts';
import { webhookServices } from '../helpers/webhooks.ts';

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

t.test('ids are unique across many requests and across two apps built in one process', { timeout: 120_000 }, async (t) => {
  const a = await makeApp(t);
  const b = await makeApp(t);
  const seen = new Set<string>();
  // 400 per app: enough to run a counter through several base-36 digits, few enough for a loaded box.
  for (const { app } of [a, b]) {
    for (let i = 0; i < 400; i++) {
      const res = await app.inject({ method: 'GET', url: '/livez' });
      const id = res.headers['x-request-id'];
      if (typeof id !== 'string') return t.fail(`no X-Request-Id: ${JSON.stringify(res.headers)}`);
      seen.add(id);
    }
  }
  t.equal(seen.size, 800, 'every id distinct');
  const prefixes = new Set([...seen].map((id) => id.slice(0, id.lastIndexOf('.'))));
  t.equal(prefixes.size, 2, 'one prefix per app');
  t.ok([...prefixes].every((p) => /^req_[A-Za-z0-9_-]{8}$/.test(p)), `random 48-bit prefixes: ${[...prefixes].slice(0, 3).join(' ')}`);
});

t.test('next() never repeats in one RequestIds; two RequestIds share no id', (t) => {
  const one = new RequestIds();
  const two = new RequestIds();
  const ids = new Set<string>();
  for (let i = 0; i < 10_000; i++) {
    ids.add(one.next());
    ids.add(two.next());
  }
  t.equal(ids.size, 20_000);
  t.end();
});

t.test('a well-formed X-Request-Id is echoed; a malformed or repeated one is replaced by ours', async (t) => {
  const { app } = await makeApp(t);
  const echo = async (given: string | string[]) => (await app.inject({ method: 'GET', url: '/livez', headers: { 'x-request-id': given } })).headers['x-request-id'];

  for (const given of ['trace-me-123', 'A.b_c:d-9', 'x', 'x'.repeat(64)]) t.equal(await echo(given), given, `kept: ${given.slice(0, 20)}`);
  for (const given of ['bad id with spaces', 'x'.repeat(65), 'semi;colon', 'new\\nline', 'ünïcode', '']) {
    t.match(await echo(given), /^req_[A-Za-z0-9._-]+$/, `replaced: ${JSON.stringify(given.slice(0, 20))}`);
  }
  t.match(await echo(['one', 'two']), /^req_/, 'a header sent twice is not a sane id');

  const ids = new RequestIds();
  t.equal(ids.forRequest('abc'), 'abc');
  t.match(ids.forRequest(undefined), /^req_/);
  t.match(ids.forRequest(['abc', 'def']), /^req_/);
  const ours = ids.next();
  t.equal(ids.forRequest(ours), ours, 'our own ids are sane ids (they survive a hop through another of our services)');
});

t.test('the id is the X-Request-Id header and the envelope requestId; the traceparent trace id is kept when valid', async (t) => {
  const { app, key } = await makeApp(t, { services: (base) => webhookServices(t, base) });
  const auth = { authorization: `Bearer ${await key('free')}` };

  let res = await app.inject({ method: 'GET', url: '/v1/webhooks' });
  t.equal(res.statusCode, 401);
  t.match(res.headers['x-request-id'], /^req_/);
  t.equal(res.json().requestId, res.headers['x-request-id'], 'envelope and header agree (ours)');
  t.match(res.json().traceId, /^[0-9a-f]{32}$/, 'a new trace id without traceparent');

  res = await app.inject({ method: 'GET', url: '/v1/nothing-here', headers: { ...auth, 'x-request-id': 'caller-7', traceparent: TRACEPARENT } });
  t.equal(res.statusCode, 404);
  t.equal(res.headers['x-request-id'], 'caller-7');
  t.match(res.json(), { requestId: 'caller-7', traceId: '4bf92f3577b34da6a3ce929d0e0e4736' }, 'the caller id and trace id in the envelope');

  res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: { ...auth, traceparent: TRACEPARENT }, payload: { url: 'https://example.com/hook', events: ['stream.exploded'] } });
  t.equal(res.statusCode, 400, 'a validation failure');
  t.match(res.json(), { code: 'REQUEST/INVALID', requestId: res.headers['x-request-id'], traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });

  // Before any route (the router refuses the URL, so no hook runs) the header and envelope are the same.
  res = await app.inject({ method: 'GET', url: '/v1/webhooks/%E0%A4%A', headers: { ...auth, 'x-request-id': 'caller-8', traceparent: TRACEPARENT } });
  t.equal(res.statusCode, 400, 'a malformed URL');
  t.match(res.json(), { requestId: 'caller-8', traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
  t.equal(res.headers['x-request-id'], 'caller-8', 'the header too');

  const traces = new Set<string>();
  for (const traceparent of [undefined, undefined, 'garbage', `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`, '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01']) {
    res = await app.inject({ method: 'GET', url: '/v1/nothing', headers: { ...auth, ...(traceparent ? { traceparent } : {}) } });
    const traceId: unknown = res.json().traceId;
    t.match(traceId, /^[0-9a-f]{32}$/, `a new trace id for ${traceparent ?? 'no traceparent'}`);
    t.not(traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
    traces.add(String(traceId));
  }
  t.equal(traces.size, 5, 'a new trace id per request');
});
