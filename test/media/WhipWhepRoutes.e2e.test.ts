/**
 * The WHIP/WHEP HTTP contract (RFC 9725 §4, WHEP draft): status codes, headers, CORS, PATCH and
 * DELETE, and the cheap rejections of hostile offers. Offers come from a real libwebrtc peer
 * (@roamhq/wrtc, VP8/Opus) and are edited as text only to make them invalid.
 */
import { createHmac } from 'node:crypto';
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { whepOf, PLAYBACK_ID, REFUSED_KEY, STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';
import { realOffer } from '../helpers/wrtcOffer.ts';


/** A libwebrtc offer whose video m-line is relabelled H.264 pm=1 (what a browser viewer offers). */
function asH264(sdp: string): string {
  const pt = /a=rtpmap:(\d+) VP8\/90000/.exec(sdp)?.[1] ?? '96';
  return sdp.replace(`a=rtpmap:${pt} VP8/90000`, `a=rtpmap:${pt} H264/90000\r\na=fmtp:${pt} profile-level-id=42e01f;packetization-mode=1;level-asymmetry-allowed=1`);
}

const sdpHeaders = { 'content-type': 'application/sdp', authorization: `Bearer ${STREAM_KEY}` };
const WHIP = `/live/${STREAM_ID}/whip`;
const WHEP = `/live/${PLAYBACK_ID}/whep`;

const TURN = { urls: ['turn:turn.example.net?transport=udp'], secret: 'turn-shared-secret', ttlS: 3600, viewerTtlS: 300 };

t.test('OPTIONS answers CORS preflight with Accept-Post and exposes Location, Link and ETag; it offers STUN, never TURN credentials', { timeout: 20_000 }, async (t) => {
  const srv = await startMediaServer(t, { stunUrls: ['stun:stun.example.net:3478'], turn: TURN });
  for (const url of [WHIP, WHEP]) {
    const res = await srv.app.inject({ method: 'OPTIONS', url, headers: { origin: 'https://x.example', 'access-control-request-method': 'POST' } });
    t.equal(res.statusCode, 204, `${url} OPTIONS → 204`);
    t.equal(res.headers['accept-post'], 'application/sdp');
    t.match(String(res.headers['access-control-expose-headers']), /Location.*Link.*ETag/);
    t.equal(res.headers['access-control-allow-origin'], '*');
    t.match(String(res.headers['access-control-allow-headers']), /Authorization/);
  }
  const options = await srv.app.inject({ method: 'OPTIONS', url: WHIP });
  const links = ([] as string[]).concat(options.headers['link'] ?? []).join(', ');
  t.match(links, /<stun:stun\.example\.net:3478>; rel="ice-server"/, 'OPTIONS carries the STUN server');
  t.notMatch(links, /turn:|credential/, 'but no TURN server or credential (unauthenticated)');
  const sess = await srv.app.inject({ method: 'OPTIONS', url: '/live/sessions/abc' });
  t.equal(sess.headers['accept-patch'], 'application/trickle-ice-sdpfrag', 'session OPTIONS advertises Accept-Patch');
});

t.test('WHIP POST rejects bad requests with the RFC 9725 status codes and a reason', { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t);
  const offer = await realOffer(t);
  const post = (headers: Record<string, string>, payload: string) => srv.app.inject({ method: 'POST', url: WHIP, headers, payload });

  const json = await post({ ...sdpHeaders, 'content-type': 'application/json' }, JSON.stringify({ sdp: offer }));
  t.equal(json.statusCode, 415, 'application/json → 415');
  const text = await post({ ...sdpHeaders, 'content-type': 'text/plain' }, offer);
  t.equal(text.statusCode, 415, 'text/plain → 415');

  const noToken = await post({ 'content-type': 'application/sdp' }, offer);
  t.equal(noToken.statusCode, 401, 'missing Bearer → 401');
  t.match(String(noToken.headers['www-authenticate']), /^Bearer/);
  const badToken = await post({ ...sdpHeaders, authorization: 'Bearer nope' }, offer);
  t.equal(badToken.statusCode, 401, 'wrong stream key → 401');
  const otherStream = await srv.app.inject({ method: 'POST', url: '/live/str_other/whip', headers: sdpHeaders, payload: offer });
  t.equal(otherStream.statusCode, 401, 'a key for another stream → 401');
  const refused = await post({ ...sdpHeaders, authorization: `Bearer ${REFUSED_KEY}` }, offer);
  t.equal(refused.statusCode, 402, 'a valid key of an account that may not stream now → 402, not 401');
  t.match(refused.body, /allowance used up/, 'with the reason for the streamer');
  t.equal(srv.node.status(STREAM_ID), null, 'and no session is created');

  const garbage = await post(sdpHeaders, 'hello world');
  t.equal(garbage.statusCode, 400, 'non-SDP body → 400');
  t.match(garbage.body, /v=0/, '400 says why');
  const noIce = await post(sdpHeaders, offer.replace(/a=ice-ufrag:.*\r\n/g, ''));
  t.equal(noIce.statusCode, 400, 'offer without ice-ufrag → 400');

  const big = await post(sdpHeaders, offer + `a=x-pad:${'x'.repeat(40_000)}\r\n`);
  t.equal(big.statusCode, 413, '40 KB offer → 413');
  const mlines = offer + Array.from({ length: 3000 }, (_, i) => `m=video 9 UDP/TLS/RTP/SAVPF ${96 + (i % 30)}`).join('\r\n');
  const many = await post(sdpHeaders, mlines);
  t.equal(many.statusCode, 413, 'thousands of m-lines → 413 (size) without touching the ICE stack');
  const three = await post(sdpHeaders, offer + offer.slice(offer.indexOf('m=video')));
  t.equal(three.statusCode, 422, 'three m-lines → 422');
  t.match(three.body, /more than 2 m-lines/);

  const recvonly = await post(sdpHeaders, await realOffer(t, 'recvonly'));
  t.equal(recvonly.statusCode, 422, 'recvonly offer to WHIP → 422');
  const vp9only = offer.replace(/VP8\/90000/g, 'VP9/90000').replace(/H264\/90000/g, 'VP9/90000');
  const noCodec = await post(sdpHeaders, vp9only);
  t.equal(noCodec.statusCode, 422, 'no VP8/H.264 → 422');
  t.match(noCodec.body, /no supported video codec/);
  t.equal(srv.node.streamCount, 0, 'no rejected request created a stream');
});

