/**
 * An edge relay with real parts (decision 0030): an origin media node with a real publisher, and an
 * edge media node whose playback resolver says another node holds the stream. Viewers of the edge
 * get the origin's output through one WHEP pull: Chromium decodes the published colour, the origin
 * carries one session for all of the edge's viewers, and the pull stops after the last one left.
 */
import t from 'tap';
import { launchChromium } from '../../helpers/chromium.ts';
import { until } from '../../helpers/until.ts';
import { PLAYBACK_ID, STREAM_ID, startMediaServer, whepOf, type PeerPage } from '../harness.ts';
import { wrtcPublish } from '../wrtcPeers.ts';

type W = Window & PeerPage;

const SECRET = 'edge-test-secret-0123456789abcdef';
const NONE = { image_postprocessing: { enabled: true, processors: [] } };

t.test('an edge relays the origin to Chromium viewers through one pull, and stops pulling after its last viewer', { timeout: 120_000 }, async (t) => {
  const origin = await startMediaServer(t, { params: { width: 256, height: 256, ...NONE }, forwardedSecret: SECRET });
  const edge = await startMediaServer(t, { forwardedSecret: SECRET, settings: { edgeLingerMs: 300 }, origin: () => ({ nodeId: 'origin', url: origin.baseUrl }) });
  const started = new Promise<void>((resolve) => origin.node.once('started', () => resolve()));
  const green: [number, number, number] = [40, 200, 60];
  const pub = await wrtcPublish(t, origin.whipUrl, green);
  t.equal(pub.status, 201, 'publisher → origin 201');
  await started;

  const ctx = await launchChromium(t);
  const open = async () => {
    const page = await ctx.newPage();
    await page.goto(`${edge.baseUrl}/peer.html`);
    return page;
  };
  const [a, b] = [await open(), await open()];
  const edgeWhep = `${edge.baseUrl}/live/${PLAYBACK_ID}/whep`;
  const playA = await a.evaluate((url) => (window as unknown as W).play({ url }), edgeWhep);
  t.equal(playA.status, 201, 'viewer A → edge 201');
  t.match(playA.location, new RegExp(`^${edge.baseUrl}/live/sessions/`), "the viewer's WHEP resource lives on the edge");
  const playB = await b.evaluate((url) => (window as unknown as W).play({ url }), edgeWhep);
  t.equal(playB.status, 201, 'viewer B → edge 201');

  for (const [name, page] of [['A', a], ['B', b]] as const) {
    const n = await page.evaluate(() => (window as unknown as W).waitFrames(30, 30_000));
    t.ok(n >= 30, `viewer ${name} decodes frames through the edge (${n})`);
    const stats = await page.evaluate(() => (window as unknown as W).frameStats());
    t.ok(stats.meanRgb.every((c, i) => Math.abs(c - (green[i] as number)) < 30), `viewer ${name} sees the published colour (${stats.meanRgb.map((c) => c.toFixed(0)).join(',')})`);
  }

  const atOrigin = whepOf(origin.node, STREAM_ID);
  t.equal(atOrigin?.connected, 1, 'the origin carries one session for the edge');
  t.equal(atOrigin?.edges, 1, 'and it is the edge pull');
  t.same(edge.node.audience()[STREAM_ID], { role: 'edge', viewers: 2, sessions: 2, edges: 0 }, 'the edge carries both viewers');
  t.same(origin.node.audience()[STREAM_ID], { role: 'origin', viewers: 1, sessions: 1, edges: 1 }, "the origin's audience: one session, an edge's");
  t.equal(edge.node.getStream(STREAM_ID), undefined, 'the edge runs no pipeline of its own for the stream');
  const pulled = edge.node.edgeStatus(STREAM_ID);
  t.equal(pulled?.pull, 'connected', 'the edge status shows its pull connected');
  t.ok((pulled?.ingest?.framesIn ?? 0) >= 30, `frames came through the pull (${pulled?.ingest?.framesIn})`);

  // A direct viewer of a stream another node holds must take H.264: the relay encodes nothing.
  const vp8 = await open();
  const refused = await vp8.evaluate((url) => (window as unknown as W).play({ url, codec: 'VP8' }), edgeWhep);
  t.equal(refused.status, 422, `a VP8-only offer to the edge → 422 (as any offer the node cannot serve) (${refused.body.trim()})`);

  // Both viewers leave: the edge stops pulling after its linger; the origin's session goes.
  for (const page of [a, b]) await page.evaluate(() => (window as unknown as { view: RTCPeerConnection }).view.close());
  for (const loc of [playA.location, playB.location]) await fetch(loc ?? '', { method: 'DELETE' });
  await until('the edge stops pulling', async () => edge.node.edgeStatus(STREAM_ID), (s) => s === null, 10_000);
  await until("the origin's session of the edge is gone", async () => whepOf(origin.node, STREAM_ID)?.viewers, (v) => v === 0, 10_000);
  t.pass('the pull ended at the origin too');
});

