/**
 * The VP8 output branch's encoder and packetizer (real GStreamer): RGB frames → vp8enc → our RFC
 * 7741 packets → GStreamer's own rtpvp8depay + vp8dec (an independent depayloader) give the picture
 * back, and so do our Vp8Depacketizer + DecoderBin (the ingest path); forced key frames are
 * coalesced like the H.264 encoder's.
 */
import pino from 'pino';
import t from 'tap';
import { RtpPacket } from 'werift';
import { AppPipeline } from '../../../media/gst/AppPipeline.ts';
import { DecoderBin } from '../../../media/gst/DecoderBin.ts';
import { Vp8Depacketizer } from '../../../media/webrtc/Vp8Depacketizer.ts';
import { Vp8EncoderBin, type EncodedVp8Frame } from '../../../media/gst/Vp8EncoderBin.ts';
import { Vp8Packetizer } from '../../../media/webrtc/Vp8Packetizer.ts';
import { until } from '../../helpers/until.ts';

const logger = pino({ level: 'silent' });

function solid(w: number, h: number, [r, g, b]: [number, number, number]): Uint8Array {
  const rgb = new Uint8Array(w * h * 3);
  for (let i = 0; i < rgb.length; i += 3) {
    rgb[i] = r;
    rgb[i + 1] = g;
    rgb[i + 2] = b;
  }
  return rgb;
}

const tick = () => new Promise((r) => setTimeout(r, 33));

t.test('VP8 frames packetized per RFC 7741 decode back (GStreamer rtpvp8depay, and our depacketizer) at the size and colour sent', { timeout: 30_000 }, async (t) => {
  const frames: Buffer[] = [];
  const oracle = new AppPipeline({
    launch:
      'appsrc name=src is-live=true format=time do-timestamp=true caps="application/x-rtp,media=(string)video,clock-rate=(int)90000,encoding-name=(string)VP8,payload=(int)97" ' +
      '! rtpvp8depay wait-for-keyframe=true ! vp8dec ! videoconvert ! videoscale ! video/x-raw,format=RGB,width=96,height=64 ! appsink name=sink sync=false',
    what: 'rtpvp8depay oracle',
    logger,
    onSample: (f) => frames.push(f),
  });
  t.teardown(() => oracle.close());
  const ours: Buffer[] = [];
  const dec = new DecoderBin({ codec: 'VP8', width: 96, height: 64, threads: 1, logger, onFrame: (f) => ours.push(f) });
  t.teardown(() => dec.close());
  const depack = new Vp8Depacketizer();
  const pk = new Vp8Packetizer({ ssrc: 99, payloadType: 97, maxPayload: 300 });
  const packets: RtpPacket[] = [];
  let ts = 0;
  const out: EncodedVp8Frame[] = [];
  const enc = new Vp8EncoderBin({
    width: 160, height: 120, fps: 30, bitrateKbps: 800, keyIntFrames: 30, cpuUsed: 16, keyUnitMinIntervalMs: 100, logger,
    onFrame: (f) => {
      out.push(f);
      ts += 3000;
      for (const p of pk.packetize(f.data, ts)) {
        const packet = RtpPacket.deSerialize(p);
        packets.push(packet);
        oracle.push(p);
        const { frame } = depack.push({ sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp, marker: packet.header.marker, payload: packet.payload });
        if (frame) {
          t.same(frame.data, f.data, 'our depacketizer gives back the encoded frame byte for byte');
          dec.push(frame.data);
        }
      }
    },
  });
  t.teardown(() => enc.close());
  const rgb = solid(160, 120, [200, 40, 90]);
  for (let i = 0; i < 20; i++) {
    enc.push({ width: 160, height: 120, data: rgb, ptsMs: i });
    await tick();
  }
  // Encoder and decoders run in their own threads: wait for their output, not a fixed time.
  await until('10 encoded frames', () => out.length, (n) => n >= 10, 10_000, 5);
  await until('10 decoded frames on both paths', () => Math.min(frames.length, ours.length), (n) => n >= 10, 10_000, 5);
  t.ok(out.length >= 10, `encoded ${out.length} frames`);
  t.ok(out[0]?.keyframe, 'the first frame is a key frame');
  t.ok(out.slice(1).some((f) => !f.keyframe), 'later frames are inter frames');
  t.ok(packets.every((p) => p.payload.length <= 300), 'payloads stay within maxPayload');
  const first = packets[0] as RtpPacket;
  t.equal(first.payload[0], 0x90, 'first packet: X and S set, PID 0');
  t.equal((first.payload[1] ?? 0) & 0x80, 0x80, 'I: picture id present');
  t.equal((first.payload[2] ?? 0) & 0x80, 0x80, 'M: 15-bit picture id');
  const byTs = new Map<number, RtpPacket[]>();
  for (const p of packets) byTs.set(p.header.timestamp, [...(byTs.get(p.header.timestamp) ?? []), p]);
  t.ok([...byTs.values()].every((ps) => ps.filter((p) => p.header.marker).length === 1 && ps[ps.length - 1]?.header.marker), 'marker only on the last packet of each frame');
  const pid = (p: RtpPacket) => (((p.payload[2] ?? 0) & 0x7f) << 8) | (p.payload[3] ?? 0);
  const firsts = packets.filter((p) => ((p.payload[0] ?? 0) & 0x10) !== 0);
  t.equal(firsts.length, out.length, 'one S packet per frame');
  t.ok(firsts.every((p, i) => i === 0 || pid(p) === ((pid(firsts[i - 1] as RtpPacket) + 1) & 0x7fff)), 'picture id counts frames');

  t.ok(frames.length >= 10, `decoded ${frames.length} frames`);
  const last = frames[frames.length - 1] as Buffer;
  t.equal(last.length, 96 * 64 * 3, 'scaled to 96x64 RGB24');
  const mid = (32 * 96 + 48) * 3;
  t.ok(Math.abs((last[mid] ?? 0) - 200) < 12 && Math.abs((last[mid + 1] ?? 0) - 40) < 12 && Math.abs((last[mid + 2] ?? 0) - 90) < 12, `colour kept (${last[mid]},${last[mid + 1]},${last[mid + 2]})`);
  t.ok(ours.length >= 10, `the ingest path decoded ${ours.length} frames`);
  const mine = ours[ours.length - 1] as Buffer;
  t.ok(Math.abs((mine[mid] ?? 0) - 200) < 12 && Math.abs((mine[mid + 1] ?? 0) - 40) < 12 && Math.abs((mine[mid + 2] ?? 0) - 90) < 12, `colour kept through the ingest path (${mine[mid]},${mine[mid + 1]},${mine[mid + 2]})`);
});

