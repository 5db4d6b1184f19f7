/**
 * Every failure answers in its area's shape (spec "Errors"): Area A's Error record under the
 * music base path, Area B's envelope elsewhere — for 401 (missing and invalid key), 404 (unknown
 * route and unknown resource), 400 (malformed JSON, invalid field), 413 and 415. Never a
 * framework-default body.
 */
import t, { type Test } from 'tap';
import { makeApp } from '../helpers/app.ts';
import { makeStreamApp } from './streamApp.ts';
import { songServices } from '../helpers/songs.ts';
import { webhookServices } from '../helpers/webhooks.ts';

const isMusicError = (t: Test, body: Record<string, unknown>, code: string) => {
  t.same(Object.keys(body).sort(), ['error', 'message'], 'Error record has exactly error and message');
  t.equal(body.error, code);
  t.type(body.message, 'string');
  t.ok((body.message as string).length > 5, 'message says something');
};

const isEnvelope = (t: Test, body: Record<string, unknown>, status: number, code: string) => {
  t.same(Object.keys(body).sort(), ['code', 'details', 'error', 'requestId', 'status', 'success', 'traceId']);
  t.equal(body.success, false);
  t.equal(body.status, status);
  t.equal(body.code, code);
  t.type(body.error, 'string');
  t.match(body.requestId, /^req_/);
  t.match(body.traceId, /^[0-9a-f]{32}$/);
};

t.test('Area A answers every failure with the Error record', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const k = await key('free');
  const auth = { authorization: `Bearer ${k}` };

  let res = await app.inject({ method: 'GET', url: '/music/v1/usage' });
  t.equal(res.statusCode, 401, 'missing key');
  isMusicError(t, res.json(), 'unauthorized');

  res = await app.inject({ method: 'GET', url: '/music/v1/usage', headers: { authorization: 'Bearer rv_notarealkeynotarealkeynotarealkeynotarealk' } });
  t.equal(res.statusCode, 401, 'invalid key');
  isMusicError(t, res.json(), 'unauthorized');

  res = await app.inject({ method: 'GET', url: '/music/v1/nope', headers: auth });
  t.equal(res.statusCode, 404, 'unknown route');
  isMusicError(t, res.json(), 'route_not_found');

  res = await app.inject({ method: 'GET', url: '/music/v1/songs/sng_missing', headers: auth });
  t.equal(res.statusCode, 404, 'unknown song');
  isMusicError(t, res.json(), 'not_found');

  res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: { ...auth, 'content-type': 'application/json' }, payload: '{"prompt": "lo-fi",' });
  t.equal(res.statusCode, 400, 'malformed JSON');
  isMusicError(t, res.json(), 'malformed_json');

  res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: { prompt: 'lo-fi beat', duration: 500 } });
  t.equal(res.statusCode, 400, 'invalid field');
  isMusicError(t, res.json(), 'invalid_request');
  t.match(res.json().message, /duration/, 'the message names the field');

  res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: { ...auth, 'content-type': 'text/plain' }, payload: 'lo-fi please' });
  t.equal(res.statusCode, 415, 'wrong content type');
  isMusicError(t, res.json(), 'unsupported_media_type');

  res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify({ prompt: 'x'.repeat(2 * 1024 * 1024) }) });
  t.equal(res.statusCode, 413, 'oversized body');
  isMusicError(t, res.json(), 'payload_too_large');
});

