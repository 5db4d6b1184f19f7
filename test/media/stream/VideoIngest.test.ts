/**
 * VideoIngest with a real decoder (GStreamer): a decoder that takes frames and gives none out is
 * rebuilt after `decoderStallMs`, and the rebuilt one decodes the publisher's next key frame on;
 * a publisher that is merely slow (a frame every few hundred ms, each decoded) is not a stall; a
 * decoder prepared when the publisher attaches takes its first key frame; a decoded frame carries
 * the capture time of the very frame it was decoded from, also when some are dropped on the way.
 */
import pino from 'pino';
import t from 'tap';
import { EncoderBin, type EncodedAccessUnit } from '../../../media/gst/EncoderBin.ts';
import { readAccessUnits, stampedH264 } from '../../helpers/h264Source.ts';
import { DEFAULT_MEDIA_SETTINGS } from '../../../media/settings.ts';
import { VideoIngest } from '../../../media/stream/VideoIngest.ts';
import type { WhipSession } from '../../../media/webrtc/WhipSession.ts';

const logger = pino({ level: 'silent' });
const W = 96;
const H = 64;

/** `n` real access units (the first an IDR) of a moving gradient, as Annex B buffers. */
async function encode(n: number): Promise<EncodedAccessUnit[]> {
  const aus: EncodedAccessUnit[] = [];
  const enc = new EncoderBin({ width: W, height: H, fps: 30, bitrateKbps: 300, keyIntFrames: 300, keyUnitMinIntervalMs: 0, logger, onAccessUnit: (au) => aus.push(au) });
  try {
    const data = new Uint8Array(W * H * 3);
    // Frames until n access units came out: the encoder's input is leaky (2 frames), and on a busy
    // machine it drops some (bounded: n + 60 frames).
    for (let i = 0; i < n + 60 && aus.length < n; i++) {
      for (let p = 0; p < data.length; p++) data[p] = (p + i * 5) & 0xff;
      enc.push({ width: W, height: H, data, ptsMs: i * 33 });
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    enc.close();
  }
  if (aus.length < n) throw new Error(`the encoder gave ${aus.length} of ${n} access units`);
  return aus.slice(0, n);
}

const annexB = (au: EncodedAccessUnit) => Buffer.concat(au.nals.flatMap((n) => [Buffer.from([0, 0, 0, 1]), Buffer.from(n)]));

/** What VideoIngest asks of its publisher's session. */
function fakeSession() {
  const asked: string[] = [];
  const session = { codec: 'H264', requestKeyframe: (why: string) => asked.push(why) } as unknown as WhipSession;
  return { session, asked };
}

function ingest(stallMs: number) {
  const errors: string[] = [];
  let decoded = 0;
  const vi = new VideoIngest({
    streamId: 'str_test',
    settings: { ...DEFAULT_MEDIA_SETTINGS, decoderStallMs: stallMs },
    size: () => ({ width: W, height: H }),
    format: () => 'I420',
    onFrame: () => decoded++,
    onError: (m) => errors.push(m),
    logger,
  });
  return { vi, errors, decoded: () => decoded };
}

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a decoder that takes frames and gives none out is rebuilt; the new one decodes from the next key frame', { timeout: 60_000 }, async (t) => {
  const aus = await encode(30);
  const { vi, errors, decoded } = ingest(400);
  t.teardown(() => vi.close());
  const { session, asked } = fakeSession();
  // Access units that parse but hold no picture (an access unit delimiter alone): a decoder that
  // takes input and gives nothing back, as the stuck one did.
  const empty = { data: Buffer.from([0, 0, 0, 1, 0x09, 0xf0]), keyframe: true, timestamp: 0 };
  for (let i = 0; i < 30 && vi.restarts === 0; i++) {
    vi.push(session, { ...empty, timestamp: i * 3000 });
    await tick(33);
  }
  t.equal(vi.restarts, 1, 'rebuilt once');
  t.equal(decoded(), 0, 'nothing was decoded before');
  t.match(errors, [/^decoder: no frame out for \d+ ms$/], 'reported as the stream error');
  t.ok(asked.includes('decoder'), 'and a key frame asked for');
  for (const [i, au] of aus.entries()) {
    vi.push(session, { data: annexB(au), keyframe: au.keyframe, timestamp: 100_000 + i * 3000 });
    await tick(33);
  }
  for (let i = 0; i < 100 && decoded() < 25; i++) await tick(20);
  t.ok(decoded() >= 25, `the new decoder decodes (${decoded()} of 30 frames)`);
  t.equal(vi.restarts, 1, 'and is not rebuilt again');
});