t.test('WHIP POST → 201 with answer, Location, ETag and Link (a fresh TURN credential); PATCH trickles (204), refuses restart (422); DELETE with the stream key → 200', { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t, { stunUrls: ['stun:stun.example.net:3478'], turn: TURN });
  const offer = await realOffer(t);
  const res = await srv.app.inject({ method: 'POST', url: WHIP, headers: sdpHeaders, payload: offer });
  t.equal(res.statusCode, 201);
  t.equal(res.headers['content-type'], 'application/sdp');
  const location = String(res.headers['location']);
  t.match(location, new RegExp(`^${srv.baseUrl}/live/sessions/[0-9a-f]{32}$`), 'absolute session URL');
  const etag = String(res.headers['etag']);
  t.match(etag, /^"[0-9a-f]+"$/, 'strong ETag');
  const link = ([] as string[]).concat(res.headers['link'] ?? []).join(', ');
  t.match(link, /<stun:stun\.example\.net:3478>; rel="ice-server"/);
  const turn = /<turn:turn\.example\.net\?transport=udp>; rel="ice-server"; username="(\d+):([0-9a-f]{32})"; credential="([^"]+)"; credential-type="password"/.exec(link);
  t.ok(turn, `a TURN server with a credential (${link})`);
  const [, expires = '0', nonce = '', credential = ''] = turn ?? [];
  const now = Date.now() / 1000;
  t.ok(Number(expires) > now + 3500 && Number(expires) <= now + 3601, 'the credential expires after TURN_CREDENTIAL_TTL');
  t.equal(credential, createHmac('sha1', TURN.secret).update(`${expires}:${nonce}`).digest('base64'), 'credential = base64(HMAC-SHA1(secret, username)), what coturn checks');
  const second = await srv.app.inject({ method: 'POST', url: WHEP, headers: { 'content-type': 'application/sdp' }, payload: asH264(await realOffer(t, 'recvonly')) });
  t.notMatch(([] as string[]).concat(second.headers['link'] ?? []).join(), new RegExp(credential.replace(/[+/=]/g, '.')), 'another session gets another credential');
  t.match(res.body, /a=candidate:\S+ 1 udp \d+ 127\.0\.0\.1 \d+ typ host/, 'host candidate on the configured address');
  t.notMatch(res.body, /a=candidate:(?!\S+ 1 udp \d+ 127\.0\.0\.1 )/, 'no candidate on other addresses');
  t.match(res.body, /a=recvonly/);
  t.equal(srv.node.status(STREAM_ID)?.state, 'connecting', 'stream exists and waits for media');

  const path = new URL(location).pathname;
  const frag = (ufrag: string) => `a=ice-ufrag:${ufrag}\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\n`;
  const ufrag = /a=ice-ufrag:(\S+)/.exec(offer)?.[1] ?? '';
  const patch = (headers: Record<string, string>, payload: string) => srv.app.inject({ method: 'PATCH', url: path, headers: { authorization: `Bearer ${STREAM_KEY}`, ...headers }, payload });
  t.equal((await patch({ 'content-type': 'application/sdp' }, frag(ufrag))).statusCode, 415, 'PATCH with application/sdp → 415');
  t.equal((await patch({ 'content-type': 'application/trickle-ice-sdpfrag', 'if-match': '"nope"' }, frag(ufrag))).statusCode, 412, 'stale If-Match → 412');
  const trickle = await patch({ 'content-type': 'application/trickle-ice-sdpfrag', 'if-match': etag }, frag(ufrag));
  t.equal(trickle.statusCode, 204, 'trickle → 204');
  t.equal(trickle.body, '', '204 has no body');
  const restart = await patch({ 'content-type': 'application/trickle-ice-sdpfrag', 'if-match': '*' }, frag('newufrag'));
  t.equal(restart.statusCode, 422, 'ICE restart → 422 (unsupported)');
  t.equal((await srv.app.inject({ method: 'PATCH', url: '/live/sessions/ffff', headers: { 'content-type': 'application/trickle-ice-sdpfrag' }, payload: frag(ufrag) })).statusCode, 404);

  const del = await srv.app.inject({ method: 'DELETE', url: path, headers: { authorization: `Bearer ${STREAM_KEY}` } });
  t.equal(del.statusCode, 200, 'DELETE → 200 (OBS expects exactly 200)');
  t.equal((await srv.app.inject({ method: 'DELETE', url: path, headers: { authorization: `Bearer ${STREAM_KEY}` } })).statusCode, 404, 'second DELETE → 404');
  t.equal(srv.node.status(STREAM_ID)?.state, 'idle');
});

