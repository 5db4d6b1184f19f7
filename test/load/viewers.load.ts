/**
 * An audience on one node (a load suite: `npm run test:load` runs these files one at a time,
 * after the other tests). A real `reverie serve` whose per-stream viewer cap is set to 300
 * (WHEP_VIEWERS_PER_STREAM; the node's own cap, 500 a core, is left to its default): 300
 * receive-only WHEP viewers (libdatachannel, no decoding) of one OBS-like publisher's stream, each
 * from its own loopback address, all receive media; the 301st is refused 503 + Retry-After. The
 * smaller version in the main suite: test/media/ViewerCapacity.e2e.test.ts.
 */
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { freePort } from '../helpers/net.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { startServerProcess } from '../helpers/serverProcess.ts';
import { until } from '../helpers/until.ts';
import { realOffer } from '../helpers/wrtcOffer.ts';

const VIEWERS = 300;
/**
 * Viewers asked for at once, each batch connected before the next: far below
 * WHEP_PENDING_VIEWERS_PER_STREAM (50), and small enough that a busy 2-core machine answers every
 * POST within the viewer's 20 s HTTP timeout (batches of 30 once left one unanswered at load ≈ 10).
 */
const BATCH = 10;

t.test(`${VIEWERS} receive-only WHEP viewers of one stream, from ${VIEWERS} addresses, all receive media; WHEP_VIEWERS_PER_STREAM=${VIEWERS} refuses the next with 503`, { timeout: 420_000 }, async (t) => {
  const port = await freePort();
  const server = await startServerProcess(t, { env: { PORT: String(port), HOST: '127.0.0.1', WEBRTC_INTERFACES: '127.0.0.1', WHEP_VIEWERS_PER_STREAM: String(VIEWERS) } });
  const pubs = startObsPublishers(t);
  const r = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'audience', skip_diffusion: true } });
  t.equal(r.status, 201, 'stream created');
  const s = r.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
  const p = await pubs.publish({ url: s.whip_url, token: s.stream_key, source: await stampedH264({ size: 512, frames: 300 }), httpFrom: '127.0.1.1' });
  t.equal(p.status, 201, 'the publisher attaches');
  await pubs.waitState(p.id, 'connected', 30_000);

  const ids: string[] = [];
  const started = performance.now();
  while (ids.length < VIEWERS) {
    const batch = Array.from({ length: Math.min(BATCH, VIEWERS - ids.length) }, (_, k) => ids.length + k);
    const played = await Promise.all(batch.map((i) => pubs.play({ url: s.output_stream_url, httpFrom: `127.0.${10 + Math.floor(i / 250)}.${(i % 250) + 1}` })));
    const refused = played.filter((v) => v.status !== 201);
    if (refused.length > 0) t.fail(`viewers refused: ${refused.map((v) => `${v.status} ${v.body.trim()}`).join('; ')}`);
    await Promise.all(played.filter((v) => v.status === 201).map((v) => pubs.waitState(v.id, 'connected', 60_000)));
    ids.push(...played.filter((v) => v.status === 201).map((v) => v.id));
    if (refused.length > 0) break;
  }
  t.equal(ids.length, VIEWERS, `${VIEWERS} viewers connected in ${((performance.now() - started) / 1000).toFixed(0)} s`);

  // Media now, not only at the start: every viewer gets ≥ 150 more packets (≈ 1 s of 1.5 Mb/s video) from here.
  const packets = async () => Promise.all(ids.map(async (id) => (await pubs.stats(id)).packetsReceived ?? 0));
  const before = await packets();
  const gained = await until('every viewer receives media', async () => (await packets()).map((n, i) => n - (before[i] ?? 0)), (g) => g.every((n) => n >= 150), 90_000, 1000);
  t.ok(Math.min(...gained) >= 150, `all ${VIEWERS} receive media (fewest new packets: ${Math.min(...gained)}, most: ${Math.max(...gained)})`);

  // Over the cap: 503 (this node carries no more of this stream), with Retry-After.
  const over = await fetch(s.output_stream_url, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: await realOffer(t, 'recvonly') });
  t.equal(over.status, 503, `viewer ${VIEWERS + 1} → 503`);
  t.equal(over.headers.get('retry-after'), '30', 'with Retry-After');
  t.match(await over.text(), new RegExp(`maximum of ${VIEWERS} viewers`));
});
