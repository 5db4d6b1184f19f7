/**
 * How many viewers a media node takes, as the operator sets it (WHEP_* through the process
 * config): receive-only viewers of one stream from many client addresses all get media; the
 * per-stream and per-node caps refuse the viewer over them with 503 + Retry-After (the node is
 * full) and move with their settings; a client over a per-client limit (WHEP POSTs per address and
 * per playback id a minute, sessions still connecting per address) gets 429 with a Retry-After
 * that says when the limit frees. 300 viewers of one stream: test/load/viewers.load.ts.
 */
import t, { type Test } from 'tap';
import { loadConfig } from '../../control/config.ts';
import type { MediaSettings } from '../../media/index.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers, type ObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { realOffer } from '../helpers/wrtcOffer.ts';
import { PLAYBACK_ID, STREAM_KEY, startMediaServer, type MediaServer } from './harness.ts';

/** The node's settings as `reverie serve` makes them from these variables (control/StreamRoles.ts). */
function operatorSettings(env: Record<string, string>, extra: Partial<MediaSettings> = {}): Partial<MediaSettings> {
  // 300 kbit/s: the viewers of this file only need to see media arrive, not cost a node's worth.
  return { ...loadConfig(env).media, videoBitrateKbps: 300, ...extra };
}

/** A live stream on `srv` from one OBS-like publisher. */
async function live(t: Test, srv: MediaServer, pubs: ObsPublishers): Promise<void> {
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 300, bitrateKbps: 300 }), httpFrom: '127.0.0.2' });
  t.equal(p.status, 201, 'the publisher attaches');
  await pubs.waitState(p.id, 'connected', 30_000);
}

/** Resolves once the node counts `n` connected viewers (the peer may see DTLS done before the node does). */
async function nodeCounts(srv: MediaServer, n: number): Promise<number> {
  return until(`the node counts ${n} connected viewers`, () => srv.node.connectedViewerCount, (c) => c === n, 15_000, 50);
}

/** `n` receive-only viewers of `url`, the i-th from client address `from(i)`, each answered 201 and connected. */
async function viewers(t: Test, pubs: ObsPublishers, url: string, n: number, from: (i: number) => string): Promise<string[]> {
  const played = await Promise.all(Array.from({ length: n }, (_, i) => pubs.play({ url, httpFrom: from(i) })));
  const refused = played.filter((p) => p.status !== 201);
  t.same(refused.map((p) => `${p.status} ${p.body}`), [], `${n} viewers answered 201`);
  await Promise.all(played.map((p) => pubs.waitState(p.id, 'connected', 60_000)));
  return played.map((p) => p.id);
}

/** A WHEP POST with a real offer (never connected), for the answer's status and headers. */
async function post(srv: MediaServer, playbackId: string, offer: string, remoteAddress: string) {
  return srv.app.inject({ method: 'POST', url: `/live/${playbackId}/whep`, headers: { 'content-type': 'application/sdp' }, payload: offer, remoteAddress });
}

t.test('40 receive-only viewers of one stream from 40 client addresses all receive media with the default limits', { timeout: 180_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: operatorSettings({}) });
  const pubs = startObsPublishers(t);
  await live(t, srv, pubs);
  const ids = await viewers(t, pubs, srv.whepUrl, 40, (i) => `127.0.3.${i + 1}`);
  t.equal(await nodeCounts(srv, 40), 40, 'the node counts 40 connected viewers');
  // Media, not only a handshake: every viewer has had ≥ 50 RTP packets (≈ 1 s of 300 kbit/s video).
  const counts = await until(
    'every viewer receives media',
    () => Promise.all(ids.map(async (id) => (await pubs.stats(id)).packetsReceived ?? 0)),
    (c) => c.every((n) => n >= 50),
    60_000,
    250,
  );
  t.ok(Math.min(...counts) >= 50, `all 40 receive media (fewest packets: ${Math.min(...counts)})`);
});

t.test('WHEP_VIEWERS_PER_STREAM and WHEP_VIEWERS_PER_NODE set the caps: the viewer over one gets 503 + Retry-After; raised, it gets in', { timeout: 180_000 }, async (t) => {
  const offer = await realOffer(t, 'recvonly');
  const pubs = startObsPublishers(t);
  // Lowered: 2 viewers of a stream, 3 on the node.
  const low = await startMediaServer(t, { settings: operatorSettings({ WHEP_VIEWERS_PER_STREAM: '2', WHEP_VIEWERS_PER_NODE: '3' }) });
  await live(t, low, pubs);
  await viewers(t, pubs, low.whepUrl, 2, (i) => `127.0.4.${i + 1}`);
  await nodeCounts(low, 2);
  const overStream = await post(low, PLAYBACK_ID, offer, '10.4.0.1');
  t.equal(overStream.statusCode, 503, 'the third viewer of the stream → 503');
  t.equal(overStream.headers['retry-after'], '30', 'with Retry-After');
  t.match(overStream.body, /maximum of 2 viewers/);
  // Another stream (not live yet: its viewer waits for it) takes the node's third viewer.
  await viewers(t, pubs, `${low.baseUrl}/live/${PLAYBACK_ID}_2/whep`, 1, () => '127.0.4.10');
  t.equal(await nodeCounts(low, 3), 3, 'three viewers connected on the node');
  const overNode = await post(low, `${PLAYBACK_ID}_2`, offer, '10.4.0.2');
  t.equal(overNode.statusCode, 503, 'a viewer of either stream over the node cap → 503 (the node is full)');
  t.equal(overNode.headers['retry-after'], '30', 'with Retry-After');
  t.match(overNode.body, /media node carries its maximum of 3 viewers/);
  t.notMatch(overNode.body, /str_|play_/, 'the message names no internal id');

  // Raised: the same viewers fit.
  const high = await startMediaServer(t, { settings: operatorSettings({ WHEP_VIEWERS_PER_STREAM: '3', WHEP_VIEWERS_PER_NODE: '4' }) });
  await live(t, high, pubs);
  await viewers(t, pubs, high.whepUrl, 3, (i) => `127.0.5.${i + 1}`);
  t.equal(await nodeCounts(high, 3), 3, 'a third viewer of the stream connects once the cap is 3');
  t.equal((await post(high, PLAYBACK_ID, offer, '10.5.0.1')).statusCode, 503, 'and the fourth is refused');
});