/** The TURN Link of an answer: `<expiry>:<rest>` username and its credential. */
function turnLinkOf(headers: Record<string, unknown>): { expires: number; username: string; credential: string } {
  const link = ([] as string[]).concat((headers['link'] as string | string[] | undefined) ?? []).join(', ');
  const m = /<turn:[^>]+>; rel="ice-server"; username="((\d+):[^"]*)"; credential="([^"]+)"/.exec(link);
  if (!m) throw new Error(`no TURN credential in ${link}`);
  return { username: m[1] as string, expires: Number(m[2]), credential: m[3] as string };
}

t.test('TURN usernames are random: no session, stream or playback id in them, none alike; a viewer\'s credential expires within TURN_VIEWER_CREDENTIAL_TTL', { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t, { turn: TURN });
  const whip = await srv.app.inject({ method: 'POST', url: WHIP, headers: sdpHeaders, payload: await realOffer(t) });
  const wheps = [];
  for (let i = 0; i < 2; i++) wheps.push(await srv.app.inject({ method: 'POST', url: WHEP, headers: { 'content-type': 'application/sdp' }, payload: asH264(await realOffer(t, 'recvonly')) }));
  const answers = [whip, ...wheps];
  t.same(answers.map((r) => r.statusCode), [201, 201, 201]);
  const sessionIds = answers.map((r) => String(r.headers['location']).split('/').pop() ?? '');
  const creds = answers.map((r) => turnLinkOf(r.headers));
  const now = Date.now() / 1000;
  for (const [i, c] of creds.entries()) {
    for (const id of [...sessionIds, STREAM_ID, PLAYBACK_ID, STREAM_KEY]) t.notOk(c.username.includes(id), `username ${i} does not hold ${id}`);
    t.match(c.username, /^\d+:[0-9a-f]{32}$/, `username ${i}: expiry and 128 random bits`);
    t.equal(c.credential, createHmac('sha1', TURN.secret).update(c.username).digest('base64'), `credential ${i} = base64(HMAC-SHA1(secret, username)), what coturn checks`);
  }
  t.equal(new Set(creds.map((c) => c.username.split(':')[1])).size, 3, 'three answers, three unrelated usernames');
  t.ok(creds[0]!.expires > now + 3500 && creds[0]!.expires <= now + 3601, `the publisher's expires after TURN_CREDENTIAL_TTL (${Math.round(creds[0]!.expires - now)} s)`);
  for (const c of creds.slice(1)) t.ok(c.expires > now + 290 && c.expires <= now + 301, `a viewer's expires after TURN_VIEWER_CREDENTIAL_TTL (${Math.round(c.expires - now)} s)`);
});

