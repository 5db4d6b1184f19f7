/**
 * Per-address limits behind the TLS proxy our docs recommend: a real nginx adding
 * X-Forwarded-For in front of the real server (embedded default) with TRUSTED_PROXIES=127.0.0.1.
 * Clients are told apart by the loopback source address they bind (127.0.0.2, 127.0.0.3 …), which
 * nginx appends to X-Forwarded-For. Offers come from a real libwebrtc peer (@roamhq/wrtc).
 */
import pino from 'pino';
import t from 'tap';
import { makeApp } from '../helpers/app.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { send } from '../helpers/net.ts';
import { haveNginx, startNginxProxy } from '../helpers/nginxProxy.ts';
import { realOffer } from '../helpers/wrtcOffer.ts';

/** The media node's defaults (media/settings.ts): WHIP and WHEP POSTs per client address a minute. */
const WHIP_PER_ADDRESS = 30;
const WHEP_PER_ADDRESS = 60;
const SDP = 'application/sdp';

t.test('behind a trusted nginx, 30 keyless WHIP POSTs from one client leave another client\'s publish alone, and the first client is still limited', { timeout: 60_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const { server, api } = await startLiveServer(t, { env: { ROLES: 'api,media', TRUSTED_PROXIES: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1' } });
  const proxy = await startNginxProxy(t, server.url);
  const created = await api('POST', '/v1/streams', { params: { prompt: 'proxy', width: 384, height: 384, skip_diffusion: true } });
  if (!t.equal(created.status, 201, created.status === 201 ? 'stream created' : JSON.stringify(created.body))) return;

  const junk = [];
  for (let i = 0; i < WHIP_PER_ADDRESS; i++) junk.push((await send(proxy.url, { method: 'POST', path: '/live/str_junk/whip', from: '127.0.0.2' })).status);
  t.same([...new Set(junk)], [415], `${WHIP_PER_ADDRESS} keyless POSTs without an SDP body: each 415`);

  const offer = await realOffer(t, 'sendonly');
  const pub = await send(proxy.url, {
    method: 'POST',
    path: `/live/${created.body['id'] as string}/whip`,
    from: '127.0.0.3',
    headers: { 'content-type': SDP, authorization: `Bearer ${created.body['stream_key'] as string}` },
    body: offer,
  });
  t.equal(pub.status, 201, `another client's publish with a valid key through the proxy → 201${pub.status === 201 ? '' : ` (got: ${pub.body.trim()})`}`);
  t.match(pub.body, /^v=0/, 'with an SDP answer');

  const over = await send(proxy.url, { method: 'POST', path: '/live/str_junk/whip', from: '127.0.0.2' });
  t.equal(over.status, 429, `the junk client's POST ${WHIP_PER_ADDRESS + 1} through the proxy → 429`);
  t.match(over.body, /publish requests from this address/);
  t.ok(Number(over.headers['retry-after']) > 0, 'with Retry-After');
});

t.test('behind a trusted nginx, 70 viewers from 70 addresses all get 201; one address is still held to 60 a minute', { timeout: 120_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const { server, api } = await startLiveServer(t, { env: { ROLES: 'api,media', TRUSTED_PROXIES: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1' } });
  const proxy = await startNginxProxy(t, server.url);
  const created = await api('POST', '/v1/streams', { params: { prompt: 'proxy', width: 384, height: 384, skip_diffusion: true } });
  if (!t.equal(created.status, 201, created.status === 201 ? 'stream created' : JSON.stringify(created.body))) return;
  const whep = `/live/${created.body['output_playback_id'] as string}/whep`;
  const offer = await realOffer(t, 'recvonly');

  /** One viewer: POST through the proxy from `from`, then DELETE its session (so no viewer stays pending). */
  const view = async (from: string): Promise<number> => {
    const res = await send(proxy.url, { method: 'POST', path: whep, from, headers: { 'content-type': SDP }, body: offer });
    if (res.status === 201) {
      const location = new URL(String(res.headers['location']), server.url);
      const del = await send(proxy.url, { method: 'DELETE', path: location.pathname, from });
      if (del.status !== 200) throw new Error(`DELETE ${location.pathname} → ${del.status}`);
    }
    return res.status;
  };

  const statuses: Record<string, number> = {};
  for (let i = 0; i < 70; i++) statuses[`127.0.1.${i + 1}`] = await view(`127.0.1.${i + 1}`);
  const refused = Object.entries(statuses).filter(([, s]) => s !== 201);
  t.same(refused, [], '70 viewers from 70 addresses: every one 201');

  const one = [];
  for (let i = 0; i < WHEP_PER_ADDRESS + 1; i++) one.push(await view('127.0.2.1'));
  t.equal(one.filter((s) => s === 201).length, WHEP_PER_ADDRESS, `one address behind the proxy: ${WHEP_PER_ADDRESS} viewers a minute`);
  t.equal(one.at(-1), 429, 'then 429');
});

t.test('a client forging X-Forwarded-For or Forwarded is limited by its own address, directly or through the trusted proxy', { timeout: 60_000, skip: !haveNginx && 'nginx not installed' }, async (t) => {
  const { server } = await startLiveServer(t, { env: { ROLES: 'api,media', TRUSTED_PROXIES: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1' } });
  const proxy = await startNginxProxy(t, server.url);
  for (const [base, from, how] of [
    [server.url, '127.0.0.5', 'directly'],
    [proxy.url, '127.0.0.6', 'through the proxy'],
  ] as const) {
    const statuses = [];
    for (let i = 0; i <= WHIP_PER_ADDRESS; i++) {
      // A new made-up address on every request: believed, it would never reach the limit.
      const forged = `198.51.100.${i + 1}`;
      const headers: Record<string, string> = i % 2 === 0 ? { 'x-forwarded-for': forged } : { forwarded: `for=${forged}` };
      statuses.push((await send(base, { method: 'POST', path: '/live/str_junk/whip', from, headers })).status);
    }
    t.same([...new Set(statuses.slice(0, WHIP_PER_ADDRESS))], [415], `${how}: the first ${WHIP_PER_ADDRESS} → 415`);
    t.equal(statuses.at(-1), 429, `${how}: POST ${WHIP_PER_ADDRESS + 1} → 429, counted against ${from}`);
  }
});

t.test('the request log records the client behind a trusted proxy, and the TCP peer for anyone else', { timeout: 20_000 }, async (t) => {
  const lines: { msg?: string; client?: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as { msg?: string; client?: string }) });
  const { app } = await makeApp(t, { logger, env: { TRUSTED_PROXIES: '10.0.0.0/8' } });
  const logged = async (remoteAddress: string, xff: string) => {
    lines.length = 0;
    await app.inject({ method: 'GET', url: '/livez', remoteAddress, headers: { 'x-forwarded-for': xff } });
    return lines.find((l) => l.msg === 'request done')?.client;
  };
  t.equal(await logged('10.1.2.3', '198.51.100.7, 10.9.9.9'), '198.51.100.7', 'through two trusted hops: the client');
  t.equal(await logged('192.0.2.1', '198.51.100.7'), '192.0.2.1', 'from an untrusted peer: the peer, whatever it claims');
});
