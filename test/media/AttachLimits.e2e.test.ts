/**
 * What one client can make a media node do: capacity is enforced when a publisher attaches (503 +
 * Retry-After, nothing built) and never taken by a viewer; viewers waiting for streams that are not
 * live are bounded per stream and per owning account (429) and their slates per node; WHIP/WHEP
 * POSTs are rate-limited per client address and per playback id (429), offers that never connect
 * are bounded per address (429) and never hold a viewer slot, trickled candidates are capped and
 * filtered, and no refusal names an internal id.
 */
import t from 'tap';
import { forwardedFor } from '../../media/NodeSignatures.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { whepOf, PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from './harness.ts';

type W = Window & PeerPage;

/** A real offer from Chromium (never answered: these peers never connect). */
async function offers(t: { teardown(fn: () => unknown): void }, direction: 'sendonly' | 'recvonly', n: number): Promise<string[]> {
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  return page.evaluate(
    async ({ direction, n }) => {
      const out: string[] = [];
      for (let i = 0; i < n; i++) {
        const pc = new RTCPeerConnection();
        pc.addTransceiver('video', { direction });
        await pc.setLocalDescription(await pc.createOffer());
        out.push(pc.localDescription?.sdp ?? '');
        pc.close();
      }
      return out;
    },
    { direction, n },
  );
}

t.test('at capacity: WHIP for another stream gets 503 + Retry-After and builds nothing; a viewer of a stream the node does not hold takes no slot', { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { capacity: 1 });
  const pubs = startObsPublishers(t);
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 60 }) });
  t.equal(p.status, 201, 'the first publisher fits');
  t.equal(srv.node.activeStreamCount, 1);
  const [pubOffer = ''] = await offers(t, 'sendonly', 1);
  const whip = await srv.app.inject({ method: 'POST', url: `/live/${STREAM_ID}_2/whip`, headers: { 'content-type': 'application/sdp', authorization: `Bearer ${STREAM_KEY}` }, payload: pubOffer });
  t.equal(whip.statusCode, 503, 'a second stream → 503');
  t.equal(whip.headers['retry-after'], '10', 'with Retry-After');
  t.match(whip.body, /at capacity/);
  t.notMatch(whip.body, /str_|play_/, 'the message names no internal id');
  t.equal(srv.node.getStream(`${STREAM_ID}_2`), undefined, 'no stream object was made for it');
  const [viewOffer = ''] = await offers(t, 'recvonly', 1);
  const whep = await srv.app.inject({ method: 'POST', url: `/live/${PLAYBACK_ID}_2/whep`, headers: { 'content-type': 'application/sdp' }, payload: viewOffer });
  t.equal(whep.statusCode, 201, 'a viewer of a stream the full node does not hold waits for it (201)');
  t.equal(srv.node.activeStreamCount, 1, 'and takes no capacity: still one stream with a publisher');
  const third = await srv.app.inject({ method: 'POST', url: `/live/${STREAM_ID}_3/whip`, headers: { 'content-type': 'application/sdp', authorization: `Bearer ${STREAM_KEY}` }, payload: pubOffer });
  t.equal(third.statusCode, 503, 'publishers are still held to capacity');
  const again = await srv.app.inject({ method: 'POST', url: srv.whipUrl.replace(srv.baseUrl, ''), headers: { 'content-type': 'application/sdp', authorization: `Bearer ${STREAM_KEY}` }, payload: pubOffer });
  t.equal(again.statusCode, 201, 'the live stream itself may still take a reconnecting publisher');
  const view = await srv.app.inject({ method: 'POST', url: srv.whepUrl.replace(srv.baseUrl, ''), headers: { 'content-type': 'application/sdp' }, payload: viewOffer });
  t.equal(view.statusCode, 201, 'and viewers of the stream it holds join');
});