t.test("a publisher's session answers PATCH and DELETE only with its stream key (401 otherwise, the session untouched); a viewer's DELETE by its Location → 200", { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t);
  const offer = await realOffer(t);
  const res = await srv.app.inject({ method: 'POST', url: WHIP, headers: sdpHeaders, payload: offer });
  t.equal(res.statusCode, 201);
  const path = new URL(String(res.headers['location'])).pathname;
  const sessionId = path.split('/').pop() ?? '';
  const ufrag = /a=ice-ufrag:(\S+)/.exec(offer)?.[1] ?? '';
  const frag = `a=ice-ufrag:${ufrag}\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\n`;
  for (const [what, headers] of [
    ['no Authorization', {}],
    ['a wrong key', { authorization: 'Bearer sk_not_this_one' }],
    ['another scheme', { authorization: `Basic ${STREAM_KEY}` }],
    ['the session id as the token', { authorization: `Bearer ${sessionId}` }],
  ] as const) {
    const del = await srv.app.inject({ method: 'DELETE', url: path, headers });
    t.equal(del.statusCode, 401, `DELETE with ${what} → 401`);
    t.match(del.body, /stream key/, 'and says what it needs');
    t.equal(del.headers['www-authenticate'], 'Bearer');
    const patch = await srv.app.inject({ method: 'PATCH', url: path, headers: { ...headers, 'content-type': 'application/trickle-ice-sdpfrag' }, payload: frag });
    t.equal(patch.statusCode, 401, `PATCH with ${what} → 401`);
  }
  t.ok(srv.node.getSession(sessionId), 'the session runs on');
  t.equal(srv.node.status(STREAM_ID)?.state, 'connecting', 'and the stream still has its publisher');
  t.equal((await srv.app.inject({ method: 'PATCH', url: path, headers: { authorization: `Bearer ${STREAM_KEY}`, 'content-type': 'application/trickle-ice-sdpfrag' }, payload: frag })).statusCode, 204, 'PATCH with the key → 204');
  t.equal((await srv.app.inject({ method: 'DELETE', url: path, headers: { authorization: `bearer ${STREAM_KEY}` } })).statusCode, 200, 'DELETE with the key → 200');
  t.notOk(srv.node.getSession(sessionId), 'the session is gone');

  const viewer = await srv.app.inject({ method: 'POST', url: WHEP, headers: { 'content-type': 'application/sdp' }, payload: asH264(await realOffer(t, 'recvonly')) });
  t.equal(viewer.statusCode, 201);
  t.equal((await srv.app.inject({ method: 'DELETE', url: new URL(String(viewer.headers['location'])).pathname })).statusCode, 200, 'a viewer ends its session with its Location alone');
  t.equal((await srv.app.inject({ method: 'DELETE', url: '/live/sessions/00000000000000000000000000000000', headers: { authorization: `Bearer ${STREAM_KEY}` } })).statusCode, 404, 'an unknown session → 404');
});

