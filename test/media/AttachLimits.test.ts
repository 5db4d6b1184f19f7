/**
 * What one client can make a media node do: capacity is enforced when a publisher or viewer
 * attaches (503 + Retry-After, nothing built), WHIP/WHEP POSTs are rate-limited per client
 * address and per playback id (429), offers that never connect are bounded per address and never
 * hold a viewer slot, trickled candidates are capped and filtered, and no refusal names an
 * internal id.
 */
import t from 'tap';
import { forwardedFor } from '../../media/WhipWhepRoutes.ts';
import { launchChromium } from '../helpers/chromium.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from './harness.ts';

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

t.test('at capacity: WHIP for another stream and WHEP for a stream the node does not hold get 503 + Retry-After and build nothing', { timeout: 90_000 }, async (t) => {
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
  t.equal(whep.statusCode, 503, 'a viewer of a stream the full node does not hold → 503');
  t.equal(srv.node.streamCount, 1, 'still one stream on the node');
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
  t.same(codes, [201, 201, 201, 201, 503, 503], 'the fifth unconnected offer from one address → 503');
  t.equal(srv.node.status(STREAM_ID)?.viewers, 4, 'four sessions wait to connect');
  // Four pending sessions exceed the cap of 3 viewers, yet a real viewer from elsewhere connects.
  const ctx = await launchChromium(t, { fakeMedia: false });
  const page = await ctx.newPage();
  await page.goto(`${srv.baseUrl}/peer.html`);
  const played = await page.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  t.equal(played.status, 201, 'a real viewer is not locked out by pending offers');
  const id = new URL(String(played.location)).pathname.split('/').pop() ?? '';
  const end = Date.now() + 15_000;
  while (!srv.node.getSession(id)?.session.connected && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
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
