/**
 * Decode bin (real GStreamer): our own H.264 RTP (EncoderBin → H264Packetizer) goes in, RGB24
 * frames of the stream size come out with the picture's colour preserved.
 */
import pino from 'pino';
import t from 'tap';
import { RtpPacket } from 'werift';
import { DecoderBin } from '../../media/DecoderBin.ts';
import { EncoderBin } from '../../media/EncoderBin.ts';
import { H264Packetizer } from '../../media/H264Packetizer.ts';

t.test('H.264 RTP in → RGB24 frames at the configured size, colour preserved', { timeout: 30_000 }, async (t) => {
  const logger = pino({ level: 'silent' });
  const frames: Buffer[] = [];
  const dec = new DecoderBin({ codec: 'H264', payloadType: 96, width: 96, height: 64, threads: 1, logger, onFrame: (f) => frames.push(f) });
  t.teardown(() => dec.close());
  const pk = new H264Packetizer({ ssrc: 1234, payloadType: 96, maxPayload: 300 });
  let ts = 0;
  let maxPayload = 0;
  const enc = new EncoderBin({
    width: 160, height: 120, fps: 30, bitrateKbps: 800, keyIntFrames: 30, keyUnitMinIntervalMs: 100, logger,
    onAccessUnit: (au) => {
      ts += 3000;
      for (const p of pk.packetize(au.nals, ts)) {
        maxPayload = Math.max(maxPayload, RtpPacket.deSerialize(p).payload.length);
        dec.push(p);
      }
    },
  });
  t.teardown(() => enc.close());
  const rgb = new Uint8Array(160 * 120 * 3);
  for (let i = 0; i < rgb.length; i += 3) {
    rgb[i] = 200;
    rgb[i + 1] = 40;
    rgb[i + 2] = 90;
  }
  for (let i = 0; i < 20; i++) {
    enc.push({ width: 160, height: 120, data: rgb, ptsMs: i });
    await new Promise((r) => setTimeout(r, 33));
  }
  await new Promise((r) => setTimeout(r, 200));
  t.ok(maxPayload > 0 && maxPayload <= 300, `FU-A fragments keep payloads within 300 bytes (max ${maxPayload})`);
  t.ok(frames.length >= 10, `decoded ${frames.length} frames`);
  const last = frames[frames.length - 1] as Buffer;
  t.equal(last.length, 96 * 64 * 3, 'scaled to 96x64 RGB24');
  const mid = (32 * 96 + 48) * 3;
  t.ok(Math.abs((last[mid] ?? 0) - 200) < 12 && Math.abs((last[mid + 1] ?? 0) - 40) < 12 && Math.abs((last[mid + 2] ?? 0) - 90) < 12, `RGB order kept (${last[mid]},${last[mid + 1]},${last[mid + 2]})`);
  dec.close();
  t.throws(() => dec.push(Buffer.alloc(12)), /closed/);
});