t.test('forces a key frame on request, coalescing requests inside the minimum interval', { timeout: 30_000 }, async (t) => {
  const out: EncodedVp8Frame[] = [];
  const enc = new Vp8EncoderBin({ width: 128, height: 128, fps: 30, bitrateKbps: 500, keyIntFrames: 300, cpuUsed: 16, keyUnitMinIntervalMs: 400, logger, onFrame: (f) => out.push(f) });
  t.teardown(() => enc.close());
  const data = new Uint8Array(128 * 128 * 3);
  const push = async (n: number) => {
    for (let i = 0; i < n; i++) {
      data.fill((out.length * 7) & 0xff);
      enc.push({ width: 128, height: 128, data, ptsMs: i });
      await tick();
    }
  };
  await push(10);
  const before = out.filter((f) => f.keyframe).length;
  t.equal(before, 1, 'only the first frame is a key frame (keyframe-max-dist 300)');
  enc.requestKeyUnit();
  enc.requestKeyUnit(); // within keyUnitMinIntervalMs: merged into a deferred one
  await push(25);
  t.equal(enc.keyUnitsForced, 2, 'two requests → one immediate + one deferred key unit');
  t.ok(out.filter((f) => f.keyframe).length - before >= 2, 'vp8enc produced the forced key frames');
  t.throws(() => enc.push({ width: 64, height: 64, data: new Uint8Array(64 * 64 * 3), ptsMs: 0 }), /does not match/, 'wrong frame size is refused');
  enc.close();
  enc.close();
  t.ok(enc.closed, 'close() is idempotent');
  t.throws(() => enc.push({ width: 128, height: 128, data, ptsMs: 0 }), /closed/, 'push after close throws InvalidStateError');
});
