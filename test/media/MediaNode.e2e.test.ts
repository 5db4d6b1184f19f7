/**
 * End to end through real peers: headless Chromium publishes its fake camera over WHIP, the node
 * decodes, processes (native image processors), encodes once, and a second Chromium page plays
 * WHEP; the test reads the decoded pixels back through a canvas.
 */
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { patchStream, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from './harness.ts';

type W = Window & PeerPage;

const CANNY = { image_postprocessing: { enabled: true, processors: [{ type: 'canny', enabled: true, params: { low_threshold: 100, high_threshold: 200 } }] } };
const NONE = { image_postprocessing: { enabled: true, processors: [] } };

for (const codec of ['VP8', 'H264'] as const) {
  t.test(`Chromium publishes ${codec} over WHIP; a WHEP viewer decodes processed frames and sees a param change`, { timeout: 90_000 }, async (t) => {
    const srv = await startMediaServer(t, { params: { width: 256, height: 256, ...CANNY } });
    const events: string[] = [];
    srv.node.on('started', (i) => events.push(`started:${i.streamId}`));
    srv.node.on('ended', (i) => events.push(`ended:${i.streamId}:${i.reason}`));
    const ctx = await launchChromium(t);
    const pub = await ctx.newPage();
    await pub.goto(`${srv.baseUrl}/peer.html`);
    const viewer = await ctx.newPage();
    await viewer.goto(`${srv.baseUrl}/peer.html`);

    // The viewer joins first: it is held until the publisher's video flows.
    const played = await viewer.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
    t.equal(played.status, 201, 'WHEP POST → 201 before the publisher is live');
    t.match(played.location, /\/live\/sessions\/[0-9a-f]{32}$/, 'WHEP Location is a session URL');

    const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
    const published = await pub.evaluate(
      (o) => (window as unknown as W).publish(o),
      { url: srv.whipUrl, token: STREAM_KEY, codec, width: 320, height: 240 },
    );
    t.equal(published.status, 201, `WHIP POST → 201 (${published.status === 201 ? 'ok' : published.body})`);
    t.match(published.body, /a=candidate:/, 'the answer carries the server candidates (non-trickle)');
    t.match(published.body, /a=recvonly/, 'the answer is recvonly');
    t.ok(published.etag, 'WHIP 201 carries an ETag');
    await started;
    t.same(events, [`started:${STREAM_ID}`], 'started fires on the first output frame');

    const n = await viewer.evaluate(() => (window as unknown as W).waitFrames(20, 20_000));
    t.ok(n >= 20, `viewer decoded ${n} frames`);
    const edges = await viewer.evaluate(() => (window as unknown as W).frameStats());
    t.equal(edges.width, 256, 'viewer frame width = stream width');
    t.equal(edges.height, 256, 'viewer frame height = stream height');
    const ps = await pub.evaluate(() => (window as unknown as W).pubStats());
    t.equal(ps.codec, `video/${codec}`, `publisher really sent ${codec}`);

    // Hot update: drop the canny post-processor; the picture changes from edges to the camera.
    patchStream(srv.node, STREAM_ID, NONE);
    await viewer.evaluate(() => (window as unknown as W).waitFrames(15, 10_000));
    const plain = await viewer.evaluate(() => (window as unknown as W).frameStats());
    t.ok(edges.extremeFraction > 0.85, `canny output is near-binary (extreme-pixel fraction ${edges.extremeFraction.toFixed(3)})`);
    t.ok(plain.extremeFraction < edges.extremeFraction - 0.3, `passthrough output is not (${plain.extremeFraction.toFixed(3)})`);

    const status = srv.node.status(STREAM_ID);
    t.equal(status?.state, 'live', 'status reports live');
    t.same(status?.readers['whep'], { kind: 'whep', watched: true, consumers: 1 }, 'status lists the WHEP reader with its one viewer');
    t.ok((status?.outputFps ?? 0) > 5, `status reports output fps (${status?.outputFps})`);
    t.equal(status?.ingest?.codec, codec, 'status reports the ingest codec');
    // Wire bytes from the transport: the publisher's media in, our RTCP feedback (PLI, receiver reports) out.
    t.ok((status?.ingest?.bytesReceived ?? 0) > (status?.ingest?.bytesSent ?? 0) && (status?.ingest?.bytesSent ?? 0) > 0, `ingest bytes in ${status?.ingest?.bytesReceived}, out ${status?.ingest?.bytesSent}`);
    // Every decoded frame came in at least one RTP packet (a fixed count would depend on timing).
    const framesIn = status?.framesIn ?? 0;
    t.ok(framesIn >= 20 && (status?.ingest?.videoPackets ?? 0) >= framesIn, `status counts ingest packets (${status?.ingest?.videoPackets} for ${framesIn} decoded frames)`);
    t.ok(status?.latency.node?.p50 !== undefined, `node-internal latency is measured (p50 ${status?.latency.node?.p50.toFixed(1)} ms)`);

    // DELETE ends the publisher session → ended(deleted).
    const ended = new Promise<void>((resolve) => srv.node.once('ended', () => resolve()));
    const del = await fetch(published.location ?? '', { method: 'DELETE', headers: { authorization: `Bearer ${STREAM_KEY}` } });
    t.equal(del.status, 200, 'DELETE → 200');
    await ended;
    t.same(events, [`started:${STREAM_ID}`, `ended:${STREAM_ID}:deleted`], 'ended fires with reason deleted');
    t.equal(srv.node.status(STREAM_ID)?.state, 'idle', 'stream is idle after the publisher left');
  });
}
