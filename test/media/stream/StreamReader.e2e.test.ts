/**
 * A new kind of output, added as a reader of a live stream's hub with no change to the hub, the
 * node or the status view (docs/decisions/0028-stream-hub.md): a real publisher (wrtc, VP8 + Opus
 * with sound) into a real node; the test's reader asks for a key unit and AAC, and gets the
 * stream's one H.264 encode from a key frame on, AAC from the encoder that started for it, a place
 * in the node's status, the media-node client's status, the API's status view and /metrics, and
 * the slate while it alone is watched and the publisher is gone.
 */
import pino from 'pino';
import t from 'tap';
import { registerMediaMetrics } from '../../../control/MediaMetrics.ts';
import { Metrics } from '../../../control/Metrics.ts';
import type { EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';
import type { ReaderContext, ReaderStatus, StreamReader } from '../../../media/index.ts';
import type { StreamRecord } from '../../../store/index.ts';
import { InProcessMediaNodeClient } from '../../../streams/index.ts';
import { statusView } from '../../../streams/StreamStatusView.ts';
import { until } from '../../helpers/until.ts';
import { STREAM_ID, startMediaServer } from '../harness.ts';
import { wrtcSoundPublish } from '../wrtcPeers.ts';

/** What a test output takes: every access unit and AAC frame, with when it came. */
class TapReader implements StreamReader {
  readonly name = 'tap';
  readonly watched = true;
  readonly wantsAac = true;
  readonly units: { keyframe: boolean; slate: boolean; ptsMs: number }[] = [];
  readonly aacAt: number[] = [];
  closed = false;
  constructor(ctx: ReaderContext) {
    // A reader that starts mid-stream asks for a key unit, as a new viewer does.
    ctx.requestKeyUnit();
  }
  video(au: EncodedAccessUnit, slate: boolean): void {
    if (!this.closed) this.units.push({ keyframe: au.keyframe, slate, ptsMs: au.ptsMs });
  }
  aac(_frame: Uint8Array, atMs: number): void {
    if (!this.closed) this.aacAt.push(atMs);
  }
  status(): ReaderStatus {
    return { kind: 'tap', watched: true, consumers: 1 };
  }
  close(): void {
    this.closed = true;
  }
}

t.test('a test reader on a live stream: video from a key frame, AAC on demand, status everywhere, the slate for it alone', { timeout: 120_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 } });
  const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
  const pub = await wrtcSoundPublish(t, srv.whipUrl, { kind: 'ramp', startMs: 200, rampMs: 60_000 });
  t.equal(pub.status, 201, 'publisher accepted');
  await started;
  const stream = srv.node.getStream(STREAM_ID);
  if (!stream) throw new Error('no stream');
  t.equal(stream.readers.wantsAac, false, 'no HLS player, recording or push: nobody wants AAC yet');

  const tap = stream.readers.add((ctx) => new TapReader(ctx));
  await until('30 access units', () => tap.units.length, (n) => n >= 30, 20_000, 50);
  t.equal(tap.units.filter((u) => u.keyframe).length >= 1, true, 'a key frame came for the reader');
  t.ok(tap.units.slice(0, 10).some((u) => u.keyframe), `…within its first 10 access units (at ${tap.units.findIndex((u) => u.keyframe)})`);
  t.ok(tap.units.every((u, i) => i === 0 || u.ptsMs > (tap.units[i - 1]?.ptsMs ?? 0)), 'on one rising output timeline');
  t.notOk(tap.units.some((u) => u.slate), 'live frames, not the slate');
  await until('AAC from the encoder started for the reader', () => tap.aacAt.length, (n) => n >= 20, 20_000, 50);
  t.ok(tap.aacAt.every((at, i) => i === 0 || at > (tap.aacAt[i - 1] ?? 0)), `${tap.aacAt.length} AAC frames in time order`);

  // Status: the node's, the media-node client's (what the api reads, here and over Redis), the API view, /metrics.
  t.same(srv.node.status(STREAM_ID)?.readers['tap'], { kind: 'tap', watched: true, consumers: 1 }, "the node's status lists it");
  const client = new InProcessMediaNodeClient({ node: srv.node, models: [], demo: true, logger: pino({ level: 'silent' }) });
  const nodeStatus = await client.status('local', STREAM_ID);
  t.same(Object.keys(nodeStatus?.readers ?? {}), ['whep', 'hls', 'rtmp', 'tap'], 'the standard readers, then the test reader');
  const record = { id: STREAM_ID, params: {}, pipeline: 'pip_test', state: 'live', nodeId: 'local', deleted: false } as unknown as StreamRecord;
  const view = statusView({ stream: record, whepUrl: srv.whepUrl, node: nodeStatus, nodeInfo: null, now: Date.now() });
  t.same(
    view.outputs?.find((o) => o.name === 'tap'),
    { name: 'tap', kind: 'tap', watched: true, consumers: 1 },
    "the API's status shows it among the outputs",
  );
  const metrics = new Metrics({ defaultMetrics: false });
  registerMediaMetrics(metrics, srv.node);
  t.match(await metrics.registry.metrics(), /reverie_media_reader_consumers\{stream_id="str_test",reader="tap",kind="tap"\} 1/, '/metrics counts its consumers');

  // The publisher goes: the reader alone is watched, so the slate runs for it.
  pub.kill();
  await until('the slate on the outputs', () => srv.node.status(STREAM_ID)?.output, (o) => o === 'slate', 30_000, 100);
  const before = tap.units.length;
  await until('slate access units reach the reader', () => tap.units.slice(before).filter((u) => u.slate).length, (n) => n >= 5, 20_000, 50);
  t.pass('the slate runs for a watched reader with no viewer, player or push');

  t.ok(stream.readers.remove('tap'), 'removed');
  t.equal(tap.closed, true, 'the hub closed it');
  t.equal(srv.node.status(STREAM_ID)?.readers['tap'], undefined, 'gone from the status');
});
