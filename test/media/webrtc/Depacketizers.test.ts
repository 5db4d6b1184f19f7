/**
 * The ingest depacketizers against damaged and hostile packets: every kind of damage drops the
 * frame being built (and says so), never throws, never hands a half-built frame to the decoder,
 * and the next clean frame comes through.
 */
import t from 'tap';
import { H264Depacketizer, type RtpIn } from '../../../media/webrtc/H264Depacketizer.ts';
import { Vp8Depacketizer, vp8DescriptorBytes } from '../../../media/webrtc/Vp8Depacketizer.ts';

const SPS = Buffer.from([0x67, 0x42, 0xe0, 0x1f, 0xda]);
const PPS = Buffer.from([0x68, 0xce, 0x3c, 0x80]);
const IDR = Buffer.concat([Buffer.from([0x65]), Buffer.alloc(2500, 0x11)]);
const P = Buffer.from([0x41, 0x9a, 0x22, 0x33]);

let seq = 100;
const pkt = (payload: Buffer, timestamp: number, marker: boolean, sequenceNumber = seq++ & 0xffff): RtpIn => ({ sequenceNumber, timestamp, marker, payload });
const stapA = (...nals: Buffer[]) => Buffer.concat([Buffer.from([24]), ...nals.flatMap((n) => [Buffer.from([n.length >> 8, n.length & 0xff]), n])]);
function fuA(nal: Buffer, chunk: number): Buffer[] {
  const out: Buffer[] = [];
  const body = nal.subarray(1);
  for (let off = 0; off < body.length; off += chunk) {
    const end = Math.min(off + chunk, body.length);
    out.push(Buffer.concat([Buffer.from([((nal[0] as number) & 0xe0) | 28, (off === 0 ? 0x80 : 0) | (end === body.length ? 0x40 : 0) | ((nal[0] as number) & 0x1f)]), body.subarray(off, end)]));
  }
  return out;
}
/** A clean key frame: STAP-A(SPS, PPS), then the IDR in FU-A fragments; the last packet has the marker. */
function keyframe(ts: number): RtpIn[] {
  const frags = fuA(IDR, 1000);
  return [pkt(stapA(SPS, PPS), ts, false), ...frags.map((f, i) => pkt(f, ts, i === frags.length - 1))];
}
const annexB = (...nals: Buffer[]) => Buffer.concat(nals.flatMap((n) => [Buffer.from([0, 0, 0, 1]), n]));

function feed(d: H264Depacketizer | Vp8Depacketizer, packets: RtpIn[]) {
  const frames = [];
  let dropped = 0;
  for (const p of packets) {
    const r = d.push(p);
    if (r.frame) frames.push(r.frame);
    if (r.dropped) dropped++;
  }
  return { frames, dropped };
}

t.test('H.264: single NAL, STAP-A and FU-A rebuild the access unit exactly', async (t) => {
  const d = new H264Depacketizer();
  const { frames, dropped } = feed(d, [...keyframe(3000), pkt(P, 6000, true)]);
  t.equal(dropped, 0);
  t.equal(frames.length, 2);
  t.same(frames[0]?.data, annexB(SPS, PPS, IDR));
  t.ok(frames[0]?.keyframe);
  t.same(frames[1]?.data, annexB(P));
  t.notOk(frames[1]?.keyframe);
});

t.test('H.264: each kind of damage drops the frame and the next clean frame comes through', async (t) => {
  const cases: [string, (ts: number) => RtpIn[]][] = [
    ['a sequence gap inside the frame', (ts) => { const k = keyframe(ts); seq++; return [...k.slice(0, 2), ...k.slice(2).map((p) => ({ ...p, sequenceNumber: (p.sequenceNumber + 1) & 0xffff }))]; }],
    ['a fragment whose start was lost', (ts) => fuA(IDR, 1000).slice(1).map((f, i, a) => pkt(f, ts, i === a.length - 1))],
    ['a STAP-A whose size overruns the packet', (ts) => [pkt(Buffer.from([24, 0x10, 0x00, 0x67, 0x42]), ts, true)]],
    ['a STAP-A with a zero-length NAL', (ts) => [pkt(Buffer.from([24, 0, 0, 0, 2, 0x41, 0x9a]), ts, true)]],
    ['a truncated FU-A header', (ts) => [pkt(Buffer.from([28]), ts, true)]],
    ['an empty payload', (ts) => [pkt(Buffer.alloc(0), ts, true)]],
    ['a reserved NAL type (0, 30, 31)', (ts) => [pkt(Buffer.from([0x1e, 1, 2]), ts, true)]],
    ['interleaved-mode types (STAP-B, MTAP, FU-B)', (ts) => [pkt(Buffer.from([25, 0, 0, 0, 1, 0x41]), ts, true)]],
    ['a fragmented NAL that never ends before the marker', (ts) => [pkt(fuA(IDR, 1000)[0] as Buffer, ts, true)]],
    ['a lost marker (next timestamp starts)', (ts) => [pkt(P, ts, false)]],
  ];
  let ts = 90_000;
  for (const [what, damaged] of cases) {
    const d = new H264Depacketizer();
    const bad = feed(d, damaged((ts += 3000)));
    const good = feed(d, keyframe((ts += 3000)));
    const frames = [...bad.frames, ...good.frames];
    t.ok(bad.dropped + good.dropped >= 1, `${what}: reported as dropped`);
    t.ok(frames.every((f) => f.data.equals(annexB(SPS, PPS, IDR))), `${what}: no half-built frame comes out`);
    // The lost-marker and gap cases also spoil the clean frame that follows; one more is whole.
    const next = feed(d, keyframe((ts += 3000)));
    t.equal([...good.frames, ...next.frames].length >= 1, true, `${what}: a later clean frame comes through`);
  }
});

