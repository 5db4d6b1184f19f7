/**
 * The stream's one encoder (real GStreamer x264): constrained-baseline access units with SPS/PPS
 * before every IDR, and forced key units on request, coalesced by the minimum interval.
 */
import pino from 'pino';
import t from 'tap';
import { EncoderBin, type EncodedAccessUnit } from '../../media/EncoderBin.ts';
import { NAL_IDR, NAL_PPS, NAL_SPS, nalType as type } from '../../media/H264Nal.ts';

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