t.test("an edge pull is refused by a node that is not the stream's origin, and unsigned pulls are ordinary viewers", { timeout: 60_000 }, async (t) => {
  const origin = await startMediaServer(t, { forwardedSecret: SECRET });
  const edge = await startMediaServer(t, { forwardedSecret: SECRET, origin: () => ({ nodeId: 'origin', url: origin.baseUrl }) });
  const { edgePullFor, EDGE_HEADER } = await import('../../../media/NodeSignatures.ts');
  const { realOffer } = await import('../../helpers/wrtcOffer.ts');
  const offer = await realOffer(t, 'recvonly');
  const res = await fetch(`${edge.baseUrl}/live/${PLAYBACK_ID}/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp', [EDGE_HEADER]: edgePullFor('http://other-edge', SECRET) }, body: offer });
  t.equal(res.status, 503, 'an edge pull to a node that itself relays the stream → 503 (no chains)');
  t.equal(res.headers.get('retry-after'), '2', 'with Retry-After');
  t.equal(edge.node.edgeStatus(STREAM_ID), null, 'and it started no relay');
  const forged = await fetch(`${origin.baseUrl}/live/${PLAYBACK_ID}/whep`, { method: 'POST', headers: { 'content-type': 'application/sdp', [EDGE_HEADER]: 'http://x;0000' }, body: offer });
  t.equal(forged.status, 201, 'a pull with a bad signature is an ordinary viewer');
  t.equal(whepOf(origin.node, STREAM_ID)?.edges, 0, 'not counted as an edge');
});

t.test('when the origin goes away the edge closes its viewers (they reconnect through the api) and stops relaying', { timeout: 90_000 }, async (t) => {
  const origin = await startMediaServer(t, { params: { width: 256, height: 256, ...NONE }, forwardedSecret: SECRET });
  const edge = await startMediaServer(t, { forwardedSecret: SECRET, settings: { ingestTimeoutMs: 2_000 }, origin: () => ({ nodeId: 'origin', url: origin.baseUrl }) });
  const started = new Promise<void>((resolve) => origin.node.once('started', () => resolve()));
  const pub = await wrtcPublish(t, origin.whipUrl, [200, 60, 40]);
  t.equal(pub.status, 201, 'publisher → origin 201');
  await started;
  const { ObsPublishers } = await import('../../helpers/obsPublisher.ts');
  const viewers = new ObsPublishers();
  t.teardown(() => viewers.close());
  const v = await viewers.play({ url: `${edge.baseUrl}/live/${PLAYBACK_ID}/whep` });
  t.equal(v.status, 201, 'a libdatachannel viewer → edge 201');
  await viewers.waitState(v.id, 'connected', 20_000);
  const p0 = (await viewers.stats(v.id)).packetsReceived ?? 0;
  await until('media through the edge', async () => ((await viewers.stats(v.id)).packetsReceived ?? 0) - p0, (n) => n >= 50, 15_000);
  t.equal(edge.node.audience()[STREAM_ID]?.viewers, 1, 'the edge carries the viewer');

  // The origin crashes (its node and its HTTP endpoint go; no DELETE reaches the edge).
  origin.node.close();
  await origin.app.close();
  await until('the edge gives up its relay', async () => edge.node.edgeStatus(STREAM_ID), (s) => s === null, 20_000);
  t.equal(edge.node.audience()[STREAM_ID], undefined, "the edge carries nothing of the stream: its viewer's session was closed, to reconnect elsewhere");
  t.equal(edge.node.connectedViewerCount, 0, 'no viewer left on the edge');
});
