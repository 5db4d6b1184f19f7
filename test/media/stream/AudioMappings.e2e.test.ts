/**
 * Params that follow a publisher's audio, end to end on a media node: a real WHIP publisher
 * (libwebrtc via wrtc, VP8 + Opus) sends a test signal, the node decodes its Opus (GStreamer),
 * places it on its clock and sets the mapped param on each frame before the processor takes it.
 * The processor records the params each frame was given and the frame's capture time, so the
 * test reads back what the pipeline saw per frame.
 *
 * Click times and capture times are on one clock (one machine): the publisher paces its audio
 * like a microphone (fixtures/wrtcSoundPublisher.ts) and reports each click's first sample.
 */
import t from 'tap';
import { loadGst } from '../../../media/gst/gst.ts';
import type { Frame, FrameProcessorFactory, LiveParams } from '../../../media/index.ts';
import { until } from '../../helpers/until.ts';
import { patchStream, STREAM_ID, startMediaServer } from '../harness.ts';
import { wrtcSoundPublish } from '../wrtcPeers.ts';

interface Seen {
  capturedAt: number;
  seed: unknown;
  delta: unknown;
  /** The node set its params without all the audio of its time (the wait ran out). */
  soundLate: boolean;
}

/** A processor that passes frames on and records, per frame, its capture time and the params it had. */
function recordingProcessor() {
  const seen: Seen[] = [];
  const factory: FrameProcessorFactory = async (initial) => {
    let params: LiveParams = { ...initial };
    return {
      process: async (frame: Frame) => {
        seen.push({ capturedAt: frame.capturedAt ?? NaN, seed: params.seed, delta: params.delta, soundLate: frame.soundLate === true });
        return frame;
      },
      // Plans like an engine whose every key is hot (what the API reports for a live stream's PATCH).
      update: ({ target, plan }) => {
        params = target;
        const hot = [...plan.hot, ...plan.reload];
        return { mode: hot.length > 0 ? 'hot' : 'none', hot, reload: [] };
      },
      close: () => undefined,
    };
  };
  return { factory, seen };
}

/**
 * How far a capture time may sit from the sound's own time on the node's clock, ms: both are
 * placed by their least-delayed packet, and a VP8 frame and an Opus packet do not take exactly
 * the same time to encode and send (a few ms on loopback).
 */
const CLOCK_TOLERANCE_MS = 8;

t.test('onset → seed: the seed changes on the first frame at or after each click, and only then', { timeout: 120_000 }, async (t) => {
  const rec = recordingProcessor();
  const params: LiveParams = { width: 256, height: 256, seed: 42, audio_mappings: [{ source: 'publisher', feature: 'onset', param: 'seed', range: [1, 1_000_000], smoothing_ms: 0 }] };
  const { node, whipUrl } = await startMediaServer(t, { params, createProcessor: rec.factory });
  const count = 8;
  // Clicks 700 ms apart (not a multiple of the 33 ms frame interval: they fall at every phase of a frame).
  const pub = await wrtcSoundPublish(t, whipUrl, { kind: 'clicks', startMs: 2500, periodMs: 700, count });
  t.equal(pub.status, 201, 'publisher accepted');
  await until('every click sent', () => pub.clicks.length, (n) => n === count, 30_000);
  const last = pub.clicks[count - 1] as number;
  await until('frames past the last click', () => rec.seen.at(-1)?.capturedAt ?? 0, (at) => at > last + 500, 20_000);

  const frames = rec.seen.filter((f) => Number.isFinite(f.capturedAt));
  const changes = frames.map((f, i) => ({ f, prev: frames[i - 1] })).filter(({ f, prev }) => prev !== undefined && f.seed !== prev.seed);
  t.equal(changes.length, count, `one seed change per click (${changes.length}: ${changes.map((c) => String(c.f.seed)).join(', ')})`);
  const errors: string[] = [];
  pub.clicks.forEach((click, i) => {
    const c = changes[i];
    if (!c?.prev) return t.fail(`click ${i}: no seed change`);
    const err = c.f.capturedAt - click;
    const interval = c.f.capturedAt - c.prev.capturedAt;
    errors.push(`${err.toFixed(1)}/${interval.toFixed(0)}`);
    t.ok(typeof c.f.seed === 'number' && c.f.seed >= 1 && c.f.seed <= 1_000_000, 'a seed of the range');
    // Frames captured after the click that kept the old seed: each took its params when its wait for
    // the click's sound ran out (a node too busy to get the audio in AUDIO_MAPPING_WAIT_MS), and says so.
    const missed = frames.filter((f) => f.capturedAt >= click + CLOCK_TOLERANCE_MS && f.capturedAt < c.f.capturedAt);
    t.ok(err >= -CLOCK_TOLERANCE_MS, `click ${i}: the changed frame was captured at or after the click (${err.toFixed(1)} ms)`);
    if (missed.length > 0) {
      t.ok(missed.every((f) => f.soundLate), `click ${i}: the ${missed.length} frame(s) after the click before the change took their params without its sound, and were marked so`);
      return;
    }
    t.ok(c.prev.capturedAt < click + CLOCK_TOLERANCE_MS, `click ${i}: the frame before was captured before the click (${(c.prev.capturedAt - click).toFixed(1)} ms)`);
    t.ok(err <= interval + CLOCK_TOLERANCE_MS, `click ${i}: within one frame interval of the click (${err.toFixed(1)} ms, interval ${interval.toFixed(1)} ms)`);
  });
  t.comment(`seed change − click, ms / frame interval, ms: ${errors.join(', ')}`);
  t.equal(frames[0]?.seed, 42, "the stream's own seed until the first click");

  const status = node.getStream(STREAM_ID)?.status();
  t.match(status?.audioMappings, [{ source: 'publisher', feature: 'onset', param: 'seed', value: changes.at(-1)?.f.seed }], 'status shows the mapping and the seed it set');
});