t.test('offers that never connect: bounded per address, never holding a viewer slot; a real viewer still joins', { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { maxViewersPerStream: 3, maxPendingViewersPerAddress: 4, whepPerAddressPerMinute: 1000 } });
  const fakes = await offers(t, 'recvonly', 6);
  const post = (payload: string, remoteAddress: string) => srv.app.inject({ method: 'POST', url: srv.whepUrl.replace(srv.baseUrl, ''), headers: { 'content-type': 'application/sdp' }, payload, remoteAddress });
  const codes: number[] = [];
  for (const f of fakes) codes.push((await post(f, '10.9.9.9')).statusCode);
  t.same(codes, [201, 201, 201, 201, 429, 429], 'the fifth unconnected offer from one address → 429 (a per-client limit)');
  const refused = await post(fakes[0] ?? '', '10.9.9.9');
  t.ok(Number(refused.headers['retry-after']) >= 1 && Number(refused.headers['retry-after']) <= 15, 'with Retry-After: at most the connect timeout (15 s), when the oldest must be gone');
  t.match(refused.body, /still connecting/);
  t.equal((await post(fakes[0] ?? '', '10.9.9.10')).statusCode, 201, 'another address is not affected');
  t.equal(whepOf(srv.node, STREAM_ID)?.viewers, 5, 'five sessions wait to connect');
  // Four pending sessions exceed the cap of 3 viewers, yet a real viewer from elsewhere connects.
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  const played = await page.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  t.equal(played.status, 201, 'a real viewer is not locked out by pending offers');
  const id = new URL(String(played.location)).pathname.split('/').pop() ?? '';
  await until('the real viewer connects', () => srv.node.getSession(id)?.session.connected, (c) => c === true, 15_000).catch(() => undefined);
  t.ok(srv.node.getSession(id)?.session.connected, 'and it completes ICE and DTLS: it holds one of the 3 viewer slots');
});

t.test('WHIP and WHEP POSTs are rate-limited per client address (429 + Retry-After); a signed forwarded address counts as the client', { timeout: 60_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { whipPerAddressPerMinute: 3, whepPerAddressPerMinute: 2, whepPerPlaybackPerMinute: 1000 } });
  const whip = (remoteAddress: string, headers: Record<string, string> = {}) =>
    srv.app.inject({ method: 'POST', url: `/live/${STREAM_ID}/whip`, headers: { 'content-type': 'application/sdp', authorization: 'Bearer wrong-key', ...headers }, payload: 'v=0', remoteAddress });
  const a = [await whip('10.1.1.1'), await whip('10.1.1.1'), await whip('10.1.1.1'), await whip('10.1.1.1')];
  t.same(a.map((r) => r.statusCode), [401, 401, 401, 429], 'the fourth try of a wrong key from one address is not even checked');
  t.ok(Number(a[3]?.headers['retry-after']) >= 1, 'Retry-After says when');
  t.equal((await whip('10.1.1.2')).statusCode, 401, 'another address is not affected');
  const whep = (remoteAddress: string) => srv.app.inject({ method: 'POST', url: `/live/${PLAYBACK_ID}/whep`, headers: { 'content-type': 'text/plain' }, payload: 'x', remoteAddress });
  t.same([(await whep('10.2.2.2')).statusCode, (await whep('10.2.2.2')).statusCode, (await whep('10.2.2.2')).statusCode], [415, 415, 429], 'WHEP per address');
});

t.test('a forwarded client address is trusted only with a valid signature', { timeout: 30_000 }, async (t) => {
  const secret = 'forwarding-secret-of-the-deployment';
  const srv = await startMediaServer(t, { settings: { whipPerAddressPerMinute: 1 }, forwardedSecret: secret });
  const whip = (headers: Record<string, string>) =>
    srv.app.inject({ method: 'POST', url: `/live/${STREAM_ID}/whip`, headers: { 'content-type': 'application/sdp', authorization: 'Bearer wrong-key', ...headers }, payload: 'v=0', remoteAddress: '10.0.0.1' });
  t.equal((await whip({ 'x-reverie-forwarded': forwardedFor('203.0.113.1', secret) })).statusCode, 401, 'client A through the api replica');
  t.equal((await whip({ 'x-reverie-forwarded': forwardedFor('203.0.113.2', secret) })).statusCode, 401, 'client B through the same replica: its own budget');
  t.equal((await whip({ 'x-reverie-forwarded': forwardedFor('203.0.113.1', secret) })).statusCode, 429, 'client A again: over its budget');
  t.equal((await whip({ 'x-reverie-forwarded': '203.0.113.9;0000000000000000' })).statusCode, 401, 'a forged header counts as the TCP peer (first use)');
  t.equal((await whip({ 'x-reverie-forwarded': '203.0.113.10;ffff' })).statusCode, 429, 'and again as the same TCP peer');
});

