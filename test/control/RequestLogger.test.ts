/**
 * `request.log` and the access line, through a real pino logger writing to a captured stream and
 * real requests through the app: every line a request writes carries its request id (the
 * caller's or ours), a route's own `logLevel` decides what it writes, the child logger is made
 * only when a line is written, and the access line (`request done`) is written exactly once per
 * request with method, route, url (without the query), status, requestId, ms and client.
 */
import pino, { type Logger } from 'pino';
import t, { type Test } from 'tap';
import { makeApp, type TestApp } from '../helpers/app.ts';
import { until } from '../helpers/until.ts';
import { webhookServices } from '../helpers/webhooks.ts';

type Line = Record<string, unknown>;

/** A real pino logger whose lines land, parsed, in `lines`; `children` counts child loggers made. */
function capturedLogger(level: string): { logger: Logger; lines: Line[]; children: () => number } {
  const lines: Line[] = [];
  let children = 0;
  const logger = pino(
    {
      level,
      onChild: () => {
        children += 1;
      },
    },
    { write: (s: string) => void lines.push(JSON.parse(s) as Line) },
  );
  return { logger, lines, children: () => children };
}

/** An app logging at `level` into `lines`, with test routes at /t/… beside the real ones. */
async function loggedApp(t: Test, level = 'info'): Promise<TestApp & ReturnType<typeof capturedLogger>> {
  const captured = capturedLogger(level);
  const made = await makeApp(t, { logger: captured.logger, services: (base) => webhookServices(t, base) });
  const { app } = made;
  app.get('/t/quiet', () => ({ ok: true }));
  app.get('/t/chatty', (request) => {
    request.log.info({ step: 1 }, 'chatty says hello');
    request.log.debug('chatty debug, below info');
    request.log.child({ part: 'inner' }).warn('from a child of request.log');
    return { ok: true };
  });
  app.get('/t/verbose', { logLevel: 'debug' }, (request) => {
    request.log.debug('verbose route debug');
    request.log.trace('verbose route trace, below debug');
    return { level: request.log.level };
  });
  app.get('/t/hushed', { logLevel: 'error' }, (request) => {
    request.log.info('hushed route info, below error');
    request.log.error('hushed route error');
    return { level: request.log.level };
  });
  app.get('/t/boom', () => {
    throw new Error('boom on purpose');
  });
  app.get('/t/pino-only', (request) => {
    // @ts-expect-error request.log is fastify's logger interface (RequestLogger), not a pino Logger
    return { bindings: typeof request.log.bindings };
  });
  await app.ready();
  return { ...made, ...captured };
}

const accessLines = (lines: Line[], requestId: unknown) => lines.filter((l) => l.msg === 'request done' && l.requestId === requestId);

t.test('request.log lines carry the request id, the caller-given one or ours', async (t) => {
  const { app, lines } = await loggedApp(t);
  const ours = await app.inject({ method: 'GET', url: '/t/chatty' });
  t.equal(ours.statusCode, 200);
  const theirs = await app.inject({ method: 'GET', url: '/t/chatty', headers: { 'x-request-id': 'caller-42' } });
  t.equal(theirs.statusCode, 200);

  for (const requestId of [ours.headers['x-request-id'], 'caller-42']) {
    t.match(requestId, /\S/);
    const hello = lines.filter((l) => l.msg === 'chatty says hello' && l.requestId === requestId);
    t.equal(hello.length, 1, `one info line for ${String(requestId)}`);
    t.match(hello[0], { level: 30, step: 1 });
    const inner = lines.filter((l) => l.msg === 'from a child of request.log' && l.requestId === requestId);
    t.equal(inner.length, 1, "a child of request.log keeps the id and adds its bindings");
    t.match(inner[0], { level: 40, part: 'inner' });
  }
  t.notOk(lines.some((l) => l.msg === 'chatty debug, below info'), 'a level below the logger is not written');
});

t.test("a route's own logLevel decides what request.log writes, in both directions", async (t) => {
  const { app, lines } = await loggedApp(t, 'info');
  const verbose = await app.inject({ method: 'GET', url: '/t/verbose' });
  t.same(verbose.json(), { level: 'debug' }, "request.log's level is the route's");
  const v = lines.filter((l) => l.requestId === verbose.headers['x-request-id']);
  t.ok(v.some((l) => l.msg === 'verbose route debug' && l.level === 20), 'debug is written on a debug route under an info logger');
  t.notOk(v.some((l) => l.msg === 'verbose route trace, below debug'));

  const hushed = await app.inject({ method: 'GET', url: '/t/hushed' });
  t.same(hushed.json(), { level: 'error' });
  const h = lines.filter((l) => l.requestId === hushed.headers['x-request-id']);
  t.ok(h.some((l) => l.msg === 'hushed route error' && l.level === 50));
  t.notOk(h.some((l) => l.msg === 'hushed route info, below error'), 'info is not written on an error route');
});

