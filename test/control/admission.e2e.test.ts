/**
 * Admission rules on the real server (api + media roles, embedded store): an HTTPS hook receiver
 * on loopback (test CA, ALLOW_LOOPBACK_TARGETS), an OBS-like WHIP publisher and libdatachannel
 * WHEP viewers (test/helpers/obsPublisher.ts), real libwebrtc offers, LL-HLS over HTTP.
 * - A hook admits and refuses WHIP, WHEP and LL-HLS; a refusal is 401/403 before anything exists
 *   (the node holds no stream for a refused publisher or a refused viewer of an idle stream; a
 *   live stream's viewer count does not move); the hook gets the documented body and never the
 *   stream key; a hook that hangs is cut at ADMISSION_HOOK_TIMEOUT_MS and refuses; an LL-HLS
 *   player's many requests make one hook call (decisions cached per client and query).
 * - A JWT rule: no token, an expired one, one for another playback id, one signed by another key
 *   → 401; a good one (Authorization or ?jwt=) admits viewers, and publishers (?jwt=) under a
 *   `publish` rule; `?jwt=` is carried into the playlist's URIs.
 *   A JWKS URL is fetched through the outbound rules and cached; the account's default rule
 *   applies to a stream that has none.
 * - Rules are validated when set, naming the field: hook and JWKS URLs obey the webhooks' address
 *   rules (HTTPS, no private addresses even with loopback allowed), keys must be usable.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { jwks, keyPair, signJwt } from '../helpers/jwt.ts';
import { startLiveServer, type LiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { realOffer } from '../helpers/wrtcOffer.ts';
import { makeTls, TestReceiver, type ReceivedRequest } from '../webhooks/helpers.ts';

const HOOK_TIMEOUT_MS = 600;

async function setup(t: Test, env: Record<string, string> = {}) {
  const tls = makeTls();
  t.teardown(() => tls.cleanup());
  const receiver = await TestReceiver.start(tls);
  t.teardown(() => receiver.close());
  const live = await startLiveServer(t, {
    env: { ROLES: 'api,media', ALLOW_LOOPBACK_TARGETS: 'true', EXTRA_CA_FILE: join(tls.dir, 'ca.crt'), ADMISSION_HOOK_TIMEOUT_MS: String(HOOK_TIMEOUT_MS), ADMISSION_CACHE_TTL: '120', WEBRTC_INTERFACES: '127.0.0.1', ...env },
  });
  const created = await live.api('POST', '/v1/streams', { params: { prompt: 'admission', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  return { receiver, live, stream: created.body as { id: string; stream_key: string; output_playback_id: string } };
}

/** `reverie_media_streams` (streams the node holds) and the stream's `reverie_media_viewers`. */
async function held(live: LiveServer, streamId: string): Promise<{ streams: number; viewers: number }> {
  const text = await (await fetch(`${live.url}/metrics`)).text();
  const streams = Number(/^reverie_media_streams (\d+)/m.exec(text)?.[1] ?? NaN);
  const viewers = Number(new RegExp(`^reverie_media_viewers\\{stream_id="${streamId}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { streams, viewers };
}

const hookBody = (r: ReceivedRequest | undefined) => JSON.parse(r?.body ?? 'null') as Record<string, unknown> | null;

t.test('an HTTP hook admits and refuses WHIP, WHEP and LL-HLS before anything is built; a hanging hook refuses', { timeout: 240_000 }, async (t) => {
  const { receiver, live, stream } = await setup(t);
  const { api } = live;
  const pb = stream.output_playback_id;
  // The hook admits what carries ?ok=1 and refuses the rest (401 for ?ask=login), hangs on ?hang=1.
  receiver.reply = (r) => {
    const q = (hookBody(r)?.['query'] ?? {}) as Record<string, string>;
    if (q['hang'] === '1') return 'hang';
    if (q['ok'] === '1') return { status: 204 };
    return { status: q['ask'] === 'login' ? 401 : 403, body: 'no' };
  };

  const put = await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'hook', url: receiver.url('/admit'), actions: ['publish', 'read'] });
  t.equal(put.status, 200, JSON.stringify(put.body));
  t.same(put.body, { rule: { type: 'hook', url: receiver.url('/admit'), actions: ['publish', 'read'] }, source: 'stream' });

  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 600, gop: 30 });
  const whip = `${live.url}/live/${stream.id}/whip`;

  // WHIP refused: 403 (401 when the hook says 401), and the node holds nothing.
  const refused = await pubs.publish({ url: `${whip}?try=1`, token: stream.stream_key, source });
  t.equal(refused.status, 403, `a refused publisher gets 403 (${refused.body.trim()})`);
  t.equal(refused.location, null, 'and no session URL');
  const body = hookBody(receiver.requests[0]);
  t.same(body, { action: 'publish', stream_id: stream.id, playback_id: pb, client_ip: '127.0.0.1', protocol: 'whip', query: { try: '1' }, token: null }, 'the hook got the documented body');
  t.notMatch(receiver.requests[0]?.body ?? '', stream.stream_key, 'and never the stream key');
  t.equal(receiver.requests[0]?.headers['content-type'], 'application/json');
  t.same(await held(live, stream.id), { streams: 0, viewers: 0 }, 'the node holds no stream for a refused publisher');
  const login = await pubs.publish({ url: `${whip}?ask=login`, token: stream.stream_key, source });
  t.equal(login.status, 401, 'a hook answering 401 refuses with 401');
  const badKey = await pubs.publish({ url: `${whip}?ok=1`, token: `${stream.stream_key}x`, source });
  t.equal(badKey.status, 401, 'the stream key is still checked first');
  t.equal(receiver.requests.length, 2, 'and a bad key never reaches the hook');

  // WHEP refused on the idle stream: 403, nothing held (a viewer of an idle stream would hold it).
  const viewerRefused = await pubs.play({ url: `${live.url}/live/${pb}/whep?try=2` });
  t.equal(viewerRefused.status, 403, 'a refused viewer gets 403');
  t.same(await held(live, stream.id), { streams: 0, viewers: 0 }, 'and the node holds no stream for it');
  t.match(hookBody(receiver.requests.at(-1)), { action: 'read', protocol: 'whep', playback_id: pb, query: { try: '2' } });

  // Admitted publisher.
  const pub = await pubs.publish({ url: `${whip}?ok=1`, token: stream.stream_key, source });
  t.equal(pub.status, 201, `an admitted publisher gets 201 (${pub.body.trim()})`);
  await pubs.waitState(pub.id, 'connected', 30_000);

  // WHEP on the live stream: admitted → a viewer; refused and hanging → no viewer added.
  const viewer = await pubs.play({ url: `${live.url}/live/${pb}/whep?ok=1` });
  t.equal(viewer.status, 201, 'an admitted viewer gets 201');
  await until('the viewer counted', () => held(live, stream.id), (h) => h.viewers === 1, 30_000);
  const again = await pubs.play({ url: `${live.url}/live/${pb}/whep?try=3` });
  t.equal(again.status, 403);
  const before = receiver.requests.length;
  const started = performance.now();
  const hung = await pubs.play({ url: `${live.url}/live/${pb}/whep?hang=1` });
  const tookMs = performance.now() - started;
  t.equal(hung.status, 403, `a hook that hangs refuses (${hung.body.trim()})`);
  t.match(hung.body, /did not answer in time/);
  t.ok(tookMs >= HOOK_TIMEOUT_MS && tookMs < HOOK_TIMEOUT_MS + 10_000, `after the hook timeout (${Math.round(tookMs)} ms, timeout ${HOOK_TIMEOUT_MS} ms)`);
  t.equal(receiver.requests.length, before + 1, 'the hook was called once');
  t.equal((await held(live, stream.id)).viewers, 1, 'refused viewers added no viewer');

  // LL-HLS: refused before anything is served, playlists and files alike; admitted with one hook call.
  const hls = `${live.url}/hls/${pb}`;
  const no = await fetch(`${hls}/index.m3u8?try=4`);
  t.equal(no.status, 403, 'a refused LL-HLS player gets 403 for the playlist');
  await no.text();
  const noFile = await fetch(`${hls}/init0.mp4`);
  t.equal(noFile.status, 403, 'and for a media file (names are guessable)');
  await noFile.arrayBuffer();
  const callsBefore = receiver.requests.length;
  const playlist = await until('the admitted playlist', async () => {
    const r = await fetch(`${hls}/index.m3u8?ok=1`);
    return { status: r.status, text: await r.text() };
  }, (r) => r.status === 200, 60_000, 250);
  t.match(playlist.text, /#EXT-X-MAP:URI="init\d+\.mp4\?ok=1"/, "the playlist's query is carried into its URIs");
  // A player's run of blocking reloads and part fetches: one hook call for all of them.
  let msn = Number(/#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(playlist.text)?.[1] ?? 0);
  let fetched = 0;
  for (let i = 0; i < 12; i++) {
    const r = await fetch(`${hls}/index.m3u8?ok=1&_HLS_msn=${msn}&_HLS_part=0`);
    const text = await r.text();
    t.equal(r.status, 200, `blocking reload ${i}`);
    const part = [...text.matchAll(/URI="(part[^"]+)"/g)].at(-1)?.[1];
    if (part) {
      const p = await fetch(`${hls}/${part}`);
      await p.arrayBuffer();
      if (p.status === 200) fetched++;
    }
    msn = Number(/#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(text)?.[1] ?? msn) + 1;
  }
  t.ok(fetched > 0, `parts were served (${fetched})`);
  const hlsCalls = receiver.requests.slice(callsBefore).filter((r) => hookBody(r)?.['protocol'] === 'hls');
  t.equal(hlsCalls.length, 1, `one hook call for ${12 + fetched + 1} LL-HLS requests of one player`);
  const metrics = await (await fetch(`${live.url}/metrics`)).text();
  const hlsAdmitted = metrics.split('\n').find((l) => l.startsWith('reverie_admission_checks_total{') && l.includes('protocol="hls"') && l.includes('result="admitted"'));
  t.ok(Number(hlsAdmitted?.split(' ').at(-1)) >= 12 + fetched + 1, `/metrics counts every admitted LL-HLS request (${hlsAdmitted})`);
  t.equal(Number(/^reverie_admission_hook_calls_total (\d+)/m.exec(metrics)?.[1]), receiver.requests.length, 'and the hook calls made');

  // The outbound address rules hold for hook URLs, loopback allowed or not; the field is named.
  for (const [url, why] of [
    ['https://10.0.0.1/admit', 'a private address'],
    ['https://[::ffff:10.0.0.1]/admit', 'an IPv4-mapped private address'],
    [receiver.url('/admit').replace('https:', 'http:'), 'plain http'],
    ['https://user:pw@hooks.example.com/admit', 'credentials in the URL'],
  ] as const) {
    const res = await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'hook', url, actions: ['read'] });
    t.equal(res.status, 400, `400 for ${why}`);
    t.match(JSON.stringify(res.body['details']), /"field":"url"/, `naming url (${why})`);
  }
  // @ts-expect-error -- wrong action, to check the runtime validation
  const bad: { type: 'hook'; url: string; actions: ('publish' | 'read')[] } = { type: 'hook', url: receiver.url(), actions: ['watch'] };
  t.equal((await api('PUT', `/v1/streams/${stream.id}/admission`, bad)).status, 400, 'an unknown action is 400');
  t.equal((await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'hook', url: receiver.url(), actions: [] })).status, 400, 'no action is 400');
  t.equal((await api('GET', `/v1/streams/${stream.id}/admission`)).body['rule']?.['url'], receiver.url('/admit'), 'a refused PUT left the rule as it was');
  await pubs.stop(pub.id);
});

t.test('a JWT rule: no, expired, misnamed or badly signed token → 401; a good one admits; JWKS and the account default', { timeout: 240_000 }, async (t) => {
  const { receiver, live, stream } = await setup(t);
  const { api } = live;
  const pb = stream.output_playback_id;
  const pair = keyPair('ES256');
  const other = keyPair('ES256');
  const nowS = () => Math.floor(Date.now() / 1000);

  // Validation names the field.
  for (const [body, field] of [
    [{ type: 'jwt', actions: ['read'] }, 'public_key'],
    [{ type: 'jwt', public_key: pair.pem, jwks_url: receiver.url('/jwks'), actions: ['read'] }, 'jwks_url'],
    [{ type: 'jwt', public_key: 'not a key', actions: ['read'] }, 'public_key'],
    [{ type: 'jwt', public_key: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), actions: ['read'] }, 'public_key'],
    [{ type: 'jwt', jwks_url: 'https://10.1.2.3/jwks', actions: ['read'] }, 'jwks_url'],
  ] as const) {
    const res = await api('PUT', `/v1/streams/${stream.id}/admission`, body);
    t.equal(res.status, 400, `400 naming ${field}: ${JSON.stringify(res.body['message'])}`);
    t.match(JSON.stringify(res.body['details']), new RegExp(`"field":"${field}"`));
  }
  const put = await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'jwt', public_key: pair.pem, actions: ['read'] });
  t.equal(put.status, 200, JSON.stringify(put.body));

  const whep = `${live.url}/live/${pb}/whep`;
  const offer = async (headers: Record<string, string> = {}, query = '') => {
    const res = await fetch(`${whep}${query}`, { method: 'POST', headers: { 'content-type': 'application/sdp', ...headers }, body: await realOffer(t, 'recvonly') });
    return { status: res.status, body: await res.text(), challenge: res.headers.get('www-authenticate'), location: res.headers.get('location') };
  };
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  const none = await offer();
  t.equal(none.status, 401, 'no token → 401');
  t.match(none.challenge, /^Bearer/, 'with a Bearer challenge');
  t.equal((await offer(bearer(signJwt(pair, { sub: pb, exp: nowS() - 5 })))).status, 401, 'expired → 401');
  t.equal((await offer(bearer(signJwt(pair, { sub: 'pb_someone_else', exp: nowS() + 60 })))).status, 401, 'another playback id → 401');
  t.equal((await offer(bearer(signJwt(other, { sub: pb, exp: nowS() + 60 })))).status, 401, 'signed by another key → 401');
  const tampered = signJwt(pair, { sub: pb, exp: nowS() + 60 }).split('.');
  tampered[1] = Buffer.from(JSON.stringify({ sub: pb, exp: nowS() + 86_400 })).toString('base64url');
  t.equal((await offer(bearer(tampered.join('.')))).status, 401, 'claims changed after signing → 401');
  t.same(await held(live, stream.id), { streams: 0, viewers: 0 }, 'no refused viewer made the node hold the stream');

  const good = signJwt(pair, { sub: pb, exp: nowS() + 120 });
  const ok = await offer(bearer(good));
  t.equal(ok.status, 201, `a good token in Authorization admits (${ok.body.slice(0, 80)})`);
  t.ok(ok.location, 'with a session URL');
  t.equal((await offer({}, `?jwt=${good}`)).status, 201, 'and as ?jwt=');

  // A rule for `publish` too: the publisher brings the token as ?jwt= (its Bearer stays the stream key).
  t.equal((await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'jwt', public_key: pair.pem, actions: ['publish', 'read'] })).status, 200);
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 600, gop: 30 });
  const whip = `${live.url}/live/${stream.id}/whip`;
  t.equal((await pubs.publish({ url: whip, token: stream.stream_key, source })).status, 401, 'a publisher without a token → 401');
  t.equal((await pubs.publish({ url: `${whip}?jwt=${signJwt(other, { sub: pb, exp: nowS() + 60 })}`, token: stream.stream_key, source })).status, 401, 'one signed by another key → 401');
  const pub = await pubs.publish({ url: `${whip}?jwt=${good}`, token: stream.stream_key, source });
  t.equal(pub.status, 201, 'a publisher with a good ?jwt= is admitted');
  // LL-HLS needs the token too, and carries it on.
  const hls = `${live.url}/hls/${pb}`;
  const text = await until('the playlist with the token', async () => {
    const r = await fetch(`${hls}/index.m3u8?jwt=${good}`);
    return { status: r.status, text: await r.text() };
  }, (r) => r.status === 200, 60_000, 250);
  const init = /#EXT-X-MAP:URI="([^"]+)"/.exec(text.text)?.[1] ?? '';
  t.match(init, `jwt=${good}`, 'the token is carried into the URIs');
  t.equal((await fetch(`${hls}/${init}`)).status, 200, 'a file with the token is served');
  const bare = await fetch(`${hls}/${init.split('?')[0]}`);
  t.equal(bare.status, 401, 'without it, 401');
  t.equal((await fetch(`${hls}/index.m3u8?jwt=${signJwt(pair, { sub: pb, exp: nowS() - 1 })}`)).status, 401, 'an expired token, 401');

  // JWKS: fetched through the outbound client when set (and cached), a kid picks the key.
  receiver.reply = (r) => (r.path === '/jwks' ? { status: 200, headers: { 'content-type': 'application/json' }, body: jwks([{ pair: other, kid: 'k2' }, { pair, kid: 'k1' }]) } : { status: 404 });
  const fetchesBefore = receiver.requests.length;
  t.equal((await api('PUT', `/v1/streams/${stream.id}/admission`, { type: 'jwt', jwks_url: receiver.url('/jwks'), actions: ['read'] })).status, 200);
  t.equal((await offer(bearer(signJwt(other, { sub: pb, exp: nowS() + 60 }, { kid: 'k2' })))).status, 201, 'a token signed by a JWKS key admits');
  t.equal((await offer(bearer(signJwt(pair, { sub: pb, exp: nowS() + 60 }, { kid: 'k2' })))).status, 401, 'the wrong key for its kid → 401');
  t.equal(receiver.requests.length - fetchesBefore, 1, 'the JWKS was fetched once (when set) and cached');

  // The account's default applies to a stream without a rule of its own.
  t.equal((await api('DELETE', `/v1/streams/${stream.id}/admission`)).body['source'], 'none');
  t.equal((await offer()).status, 201, 'no rule: the playback id is enough');
  const acc = await api('PUT', '/v1/account/admission', { type: 'jwt', public_key: pair.pem, actions: ['read'] });
  t.equal(acc.status, 200, JSON.stringify(acc.body));
  t.match((await api('GET', `/v1/streams/${stream.id}/admission`)).body, { source: 'account', rule: { type: 'jwt', jwks_url: null } });
  t.equal((await offer()).status, 401, "the account's default gates the stream");
  t.equal((await offer(bearer(good))).status, 201);
  await pubs.stop(pub.id);
});