t.test('trickled candidates: at most 20 per PATCH, 64 per session, addresses the node must never dial dropped', { timeout: 60_000 }, async (t) => {
  const srv = await startMediaServer(t);
  const [offer = ''] = await offers(t, 'recvonly', 1);
  const res = await srv.app.inject({ method: 'POST', url: srv.whepUrl.replace(srv.baseUrl, ''), headers: { 'content-type': 'application/sdp' }, payload: offer });
  t.equal(res.statusCode, 201);
  const path = new URL(String(res.headers['location'])).pathname;
  const ufrag = /a=ice-ufrag:(\S+)/.exec(offer)?.[1] ?? '';
  const frag = (lines: string[]) => `a=ice-ufrag:${ufrag}\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\na=mid:0\r\n${lines.map((l) => `a=${l}`).join('\r\n')}\r\n`;
  const patch = (lines: string[]) => srv.app.inject({ method: 'PATCH', url: path, headers: { 'content-type': 'application/trickle-ice-sdpfrag' }, payload: frag(lines) });
  const c = (addr: string, port: number) => `candidate:${port} 1 udp 2122260223 ${addr} ${port} typ host`;
  t.equal((await patch(Array.from({ length: 21 }, (_, i) => c('203.0.113.5', 50000 + i)))).statusCode, 413, '21 candidates in one PATCH → 413');
  t.equal((await patch(['candidate:garbage'])).statusCode, 400, 'a malformed candidate → 400');
  const dropped = await patch([c('169.254.169.254', 80), c('0.0.0.0', 9), c('224.0.0.251', 5353), c('x.local', 9)]);
  t.equal(dropped.statusCode, 204, 'addresses the node must never dial are dropped quietly');
  t.equal(srv.node.getSession(path.split('/').pop() ?? '')?.trickled, 0, 'none of them was added');
  for (let i = 0; i < 4; i++) t.equal((await patch(Array.from({ length: 20 }, (_, k) => c('203.0.113.5', 40000 + i * 20 + k)))).statusCode, 204);
  t.equal(srv.node.getSession(path.split('/').pop() ?? '')?.trickled, 64, 'a session takes 64 candidates at most');
});