t.test('a request that writes no line makes no child logger; one that writes makes one', async (t) => {
  const { app, children } = await loggedApp(t);
  const before = children();
  for (let i = 0; i < 20; i++) t.equal((await app.inject({ method: 'GET', url: '/t/quiet' })).statusCode, 200);
  t.equal(children(), before, 'twenty quiet requests, no child');
  await app.inject({ method: 'GET', url: '/t/chatty' });
  // One for request.log's own child, one for the child the route asks of it.
  t.equal(children(), before + 2);
});

t.test('request.log has only what fastify asks of a logger', async (t) => {
  const { app } = await loggedApp(t);
  t.same((await app.inject({ method: 'GET', url: '/t/pino-only' })).json(), { bindings: 'undefined' });
});

t.test('the access line is written once per request with method, route, url, status, requestId and ms', async (t) => {
  const { app, lines, key } = await loggedApp(t);
  const auth = { authorization: `Bearer ${await key('free')}` };
  const cases = [
    { url: '/t/quiet?token=secret-in-query', headers: {}, status: 200, route: '/t/quiet', path: '/t/quiet' },
    { url: '/v1/webhooks', headers: {}, status: 401, route: '/v1/webhooks', path: '/v1/webhooks' },
    { url: '/v1/webhooks', headers: auth, status: 200, route: '/v1/webhooks', path: '/v1/webhooks' },
    { url: '/v1/webhooks/whk_missing', headers: auth, status: 404, route: '/v1/webhooks/:id', path: '/v1/webhooks/whk_missing' },
    { url: '/v1/no-such-route', headers: auth, status: 404, route: 'unmatched', path: '/v1/no-such-route' },
    { url: '/t/boom', headers: { 'x-request-id': 'caller-boom' }, status: 500, route: '/t/boom', path: '/t/boom' },
    // Refused by the router before any route or hook runs (bad percent-encoding).
    { url: '/v1/webhooks/%E0%A4%A?token=secret-in-query', headers: {}, status: 400, route: 'unmatched', path: '/v1/webhooks/%E0%A4%A' },
  ];
  const seen: { requestId: unknown; want: (typeof cases)[number] }[] = [];
  for (const want of cases) {
    const res = await app.inject({ method: 'GET', url: want.url, headers: want.headers });
    t.equal(res.statusCode, want.status, want.url);
    seen.push({ requestId: res.headers['x-request-id'], want });
  }
  // onResponse runs when the response has finished, which may be just after inject resolves.
  await until('an access line per request', () => seen.every((s) => accessLines(lines, s.requestId).length > 0), (ok) => ok, 5_000, 10);

  for (const { requestId, want } of seen) {
    const found = accessLines(lines, requestId);
    t.equal(found.length, 1, `one access line for ${want.url}`);
    t.match(found[0], { level: 30, requestId, method: 'GET', route: want.route, url: want.path, status: want.status, ms: Number, client: '127.0.0.1' }, want.url);
    t.ok((found[0]?.ms as number) >= 0, 'ms is a duration');
  }
  t.notOk(JSON.stringify(lines).includes('secret-in-query'), 'the query string is not logged');
  const failed = lines.filter((l) => l.msg === 'request failed');
  t.equal(failed.length, 1, 'the 500 also writes its error line');
  t.match(failed[0], { level: 50, requestId: 'caller-boom', err: { message: 'boom on purpose' } });
  t.equal(lines.filter((l) => l.msg === 'request done').length, cases.length, 'no other access lines');
  const metrics = await app.inject({ method: 'GET', url: '/metrics' });
  t.match(metrics.body, /reverie_http_requests_total\{method="GET",route="unmatched",status="400"\} 1\n/, 'the refused URL is counted too');
});

t.test('at a level above info no access line is written and requests still answer', async (t) => {
  const { app, lines } = await loggedApp(t, 'warn');
  t.equal((await app.inject({ method: 'GET', url: '/t/quiet' })).statusCode, 200);
  t.equal((await app.inject({ method: 'GET', url: '/t/boom' })).statusCode, 500);
  await until('the error line', () => lines.filter((l) => l.msg === 'request failed').length, (n) => n === 1, 5_000, 10);
  t.notOk(lines.some((l) => l.msg === 'request done'));
});