t.test('rms → delta follows a rising volume ramp monotonically; the decoder runs only while a publisher mapping needs it', { timeout: 120_000 }, async (t) => {
  const rec = recordingProcessor();
  const params: LiveParams = { width: 256, height: 256, delta: 0.5, audio_mappings: [{ source: 'publisher', feature: 'rms', param: 'delta', range: [0.2, 0.9], smoothing_ms: 50 }] };
  const { node, whipUrl } = await startMediaServer(t, { params, createProcessor: rec.factory });
  const startMs = 2000;
  const rampMs = 3000;
  const pub = await wrtcSoundPublish(t, whipUrl, { kind: 'ramp', startMs, rampMs });
  t.equal(pub.status, 201, 'publisher accepted');
  const rampStart = pub.audioStart + startMs;
  const rampEnd = rampStart + rampMs;
  await until('frames past the ramp', () => rec.seen.at(-1)?.capturedAt ?? 0, (at) => at > rampEnd + 300, 30_000);

  // From 200 ms into the ramp (the smoothing has caught up with its start) to its end.
  const during = rec.seen.filter((f) => f.capturedAt >= rampStart + 200 && f.capturedAt <= rampEnd).map((f) => f.delta as number);
  t.ok(during.length > 50, `${during.length} frames during the ramp`);
  const dips = during.filter((d, i) => i > 0 && d < (during[i - 1] as number) - 1e-9);
  t.same(dips, [], 'delta never falls while the volume rises');
  const first = during[0] as number;
  const lastDelta = during.at(-1) as number;
  // −50 → −5 dBFS is 0.17 → 0.92 of the level scale: delta from ≈ 0.32 to ≈ 0.84.
  t.ok(first < 0.4 && lastDelta > 0.75, `delta rose from ${first.toFixed(3)} to ${lastDelta.toFixed(3)}`);
  const status = node.getStream(STREAM_ID)?.status();
  const m = status?.audioMappings?.[0];
  t.ok(m && typeof m.featureValue === 'number' && typeof m.value === 'number', `status shows feature ${m?.featureValue} → delta ${m?.value}`);

  // The publisher's Opus decoder (one GStreamer pipeline) runs only while a mapping takes its audio.
  const gst = loadGst();
  const withDecoder = gst.livePipelines();
  const plan = patchStream(node, STREAM_ID, { audio_mappings: [] })?.plan;
  t.equal(plan?.mode, 'hot', 'the plan the node reports: hot');
  t.ok(plan?.hot.includes('audio_mappings'), `with audio_mappings among its hot keys (${plan?.hot.join(', ')}): the processor never sees them`);
  await until('delta back to the stream’s own', () => rec.seen.at(-1)?.delta, (d) => d === 0.5, 10_000, 50);
  t.pass('clearing the mapping gives the processor the stream’s own delta again');
  await until('the decoder gone', () => gst.livePipelines(), (n) => n === withDecoder - 1, 10_000, 50);
  t.pass('clearing the mappings stops the decoder');
  patchStream(node, STREAM_ID, { audio_mappings: [{ source: 'soundtrack', feature: 'rms', param: 'delta', range: [0.2, 0.9], smoothing_ms: 0 }] });
  await new Promise((r) => setImmediate(r));
  t.equal(gst.livePipelines(), withDecoder - 1, 'a soundtrack mapping decodes nothing');
  patchStream(node, STREAM_ID, { audio_mappings: params.audio_mappings ?? [] });
  await until('the decoder back', () => gst.livePipelines(), (n) => n === withDecoder, 10_000, 50);
  t.pass('a publisher mapping starts it again');
});
