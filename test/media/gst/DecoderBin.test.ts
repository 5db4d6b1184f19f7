/**
 * Decode bin (real GStreamer) on the ingest path: our H.264 RTP (EncoderBin → H264Packetizer with
 * FU-A fragments) goes through H264Depacketizer, which must give back the encoder's access units
 * byte for byte, and the decoder turns them into frames of the stream size with the picture's
 * colour preserved. `configure` changes layout and size in place, without a key frame. A picture
 * of another shape is letterboxed into the stream size, never stretched.
 */
import pino from 'pino';
import t from 'tap';
import { RtpPacket } from 'werift';
import { DecoderBin } from '../../../media/gst/DecoderBin.ts';
import { EncoderBin, type EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';
import { H264Depacketizer } from '../../../media/webrtc/H264Depacketizer.ts';
import { splitAnnexB } from '../../../media/H264Nal.ts';
import { H264Packetizer } from '../../../media/webrtc/H264Packetizer.ts';
import { readAccessUnits, stampedH264 } from '../../helpers/h264Source.ts';
import { until } from '../../helpers/until.ts';

const logger = pino({ level: 'silent' });
const tick = () => new Promise((r) => setTimeout(r, 33));

function solid(w: number, h: number, [r, g, b]: [number, number, number]): Uint8Array {
  const rgb = new Uint8Array(w * h * 3);
  for (let i = 0; i < rgb.length; i += 3) {
    rgb[i] = r;
    rgb[i + 1] = g;
    rgb[i + 2] = b;
  }
  return rgb;
}

/** An encoder whose access units go packetize → depacketize → `onAu`. */
function chain(t: { teardown(fn: () => unknown): void }, onAu: (au: EncodedAccessUnit, rebuilt: Buffer, keyframe: boolean) => void, size = { width: 160, height: 120 }) {
  const pk = new H264Packetizer({ ssrc: 1234, payloadType: 96, maxPayload: 300 });
  const depack = new H264Depacketizer();
  let ts = 0;
  let maxPayload = 0;
  const enc = new EncoderBin({
    width: size.width, height: size.height, fps: 30, bitrateKbps: 800, keyIntFrames: 300, keyUnitMinIntervalMs: 100, logger,
    onAccessUnit: (au) => {
      ts += 3000;
      for (const p of pk.packetize(au.nals, ts)) {
        const packet = RtpPacket.deSerialize(p);
        maxPayload = Math.max(maxPayload, packet.payload.length);
        const { frame } = depack.push({ sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp, marker: packet.header.marker, payload: packet.payload });
        if (frame) onAu(au, frame.data, frame.keyframe);
      }
    },
  });
  t.teardown(() => enc.close());
  return { enc, maxPayload: () => maxPayload, depack };
}

t.test('H.264 RTP → depacketizer → decoder: access units byte for byte, RGB24 frames at the configured size, colour kept', { timeout: 30_000 }, async (t) => {
  const frames: Buffer[] = [];
  const dec = new DecoderBin({ codec: 'H264', width: 96, height: 64, threads: 1, logger, onFrame: (f) => frames.push(f) });
  t.teardown(() => dec.close());
  let same = 0;
  let keyframes = 0;
  const { enc, maxPayload, depack } = chain(t, (au, rebuilt, keyframe) => {
    const a = au.nals.map((n) => Buffer.from(n).toString('hex'));
    const b = splitAnnexB(rebuilt).map((n) => Buffer.from(n).toString('hex'));
    if (a.join() === b.join()) same++;
    if (keyframe !== au.keyframe) t.fail('key frame flag differs');
    if (keyframe) keyframes++;
    dec.push(rebuilt);
  });
  const rgb = solid(160, 120, [200, 40, 90]);
  for (let i = 0; i < 20; i++) {
    enc.push({ width: 160, height: 120, data: rgb, ptsMs: i * 33 });
    // x264 (zerolatency, no B-frames) gives one access unit per frame: wait for it before the next
    // push, so a loaded machine never makes the appsrc drop a frame (a fixed wait counted 18 of 20).
    await until(`access unit ${i + 1} through the depacketizer`, () => depack.frames, (n) => n > i, 10_000, 5);
  }
  t.ok(maxPayload() > 0 && maxPayload() <= 300, `FU-A fragments keep payloads within 300 bytes (max ${maxPayload()})`);
  t.ok(same === 20 && depack.frames === 20, `every rebuilt access unit equals the encoder's (${same} of ${depack.frames})`);
  t.equal(depack.dropped, 0, 'nothing dropped on a clean stream');
  t.equal(keyframes, 1, 'one key frame (the first)');
  // The decoder runs in its own thread and may still be on the last access units.
  await until('10 decoded frames', () => frames.length, (n) => n >= 10, 10_000, 5);
  t.ok(frames.length >= 10, `decoded ${frames.length} frames`);
  const last = frames[frames.length - 1] as Buffer;
  t.equal(last.length, 96 * 64 * 3, 'scaled to 96x64 RGB24');
  const mid = (32 * 96 + 48) * 3;
  t.ok(Math.abs((last[mid] ?? 0) - 200) < 12 && Math.abs((last[mid + 1] ?? 0) - 40) < 12 && Math.abs((last[mid + 2] ?? 0) - 90) < 12, `RGB order kept (${last[mid]},${last[mid + 1]},${last[mid + 2]})`);
  dec.close();
  t.throws(() => dec.push(Buffer.alloc(12)), /closed/);
});

t.test('configure switches to I420 and to a new size in place, with no key frame in between', { timeout: 30_000 }, async (t) => {
  const frames: Buffer[] = [];
  const dec = new DecoderBin({ codec: 'H264', width: 96, height: 64, threads: 1, logger, onFrame: (f) => frames.push(f) });
  t.teardown(() => dec.close());
  let keyframes = 0;
  const { enc } = chain(t, (_au, rebuilt, keyframe) => {
    if (keyframe) keyframes++;
    dec.push(rebuilt);
  });
  const rgb = solid(160, 120, [30, 180, 60]);
  const push = async (n: number) => {
    for (let i = 0; i < n; i++) {
      enc.push({ width: 160, height: 120, data: rgb, ptsMs: i });
      await tick();
    }
  };
  await push(10);
  t.ok(frames.length > 0 && frames.every((f) => f.length === 96 * 64 * 3), 'RGB at 96x64 first');
  dec.configure('I420', 128, 96);
  const before = frames.length;
  await push(15);
  const after = frames.slice(before);
  t.ok(after.some((f) => f.length === (128 * 96 * 3) / 2), `I420 at 128x96 after configure (${after.map((f) => f.length).join(',')})`);
  t.equal(keyframes, 1, 'the decoder needed no new key frame');
  t.equal(dec.format, 'I420');
});

for (const [label, width, height, barRows] of [
  ['16:9', 192, 108, 21],
  ['4:3', 160, 120, 12],
] as const) {
  t.test(`a ${label} camera is letterboxed into a square stream: black bars, picture not stretched`, { timeout: 30_000 }, async (t) => {
    const frames: Buffer[] = [];
    const W = 96;
    const dec = new DecoderBin({ codec: 'H264', width: W, height: W, threads: 1, logger, onFrame: (f) => frames.push(Buffer.from(f)) });
    t.teardown(() => dec.close());
    const { enc } = chain(t, (_au, rebuilt) => dec.push(rebuilt), { width, height });
    const white = solid(width, height, [235, 235, 235]);
    for (let i = 0; i < 15; i++) {
      enc.push({ width, height, data: white, ptsMs: i });
      await tick();
    }
    // The decoder's own output is the signal; poll it (each push is a frame interval apart).
    for (let i = 0; i < 50 && frames.length < 5; i++) await tick();
    const last = frames.at(-1);
    t.equal(last?.length, W * W * 3, 'stream size');
    const rowMean = (y: number) => {
      let sum = 0;
      for (let x = 0; x < W; x++) sum += last?.[(y * W + x) * 3] ?? 0;
      return sum / W;
    };
    // Expected picture height: 96 × height / width; bars split the rest (± a row of scaler rounding).
    for (const y of [0, barRows - 3, W - barRows + 2, W - 1]) t.ok(rowMean(y) < 30, `row ${y} is a black bar (${rowMean(y).toFixed(0)})`);
    for (const y of [barRows + 3, W / 2, W - barRows - 4]) t.ok(rowMean(y) > 200, `row ${y} is picture (${rowMean(y).toFixed(0)})`);
  });
}

/** The frame counter stampedH264 draws (4×4 blocks, bit i at block i, white = 1), read from an RGB24 frame. */
function readStamp(rgb: Buffer, w: number, h: number): number {
  let n = 0;
  for (let i = 0; i < 16; i++) {
    const x = Math.floor(((i % 4) + 0.5) * (w / 4));
    const y = Math.floor((Math.floor(i / 4) + 0.5) * (h / 4));
    const o = (y * w + x) * 3;
    if (((rgb[o] ?? 0) + (rgb[o + 1] ?? 0) + (rgb[o + 2] ?? 0)) / 3 > 128) n |= 1 << i;
  }
  return n;
}

t.test('frames released together (a gap filled after a wait) all come out of the decoder, in order', { timeout: 60_000 }, async (t) => {
  // 30 pictures, one key frame then P-frames, each stamped with its number (h264Source).
  const aus = readAccessUnits(await stampedH264({ size: 256, frames: 30, gop: 30 }));
  const frames: number[] = [];
  const dec = new DecoderBin({ codec: 'H264', width: 256, height: 256, threads: 1, logger, onFrame: (f) => frames.push(readStamp(f, 256, 256)) });
  t.teardown(() => dec.close());
  // Ten frames at their pace, then the reorder window releases twenty at once.
  for (const [i, au] of aus.slice(0, 10).entries()) {
    dec.push(au);
    await until(`frame ${i + 1} decoded`, () => frames.length, (n) => n >= i + 1, 10_000, 5);
  }
  for (const au of aus.slice(10)) dec.push(au);
  // The decoder may not drop any: poll until all came, or until nothing more came for 2 s.
  let last = -1;
  let lastAt = performance.now();
  await until('every frame decoded, or none for 2 s', () => frames.length, (n) => {
    if (n !== last) [last, lastAt] = [n, performance.now()];
    return n >= 30 || performance.now() - lastAt > 2_000;
  }, 20_000, 20);
  t.equal(frames.length, 30, `30 frames decoded (${frames.length}: ${frames.join(',')})`);
  t.same(frames, frames.slice().sort((a, b) => a - b), 'in order');
  t.same(frames, Array.from({ length: frames.length }, (_, i) => i + 1), 'each once, counters 1…30');
});

t.test('a backlog built while Node was busy passes only its newest frames (an overloaded node works on the newest picture)', { timeout: 60_000 }, async (t) => {
  const aus = readAccessUnits(await stampedH264({ size: 256, frames: 30, gop: 30 }));
  const frames: number[] = [];
  const dec = new DecoderBin({ codec: 'H264', width: 256, height: 256, threads: 1, logger, onFrame: (f) => frames.push(readStamp(f, 256, 256)) });
  t.teardown(() => dec.close());
  // The JS thread stays busy while ten frames come 33 ms apart (an overloaded node): the decoder
  // decodes them meanwhile, and they reach Node together once it is free.
  for (const au of aus.slice(0, 10)) {
    dec.push(au);
    const until33 = performance.now() + 33;
    while (performance.now() < until33); // deliberately holding the thread, as a busy node does
  }
  let last = -1;
  let lastAt = performance.now();
  await until('the decoder done, nothing more for 1 s', () => frames.length, (n) => {
    if (n !== last) [last, lastAt] = [n, performance.now()];
    return n > 0 && performance.now() - lastAt > 1_000;
  }, 20_000, 20);
  t.ok(frames.length >= 1 && frames.length <= 4, `only the newest came out (${frames.join(',')})`);
  t.equal(frames[frames.length - 1], 10, 'the newest is the last pushed');
});