t.test('H.264: an access unit larger than maxBytes is dropped', async (t) => {
  const d = new H264Depacketizer({ maxBytes: 2000 });
  const { frames, dropped } = feed(d, keyframe(3000));
  t.equal(frames.length, 0);
  t.equal(dropped, 1);
  t.equal(d.dropped, 1);
});

t.test('H.264: 5,000 random payloads never throw and only well-formed frames come out', async (t) => {
  let state = 12345;
  const rand = () => ((state = (state * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const d = new H264Depacketizer({ maxBytes: 64 * 1024 });
  let frames = 0;
  for (let i = 0; i < 5000; i++) {
    const len = Math.floor(rand() * 40);
    const payload = Buffer.from(Array.from({ length: len }, () => Math.floor(rand() * 256)));
    const r = d.push(pkt(payload, Math.floor(i / 3) * 3000, rand() < 0.3, rand() < 0.1 ? Math.floor(rand() * 65536) : seq++ & 0xffff));
    if (r.frame) {
      frames++;
      t.equal(r.frame.data.subarray(0, 4).toString('hex'), '00000001', 'frames start with a start code');
    }
  }
  t.pass(`survived; ${frames} frames, ${d.dropped} dropped`);
});

const vp8 = (s: boolean, body: Buffer, ext = true) => Buffer.concat([Buffer.from(ext ? [0x80 | (s ? 0x10 : 0), 0x80, 0x80, 0x05] : [s ? 0x10 : 0]), body]);

t.test('VP8: descriptor variants are stripped and frames end at the marker', async (t) => {
  t.equal(vp8DescriptorBytes(Buffer.from([0x10])), 1);
  t.equal(vp8DescriptorBytes(Buffer.from([0x90, 0x80, 0x05])), 3, '7-bit picture id');
  t.equal(vp8DescriptorBytes(Buffer.from([0x90, 0x80, 0x80, 0x05])), 4, '15-bit picture id');
  t.equal(vp8DescriptorBytes(Buffer.from([0x90, 0xf0, 0x80, 0x05, 0x01, 0x02])), 6, 'I, L and T/K');
  t.equal(vp8DescriptorBytes(Buffer.from([0x90, 0xf0, 0x80])), -1, 'an overrunning descriptor is refused');
  const d = new Vp8Depacketizer();
  const key = Buffer.from([0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a]);
  const { frames } = feed(d, [pkt(vp8(true, key.subarray(0, 3)), 3000, false), pkt(vp8(false, key.subarray(3)), 3000, true), pkt(vp8(true, Buffer.from([0x31, 0x22]), false), 6000, true)]);
  t.equal(frames.length, 2);
  t.same(frames[0]?.data, key);
  t.ok(frames[0]?.keyframe, 'P bit 0 → key frame');
  t.notOk(frames[1]?.keyframe);
});

t.test('VP8: damage drops the frame; random payloads never throw', async (t) => {
  const d = new Vp8Depacketizer();
  t.ok(feed(d, [pkt(vp8(false, Buffer.from([1, 2])), 3000, true)]).dropped >= 1, 'data before a frame start');
  t.ok(feed(d, [pkt(Buffer.from([0x90, 0xf0]), 6000, true)]).dropped >= 1, 'a truncated descriptor');
  t.ok(feed(d, [pkt(vp8(true, Buffer.from([0x10])), 9000, false), pkt(vp8(true, Buffer.from([0x10])), 9000, true)]).dropped >= 1, 'two frame starts in one frame');
  const ok = feed(d, [pkt(vp8(true, Buffer.from([0x10, 1])), 12000, true)]);
  t.equal(ok.frames.length, 1, 'the next clean frame comes through');
  let state = 99;
  const rand = () => ((state = (state * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  for (let i = 0; i < 5000; i++) {
    const payload = Buffer.from(Array.from({ length: Math.floor(rand() * 12) }, () => Math.floor(rand() * 256)));
    d.push(pkt(payload, Math.floor(i / 2) * 3000, rand() < 0.5));
  }
  t.pass(`survived; ${d.dropped} dropped`);
});
