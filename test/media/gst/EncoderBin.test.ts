/**
 * The stream's one encoder (real GStreamer x264): constrained-baseline access units with SPS/PPS
 * before every IDR, and forced key units on request, coalesced by the minimum interval.
 */
import { execFileSync } from 'node:child_process';
import pino from 'pino';
import t from 'tap';
import { EncoderBin, type EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';
import { NAL_IDR, NAL_PPS, NAL_SPS, nalType as type } from '../../../media/H264Nal.ts';

t.test('encodes RGB frames to constrained-baseline AUs and forces a key unit on request (coalesced)', { timeout: 30_000 }, async (t) => {
  const aus: EncodedAccessUnit[] = [];
  const enc = new EncoderBin({ width: 128, height: 128, fps: 30, bitrateKbps: 500, keyIntFrames: 300, keyUnitMinIntervalMs: 400, logger: pino({ level: 'silent' }), onAccessUnit: (au) => aus.push(au) });
  t.teardown(() => enc.close());
  const data = new Uint8Array(128 * 128 * 3);
  const push = async (n: number) => {
    for (let i = 0; i < n; i++) {
      data.fill((aus.length * 7) & 0xff);
      enc.push({ width: 128, height: 128, data, ptsMs: i });
      await new Promise((r) => setTimeout(r, 33));
    }
  };
  await push(10);
  t.ok(aus.length >= 5, `got ${aus.length} access units`);
  const first = aus[0] as EncodedAccessUnit;
  t.ok(first.keyframe, 'the first AU is an IDR');
  t.ok(first.nals.some((n) => type(n) === NAL_SPS) && first.nals.some((n) => type(n) === NAL_PPS), 'SPS and PPS precede it');
  t.equal(first.nals.find((n) => type(n) === NAL_SPS)?.[1], 0x42, 'SPS profile_idc 66 (baseline)');
  t.ok(((first.nals.find((n) => type(n) === NAL_SPS)?.[2] ?? 0) & 0x40) !== 0, 'constraint_set1 (constrained baseline)');
  const before = aus.filter((a) => a.keyframe).length;
  enc.requestKeyUnit();
  enc.requestKeyUnit(); // within keyUnitMinIntervalMs: merged into a deferred one
  await push(25);
  const keys = aus.filter((a) => a.keyframe).length - before;
  t.equal(enc.keyUnitsForced, 2, 'two requests → one immediate + one deferred key unit');
  t.ok(keys >= 2, `${keys} new IDRs after the requests (key-int-max is 300)`);
  t.ok(aus.filter((a) => a.keyframe).every((a) => a.nals.some((n) => type(n) === NAL_IDR)), 'keyframe flag matches an IDR NAL');
  t.throws(() => enc.push({ width: 64, height: 64, data: new Uint8Array(64 * 64 * 3), ptsMs: 0 }), /does not match/, 'wrong frame size is refused');
  enc.close();
  enc.close();
  t.throws(() => enc.push({ width: 128, height: 128, data, ptsMs: 0 }), /closed/, 'push after close throws InvalidStateError');
});

t.test('each access unit names the push it encodes, whatever the leaky input dropped', { timeout: 60_000 }, async (t) => {
  const aus: EncodedAccessUnit[] = [];
  let waitFor: { pts: number; resolve: () => void } | undefined;
  const enc = new EncoderBin({
    width: 64, height: 64, fps: 30, bitrateKbps: 800, keyIntFrames: 300, keyUnitMinIntervalMs: 0, logger: pino({ level: 'silent' }),
    onAccessUnit: (au) => {
      aus.push(au);
      if (waitFor && au.pts >= waitFor.pts) waitFor.resolve();
    },
  });
  t.teardown(() => enc.close());
  // Frame i is a flat grey of 20 + 4·i: its decoded brightness says which frame an AU is.
  const pushed: number[] = [];
  const push = (i: number) => {
    const pts = enc.push({ width: 64, height: 64, data: new Uint8Array(64 * 64 * 3).fill(20 + 4 * i), ptsMs: i });
    t.ok(pts > (pushed.at(-1) ?? -1), `frame ${i}: a PTS after the last one`);
    pushed.push(pts);
  };
  // 40 frames in bursts of 10 pushed at once: the 2-frame leaky input drops some.
  for (let b = 0; b < 4; b++) {
    for (let i = 0; i < 10; i++) push(b * 10 + i);
    await new Promise((r) => setImmediate(r));
  }
  // One more frame on its own: once its AU is out, every earlier frame came out or was dropped.
  push(40);
  await new Promise<void>((resolve) => {
    waitFor = { pts: pushed[40]!, resolve };
    if (aus.some((a) => a.pts >= pushed[40]!)) resolve();
  });
  const idx = aus.map((a) => pushed.indexOf(a.pts));
  t.ok(idx.every((i) => i >= 0), 'every AU carries the PTS of a pushed frame');
  t.ok(idx.every((i, k) => k === 0 || i > idx[k - 1]!), 'in push order, none twice');
  t.ok(aus.length < pushed.length, `the burst made the input drop frames (${aus.length} AUs for ${pushed.length} pushes)`);
  t.ok(aus.every((a) => a.encodeMs >= 0), 'each AU knows its own frame’s encode time');
  // Decode the AUs as one H.264 stream and read each picture's brightness.
  const annexB = Buffer.concat(aus.flatMap((a) => a.nals.flatMap((n) => [Buffer.from([0, 0, 0, 1]), Buffer.from(n)])));
  const gray = execFileSync('ffmpeg', ['-v', 'error', '-f', 'h264', '-i', 'pipe:0', '-fps_mode', 'passthrough', '-f', 'rawvideo', '-pix_fmt', 'gray', 'pipe:1'], { input: annexB, maxBuffer: 64 << 20 });
  const n = gray.length / (64 * 64);
  t.equal(n, aus.length, 'one decoded picture per AU');
  const luma = Array.from({ length: n }, (_, k) => gray.subarray(k * 4096, (k + 1) * 4096).reduce((s, v) => s + v, 0) / 4096);
  // Brightness is linear in the frame index: fit it over the AUs, and each AU must sit on the line
  // within a fraction of one frame's step (a picture one frame off would be a whole step away).
  const mx = idx.reduce((s, v) => s + v, 0) / n;
  const my = luma.reduce((s, v) => s + v, 0) / n;
  const slope = idx.reduce((s, v, k) => s + (v - mx) * (luma[k]! - my), 0) / idx.reduce((s, v) => s + (v - mx) ** 2, 0);
  const worst = Math.max(...luma.map((y, k) => Math.abs(y - (my + slope * (idx[k]! - mx)))));
  t.ok(slope > 2, `brightness grows with the frame index (${slope.toFixed(2)} levels per frame)`);
  t.ok(worst < slope / 3, `each AU decodes to the frame its PTS names (worst ${worst.toFixed(2)} levels off, a frame is ${slope.toFixed(2)})`);
});