t.test('a live OBS-like publisher: a DELETE of its session without the stream key is refused and media flows on; with the key → 200 and the stream ends', { timeout: 60_000 }, async (t) => {
  const srv = await startMediaServer(t);
  const pubs = startObsPublishers(t);
  const p = await pubs.publish({ url: `${srv.baseUrl}${WHIP}`, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 300 }) });
  t.equal(p.status, 201, `WHIP → 201 (${p.body})`);
  await until('live', () => srv.node.status(STREAM_ID)?.state, (s) => s === 'live', 20_000);
  const ended: string[] = [];
  srv.node.on('ended', (e) => ended.push(e.reason));
  const bare = await fetch(p.location ?? '', { method: 'DELETE' });
  t.equal(bare.status, 401, 'DELETE without the key → 401');
  const wrong = await fetch(p.location ?? '', { method: 'DELETE', headers: { authorization: 'Bearer sk_guess' } });
  t.equal(wrong.status, 401, 'DELETE with a wrong key → 401');
  const framesIn = srv.node.status(STREAM_ID)?.framesIn ?? 0;
  await until('frames after the refused DELETEs', () => srv.node.status(STREAM_ID)?.framesIn ?? 0, (n) => n > framesIn + 15, 10_000);
  t.equal(srv.node.status(STREAM_ID)?.state, 'live', 'the stream is still live');
  t.equal(pubs.state(p.id), 'connected', 'the publisher still connected');
  t.same(ended, [], 'nothing ended');
  const del = await fetch(p.location ?? '', { method: 'DELETE', headers: { authorization: `Bearer ${STREAM_KEY}` } });
  t.equal(del.status, 200, 'DELETE with the key → 200 (what OBS expects)');
  await until('idle', () => srv.node.status(STREAM_ID)?.state, (s) => s === 'idle', 10_000);
  t.same(ended, ['deleted'], 'the stream ended, reason deleted');
  await pubs.vanish(p.id);
});

t.test('WHEP POST: unknown playback 404, viewer with neither H.264 nor VP8 422, VP8-only viewer 201 VP8, H.264 viewer 201 sendonly; a viewer that never connects is closed', { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { connectTimeoutMs: 1500 } });
  const offer = await realOffer(t, 'recvonly');
  const post = (url: string, payload: string) => srv.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/sdp' }, payload });
  t.equal((await post('/live/nope/whep', asH264(offer))).statusCode, 404, 'unknown playback id → 404');
  const noCodec = await post(WHEP, offer.replace(/VP8\/90000/g, 'VP9/90000'));
  t.equal(noCodec.statusCode, 422, 'a viewer offering neither H.264 pm=1 nor VP8 → 422');
  t.match(noCodec.body, /neither H264 packetization-mode=1 nor VP8/, '422 says why');
  t.equal((await post(WHEP, (await realOffer(t, 'sendonly')).replace(/VP8/g, 'H264'))).statusCode, 422, 'sendonly offer to WHEP → 422');
  const vp8 = await post(WHEP, offer);
  t.equal(vp8.statusCode, 201, 'a VP8-only viewer (libwebrtc without H.264) → 201');
  t.match(vp8.body, /a=rtpmap:\d+ VP8\/90000/, 'answered with VP8');
  t.notMatch(vp8.body, /H264/, 'and nothing else');
  t.same(whepOf(srv.node, STREAM_ID)?.viewersByCodec, { H264: 0, VP8: 1 }, 'counted as a VP8 viewer');
  t.equal(whepOf(srv.node, STREAM_ID)?.vp8.running, false, 'no frames yet: the VP8 branch has not started');
  t.equal((await srv.app.inject({ method: 'DELETE', url: new URL(String(vp8.headers['location'])).pathname })).statusCode, 200, 'VP8 viewer DELETE → 200');
  const ok = await post(WHEP, asH264(offer));
  t.equal(ok.statusCode, 201, 'H.264 viewer → 201 before any publisher (held session)');
  t.match(ok.body, /a=sendonly/);
  t.match(ok.body, /H264\/90000/);
  t.notMatch(ok.body, /VP8/);
  t.equal(whepOf(srv.node, STREAM_ID)?.viewers, 1);
  t.same(whepOf(srv.node, STREAM_ID)?.viewersByCodec, { H264: 1, VP8: 0 }, 'counted as an H.264 viewer');
  const sessionId = new URL(String(ok.headers['location'])).pathname.split('/').pop() ?? '';
  // This "viewer" never runs ICE: the session must go away after connectTimeoutMs.
  const closed = await new Promise<boolean>((resolve) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      if (!srv.node.getSession(sessionId)) resolve(true);
      else if (Date.now() - t0 > 5000) resolve(false);
      else return;
      clearInterval(poll);
    }, 100);
  });
  t.ok(closed, 'the unconnected viewer session was closed');
  t.equal(srv.node.getStream(STREAM_ID), undefined, 'and the stream made for it (no publisher ever) went with it');
});