t.test('Area B answers every failure with the envelope, requestId and traceId', async (t) => {
  const { app, key } = await makeApp(t, { services: (base) => webhookServices(t, base) });
  const k = await key('free');
  const auth = { authorization: `Bearer ${k}` };

  let res = await app.inject({ method: 'GET', url: '/v1/webhooks' });
  t.equal(res.statusCode, 401, 'missing key');
  isEnvelope(t, res.json(), 401, 'AUTH/UNAUTHORIZED');
  t.equal(res.headers['x-request-id'], res.json().requestId, 'request id also in the header');

  res = await app.inject({ method: 'GET', url: '/v1/webhooks', headers: { authorization: 'Bearer nope' } });
  t.equal(res.statusCode, 401, 'invalid key');
  isEnvelope(t, res.json(), 401, 'AUTH/UNAUTHORIZED');

  res = await app.inject({ method: 'GET', url: '/v1/nothing-here', headers: auth });
  t.equal(res.statusCode, 404, 'unknown route');
  isEnvelope(t, res.json(), 404, 'ROUTE/NOT_FOUND');

  res = await app.inject({ method: 'GET', url: '/v1/webhooks/whk_missing', headers: auth });
  t.equal(res.statusCode, 404, 'unknown resource');
  isEnvelope(t, res.json(), 404, 'WEBHOOKS/NOT_FOUND');

  res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: { ...auth, 'content-type': 'application/json' }, payload: '{not json' });
  t.equal(res.statusCode, 400, 'malformed JSON');
  isEnvelope(t, res.json(), 400, 'REQUEST/MALFORMED_JSON');

  res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: auth, payload: { url: 'https://example.com/hook', events: ['stream.exploded'] } });
  t.equal(res.statusCode, 400, 'invalid field');
  isEnvelope(t, res.json(), 400, 'REQUEST/INVALID');
  t.match(JSON.stringify(res.json().details), /events\[0\]/, 'details name the field path');

  res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: { ...auth, 'content-type': 'application/xml' }, payload: '<a/>' });
  t.equal(res.statusCode, 415, 'wrong content type');
  isEnvelope(t, res.json(), 415, 'REQUEST/UNSUPPORTED_MEDIA_TYPE');

  res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) }) });
  t.equal(res.statusCode, 413, 'oversized body');
  isEnvelope(t, res.json(), 413, 'REQUEST/TOO_LARGE');

  res = await app.inject({ method: 'GET', url: '/v1/webhooks', headers: { ...auth, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
  t.equal(res.statusCode, 200);
  res = await app.inject({ method: 'GET', url: '/v1/nothing', headers: { ...auth, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
  t.equal(res.json().traceId, '4bf92f3577b34da6a3ce929d0e0e4736', 'a caller-given trace id is kept');
});

t.test('paths outside both areas answer in Area B shape', async (t) => {
  const { app } = await makeApp(t);
  const res = await app.inject({ method: 'GET', url: '/definitely/not/here' });
  t.equal(res.statusCode, 404);
  isEnvelope(t, res.json(), 404, 'ROUTE/NOT_FOUND');
});

t.test('malformed URLs and ids of any shape answer 4xx in the area shape, never 5xx', async (t) => {
  const songsApp = await makeApp(t, { services: songServices });
  const musicAuth = { authorization: `Bearer ${await songsApp.key('free')}` };
  for (const url of ['/music/v1/songs/%zz', '/music/v1/songs/%E0%A4%A', `/music/v1/songs/sng_${'a'.repeat(300)}`, '/music/v1/songs/bykey:x', '/music/v1/songs/acct:x/mp3', '/music/v1/songs/sng_x/1.mp3%00']) {
    const res = await songsApp.app.inject({ method: 'GET', url, headers: musicAuth });
    t.ok(res.statusCode >= 400 && res.statusCode < 500, `${url}: ${res.statusCode}`);
    t.same(Object.keys(res.json()).sort(), ['error', 'message'], `${url}: the Error record`);
  }

  const streams = await makeStreamApp(t);
  const auth = await streams.auth('pro');
  for (const [method, url] of [
    ['GET', '/v1/streams/%zz'],
    ['GET', `/v1/streams/str_${'a'.repeat(300)}`],
    ['GET', '/v1/streams/bykey:key_x'],
    ['GET', '/v1/streams/bykey:key_x/status'],
    ['PATCH', '/v1/streams/bykey:key_x'],
    ['DELETE', '/v1/streams/str_%2F..%2F'],
    ['POST', '/live/bykey:key_x/whip'],
    ['POST', '/live/%zz/whep'],
    ['GET', '/v1/webhooks/dlv:x'],
  ] as const) {
    const res = await streams.app.inject({ method, url, headers: { ...auth, ...(method === 'PATCH' ? { 'content-type': 'application/json' } : {}) }, ...(method === 'PATCH' ? { payload: '{"params":{}}' } : {}) });
    t.ok(res.statusCode >= 400 && res.statusCode < 500, `${method} ${url}: ${res.statusCode}`);
    if (!url.startsWith('/live/')) t.equal(res.json().success, false, `${method} ${url}: the envelope`);
  }
});