t.test('over a per-client limit → 429 + Retry-After saying when it frees: WHEP POSTs per address and per playback id a minute, sessions still connecting per address', { timeout: 60_000 }, async (t) => {
  const connectTimeoutMs = 8000;
  const srv = await startMediaServer(t, {
    settings: operatorSettings({ WHEP_PER_ADDRESS_PER_MINUTE: '3', WHEP_PER_PLAYBACK_PER_MINUTE: '3', WHEP_PENDING_VIEWERS_PER_ADDRESS: '2' }, { connectTimeoutMs }),
  });
  const offer = await realOffer(t, 'recvonly');

  // Sessions still connecting (these offers never do ICE): the third from one address waits for the oldest's connect deadline.
  const a = [await post(srv, PLAYBACK_ID, offer, '10.6.0.1'), await post(srv, PLAYBACK_ID, offer, '10.6.0.1')];
  t.same(a.map((r) => r.statusCode), [201, 201], 'two sessions from one address may be connecting');
  const ids = a.map((r) => new URL(String(r.headers['location'])).pathname.split('/').pop() ?? '');
  const refusedAt = performance.now();
  const pending = await post(srv, PLAYBACK_ID, offer, '10.6.0.1');
  t.equal(pending.statusCode, 429, 'a third while both connect → 429 (a per-client limit, not 503)');
  t.match(pending.body, /still connecting/);
  const retryAfterS = Number(pending.headers['retry-after']);
  t.ok(retryAfterS >= 1 && retryAfterS <= connectTimeoutMs / 1000, `Retry-After ${retryAfterS} s: within the connect timeout`);
  await until('the oldest connecting session is closed', () => srv.node.getSession(ids[0] ?? ''), (s) => s === undefined, connectTimeoutMs + 5000, 50);
  const freedS = (performance.now() - refusedAt) / 1000;
  t.ok(freedS <= retryAfterS + 0.5 && freedS >= retryAfterS - 1.5, `the slot freed after ${freedS.toFixed(1)} s: what Retry-After (${retryAfterS} s) said`);
  t.equal((await post(srv, `${PLAYBACK_ID}_2`, offer, '10.6.0.9')).statusCode, 201, 'another address was never held to it');

  // POSTs per address a minute: counted before anything else (here: the wrong content type).
  const bad = () => srv.app.inject({ method: 'POST', url: `/live/${PLAYBACK_ID}_3/whep`, headers: { 'content-type': 'text/plain' }, payload: 'x', remoteAddress: '10.6.1.1' });
  const rate = [await bad(), await bad(), await bad(), await bad()];
  t.same(rate.map((r) => r.statusCode), [415, 415, 415, 429], 'the fourth POST from one address in a minute → 429');
  // The limits count in minutes of the clock, the previous minute weighted by how much of it
  // still overlaps (media/RateLimiter.ts): 3 POSTs in this minute leave room for one more 20 s
  // into the next (3 × (1 − 20/60) = 2).
  const whenFree = () => (60_000 - (Date.now() % 60_000) + 20_000) / 1000;
  const rateRetry = Number(rate[3]?.headers['retry-after']);
  t.ok(Math.abs(rateRetry - whenFree()) <= 1.5, `Retry-After ${rateRetry} s: when one more fits (≈ ${whenFree().toFixed(1)} s), not the minute's end`);

  // POSTs per playback id a minute, from any addresses.
  const codes: number[] = [];
  let last: Awaited<ReturnType<typeof post>> | undefined;
  for (let i = 1; i <= 4; i++) codes.push((last = await post(srv, `${PLAYBACK_ID}_4`, offer, `10.6.2.${i}`)).statusCode);
  t.same(codes, [201, 201, 201, 429], 'the fourth POST for one playback id in a minute → 429, whichever address');
  const playbackRetry = Number(last?.headers['retry-after']);
  t.ok(Math.abs(playbackRetry - whenFree()) <= 1.5, `Retry-After ${playbackRetry} s: when one more fits (≈ ${whenFree().toFixed(1)} s)`);
  t.match(last?.body, /play requests for this stream/);
});