t.test('a slow publisher is not a stalled decoder', { timeout: 60_000 }, async (t) => {
  const aus = await encode(6);
  const { vi, errors, decoded } = ingest(200);
  t.teardown(() => vi.close());
  const { session } = fakeSession();
  for (const [i, au] of aus.entries()) {
    vi.push(session, { data: annexB(au), keyframe: au.keyframe, timestamp: i * 3000 });
    const before = decoded();
    for (let k = 0; k < 100 && decoded() === before; k++) await tick(10);
    await tick(300); // longer than decoderStallMs between frames
  }
  t.equal(decoded(), 6, 'every frame decoded');
  t.equal(vi.restarts, 0, 'no rebuild');
  t.same(errors, []);
});

t.test('prepare builds the decoder before the first frame; the first key frame decodes on it', { timeout: 60_000 }, async (t) => {
  const aus = await encode(5);
  const { vi, errors, decoded } = ingest(2000);
  t.teardown(() => vi.close());
  const { session } = fakeSession();
  t.equal(vi.format, null, 'no decoder before the publisher attached');
  vi.prepare(session);
  t.equal(vi.format, 'I420', 'a decoder waits for the first frame');
  for (const [i, au] of aus.entries()) vi.push(session, { data: annexB(au), keyframe: au.keyframe, timestamp: i * 3000 });
  for (let i = 0; i < 200 && decoded() < 1; i++) await tick(10);
  t.ok(decoded() >= 1, `the first key frame decodes (${decoded()} frames)`);
  t.equal(vi.restarts, 0, 'on the decoder prepared, not a rebuilt one');
  t.same(errors, []);
});

t.test('a decoded frame carries the capture time of the frame it was decoded from, also when frames are dropped on the way', { timeout: 60_000 }, async (t) => {
  // 128² pictures whose 4×4 blocks (32 px) carry a counter: picture i shows i + 1, key frame every 30.
  const S = 128;
  const B = S / 4;
  const aus = readAccessUnits(await stampedH264({ size: S, frames: 90, gop: 30, noise: 10 }));
  const counter = (y: Buffer) => {
    let n = 0;
    for (let i = 0; i < 16; i++) if ((y[(Math.floor(i / 4) * B + B / 2) * S + (i % 4) * B + B / 2] ?? 0) > 128) n |= 1 << i;
    return n;
  };
  const got: { n: number; ptsMs: number }[] = [];
  const vi = new VideoIngest({
    streamId: 'str_test',
    settings: { ...DEFAULT_MEDIA_SETTINGS, decoderStallMs: 10_000 },
    size: () => ({ width: S, height: S }),
    format: () => 'I420',
    onFrame: (f) => got.push({ n: counter(f.data as Buffer), ptsMs: f.ptsMs }),
    onError: (m) => t.fail(m),
    logger,
  });
  t.teardown(() => vi.close());
  const { session } = fakeSession();
  // A frame every 33 ms from a thread that is busy in between and takes decoded frames only every
  // sixth: the decoder hands on only the newest of such a backlog, as on a busy node.
  for (const [i, au] of aus.entries()) {
    vi.push(session, { data: au, keyframe: i % 30 === 0, timestamp: i * 3000 });
    const until = performance.now() + 33;
    while (performance.now() < until); // a busy JS thread, on purpose
    if (i % 6 === 5) await tick(20);
  }
  let seen = -1;
  for (let i = 0; i < 100 && got.length !== seen; i++) {
    seen = got.length;
    await tick(100);
  }
  const first = got[0];
  t.ok(first && got.length >= 10 && got.length < aus.length, `${got.length} of ${aus.length} pictures came out: some were dropped`);
  // Picture n was sent with RTP time (n − 1) × 3000 (90 kHz): its ptsMs must be the first's plus (n − first.n) × 33.3 ms.
  const off = got.filter((g) => Math.abs(g.ptsMs - (first?.ptsMs ?? 0) - ((g.n - (first?.n ?? 0)) * 1000) / 30) > 1);
  t.same(off.map((g) => `#${g.n} at ${(g.ptsMs - (first?.ptsMs ?? 0)).toFixed(1)} ms`), [], 'every picture has its own capture time');
});