t.test('20 keyless offers for 20 streams that are not live take no node slot: another viewer is answered at once; waiting viewers are bounded per account and per stream (429 + Retry-After) and released when they time out', { timeout: 120_000 }, async (t) => {
  const secret = 'forwarding-secret-of-the-deployment';
  // Stream `str_test_<account>_<n>` belongs to <account>: the attacker aims at 4 streams of each of 5 accounts.
  const srv = await startMediaServer(t, {
    capacity: 2,
    forwardedSecret: secret,
    accountOf: (streamId) => streamId.split('_')[2] ?? '',
    settings: { connectTimeoutMs: 10_000, maxWaitingStreamsPerAccount: 4, maxWaitingViewersPerStream: 3, whepPerAddressPerMinute: 1000 },
  });
  const [offer = ''] = await offers(t, 'recvonly', 1);
  const [pubOffer = ''] = await offers(t, 'sendonly', 1);
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  let client = 0;
  // Each from its own client address (signed as an api replica would), so only the per-account and per-stream bounds apply.
  const view = (stream: string) =>
    fetch(`${srv.baseUrl}/live/${PLAYBACK_ID}_${stream}/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp', 'x-reverie-forwarded': forwardedFor(`10.7.0.${++client}`, secret) }, body: offer });
  const attack = (await Promise.all(Array.from({ length: 20 }, (_, i) => view(`a${Math.floor(i / 4)}_${i % 4}`)))).map((r) => r.status);
  t.same(attack, Array(20).fill(201), '20 offers that will never do ICE, for 20 streams that are not live: all answered');
  t.equal(srv.node.streamCount, 20, '20 streams wait for their publisher');
  t.equal(srv.node.activeStreamCount, 0, 'none takes one of the 2 slots of the node');

  const started = Date.now();
  const played = await page.evaluate((url) => (window as unknown as W).play({ url }), `${srv.baseUrl}/live/${PLAYBACK_ID}_b_0/whep`);
  t.equal(played.status, 201, `a real viewer of another stream that is not live is answered at once (${Date.now() - started} ms), not 503`);
  const id = new URL(String(played.location)).pathname.split('/').pop() ?? '';
  await until('the real viewer connects', () => srv.node.getSession(id)?.session.connected, (c) => c === true, 15_000);

  const owner = await view('a0_4');
  t.equal(owner.status, 429, 'a fifth waiting stream of one account → 429');
  t.equal(owner.headers.get('retry-after'), '30', 'with Retry-After');
  t.match(await owner.text(), /viewers already wait for 4 streams of this account/);
  t.same([(await view('a1_0')).status, (await view('a1_0')).status], [201, 201], 'a stream takes 3 waiting viewers');
  const stream = await view('a1_0');
  t.equal(stream.status, 429, 'a fourth → 429');
  t.equal(stream.headers.get('retry-after'), '30', 'with Retry-After');
  t.match(await stream.text(), /not live and already has 3 viewers waiting/);
  const pub = await fetch(`${srv.baseUrl}/live/${STREAM_ID}_c_0/whip`, { method: 'POST', headers: { 'content-type': 'application/sdp', authorization: `Bearer ${STREAM_KEY}` }, body: pubOffer });
  t.equal(pub.status, 201, 'a publisher still finds the node with room');

  const attackers = () => srv.node.streams().filter((s) => /_a\d_\d$/.test(s.streamId)).length;
  await until("the attacker's streams go once their sessions time out (connectTimeoutMs 10 s)", attackers, (n) => n === 0, 25_000);
  t.equal(srv.node.getSession(id)?.session.connected, true, 'the real viewer is still there');
  t.equal((await view('a0_4')).status, 201, 'and the account has room for waiting viewers again');
});

t.test("waiting streams' slates are bounded per node (maxWaitingSlates): beyond, a connected viewer waits without one until one is free", { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { maxWaitingSlates: 1 } });
  const ctx = await launchChromium(t, { fakeMedia: false });
  const viewers: { id: string; location: string }[] = [];
  for (const stream of ['s1', 's2']) {
    const page = await ctx.newPage();
    await page.goto(`${srv.baseUrl}/peer.html`);
    const played = await page.evaluate((url) => (window as unknown as W).play({ url }), `${srv.baseUrl}/live/${PLAYBACK_ID}_${stream}/whep`);
    t.equal(played.status, 201);
    const id = new URL(String(played.location)).pathname.split('/').pop() ?? '';
    await until(`viewer of ${stream} connects`, () => srv.node.getSession(id)?.session.connected, (c) => c === true, 15_000);
    viewers.push({ id, location: String(played.location) });
  }
  const slates = () => ['s1', 's2'].map((s) => srv.node.status(`${STREAM_ID}_${s}`)?.slate.active ?? false);
  await until('the first waiting stream shows its slate', slates, ([a]) => a === true, 10_000);
  t.same(slates(), [true, false], 'the second does not: one slate encode for waiting streams on this node');
  t.equal(srv.node.waitingSlateCount, 1);
  t.equal((await fetch(viewers[0]?.location ?? '', { method: 'DELETE' })).status, 200, 'the first viewer leaves');
  await until('the second stream takes the freed slate', () => srv.node.status(`${STREAM_ID}_s2`)?.slate.active, (a) => a === true, 10_000);
  t.equal(srv.node.getStream(`${STREAM_ID}_s1`), undefined, 'the stream made for the first viewer went with it');
});

t.test('a stream whose publisher is away is not held to the waiting-viewer bounds: capacity admitted it when it was live', { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { accountOf: () => 'acct_one', settings: { maxWaitingViewersPerStream: 1, maxWaitingStreamsPerAccount: 1 } });
  const pubs = startObsPublishers(t);
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 60 }) });
  t.equal(p.status, 201);
  await until('the publisher connects', () => srv.node.getStream(STREAM_ID)?.publisher?.connected, (c) => c === true, 15_000);
  t.equal((await fetch(String(p.location), { method: 'DELETE', headers: { authorization: `Bearer ${STREAM_KEY}` } })).status, 200, 'the publisher leaves (a reconnect would follow)');
  t.equal(srv.node.getStream(STREAM_ID)?.publisher, null, 'the stream is held without a publisher');
  const [offer = ''] = await offers(t, 'recvonly', 1);
  const view = () => fetch(srv.whepUrl, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: offer });
  t.same([(await view()).status, (await view()).status, (await view()).status], [201, 201, 201], 'viewers keep joining past maxWaitingViewersPerStream (1)');
  const never = (await fetch(`${srv.baseUrl}/live/${PLAYBACK_ID}_never/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: offer })).status;
  t.equal(never, 201, "and it is not one of the owner's waiting streams (at most 1): another of its streams takes viewers");
});
