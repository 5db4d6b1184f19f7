/**
 * An abusive publisher: a libdatachannel peer that completes ICE and DTLS like any client, then
 * sends malformed RTCP and truncated or nonsensical H.264 and VP8 RTP (SRTP-protected, so they
 * reach our parsers, not just the network). Meanwhile an OBS-like publisher streams to another
 * stream on the same node. The node must stay up, the victim's output fps must not drop, and the
 * abused streams must not take the node down with them.
 */
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';

const SIZE = 256;

/** An RTP packet: V=2, the given marker, PT 96, seq, timestamp, SSRC, then payload. */
function rtp(ssrc: number, seq: number, ts: number, payload: number[] | Buffer, marker = false): Buffer {
  const h = Buffer.alloc(12);
  h[0] = 0x80;
  h[1] = (marker ? 0x80 : 0) | 96;
  h.writeUInt16BE(seq & 0xffff, 2);
  h.writeUInt32BE(ts >>> 0, 4);
  h.writeUInt32BE(ssrc >>> 0, 8);
  return Buffer.concat([h, Buffer.from(payload)]);
}

/** An RTCP packet header claiming `words` 32-bit words after it, with whatever body we give. */
function rtcp(pt: number, count: number, words: number, body: number[]): Buffer {
  const h = Buffer.alloc(4);
  h[0] = 0x80 | (count & 0x1f);
  h[1] = pt;
  h.writeUInt16BE(words & 0xffff, 2);
  return Buffer.concat([h, Buffer.from(body)]);
}

const junk = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 131 + seed * 17) & 0xff));

/** Malformed RTCP aimed at every parser on the path: SR, RR, SDES, BYE, APP, NACK, PLI, FIR, REMB, XR. */
function badRtcp(ssrc: number): Buffer[] {
  const s = [(ssrc >>> 24) & 0xff, (ssrc >>> 16) & 0xff, (ssrc >>> 8) & 0xff, ssrc & 0xff];
  return [
    rtcp(200, 0, 0xffff, [...s, 1, 2, 3, 4]), // SR whose length runs far past the packet
    rtcp(200, 31, 6, [...s, ...junk(20, 1)]), // SR claiming 31 report blocks
    rtcp(201, 31, 1, s), // RR: 31 blocks, none present
    rtcp(202, 31, 2, [...s, 1, 255, 0, 0]), // SDES: item length 255 in 2 bytes
    rtcp(203, 31, 1, s), // BYE with 31 sources
    rtcp(204, 0, 2, [...s, 0x41]), // APP with a truncated name
    rtcp(205, 1, 0xfff, [...s, ...s, 0, 0]), // generic NACK: length beyond the packet
    rtcp(205, 15, 2, [...s, ...s]), // transport feedback with an unknown FMT, no FCI
    rtcp(206, 1, 1, s), // PLI without its media SSRC
    rtcp(206, 4, 4, [...s, ...s, ...junk(4, 2)]), // FIR with a short FCI
    rtcp(206, 15, 5, [...s, 0, 0, 0, 0, 0x52, 0x45, 0x4d, 0x42, 0xff, 0xff, 0xff, 0xff]), // REMB with 255 SSRCs claimed
    rtcp(207, 0, 3, [...s, 9, 0, 0xff, 0xff]), // XR with a block longer than the packet
    Buffer.concat([rtcp(201, 0, 1, s), rtcp(206, 1, 0x100, s)]), // a compound whose second packet overflows
    Buffer.from([0x00, 200, 0, 1, ...s]), // version 0
    Buffer.from([0x80, 201, 0, 0]), // 4 bytes: header only
  ];
}

/** Truncated and nonsensical H.264 RTP payloads (RFC 6184): FU-A, STAP-A, reserved types, broken slices. */
function badH264(ssrc: number, from: number, wild: boolean): Buffer[] {
  const out: Buffer[] = [];
  let seq = from;
  let ts = 1000;
  const next = (payload: number[] | Buffer, marker = false) => out.push(rtp(ssrc, seq++, (ts += 3000), payload, marker));
  next([0x7c, 0x85]); // FU-A start of an IDR with no data
  next([0x7c, 0x05, ...junk(50, 3)]); // FU-A middle, no start
  next([0x7c, 0x45, ...junk(10, 4)], true); // FU-A end, no start
  next([0x7c]); // FU-A indicator alone
  next([0x78, 0xff, 0xff, 0x67, 0x42]); // STAP-A claiming a 65535-byte NAL
  next([0x78, 0x00, 0x00, 0x00, 0x00], true); // STAP-A of empty NALs
  next([0x78, 0x00]); // STAP-A with half a length
  next([0x79, 0, 0, 0, 1, 0x65]); // STAP-B (not in packetization-mode 1)
  next([0x7a, ...junk(8, 5)]); // MTAP16
  next([0x00]); // NAL type 0
  next([0x1e, ...junk(30, 6)]); // reserved type 30
  next([0x1f]); // reserved type 31
  next([0x67, 0x42]); // SPS cut after two bytes
  next([0x67, 0x64, 0x00, 0x1f, ...junk(40, 7)]); // an SPS of garbage
  next([0x68, 0xff]); // PPS of garbage
  next([0x65, ...junk(1100, 8)], true); // an IDR slice of noise, marked as a complete picture
  next([0x41, ...junk(600, 9)], true); // a P slice of noise
  next([], true); // no payload at all
  for (let i = 0; i < 20; i++) next([0x7c, i === 0 ? 0x85 : i === 19 ? 0x45 : 0x05, ...junk(1000, 10 + i)], i === 19); // a 20-fragment IDR of noise
  if (!wild) return out;
  // Sequence numbers that jump and wrap, timestamps that go backwards (last round only: what
  // follows is then far behind the receiver's window).
  seq += 30_000;
  next([0x41, ...junk(200, 40)], true);
  seq = 0xfffe;
  ts = 5;
  next([0x41, ...junk(200, 41)], true);
  next([0x41, ...junk(200, 42)], true);
  return out;
}

/** Truncated and nonsensical VP8 RTP payloads (RFC 7741): descriptors cut short, frames of noise. */
function badVp8(ssrc: number, from: number): Buffer[] {
  const out: Buffer[] = [];
  let seq = from;
  let ts = 1000;
  const next = (payload: number[] | Buffer, marker = false) => out.push(rtp(ssrc, seq++, (ts += 3000), payload, marker));
  next([0x90]); // X bit, nothing after
  next([0x90, 0x80]); // I bit: picture id missing
  next([0x90, 0x80, 0x80], true); // 15-bit picture id cut
  next([0x90, 0xf0, 0x80, 0x01, 0x02], true); // I, L, T, K all set, bytes missing
  next([0x10], true); // S=1, no payload header
  next([0x10, 0x00, 0x00], true); // a keyframe header cut short
  next([0x10, 0x00, 0x9d, 0x01, 0x2a, 0xff, 0xff, 0xff, 0xff, ...junk(100, 50)], true); // a keyframe claiming 16383×16383
  next([0x10, 0x50, ...junk(1000, 51)], true); // an interframe of noise
  next([0x00, ...junk(500, 52)]); // a continuation with no start
  next([], true);
  for (let i = 0; i < 10; i++) next([i === 0 ? 0x10 : 0x00, ...junk(1100, 60 + i)], i === 9); // a 10-packet keyframe of noise
  return out;
}

t.test('a DTLS-connected peer sending malformed RTCP and broken H.264/VP8 RTP harms no other stream and not the node', { timeout: 180_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: SIZE, height: SIZE } });
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: SIZE, frames: 300 });
  const good = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(good.status, 201, 'the victim publishes');

  const framesOver = async (ms: number) => {
    const a = srv.node.status(STREAM_ID)?.framesOut ?? 0;
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, ms)); // a measuring window, not a wait for an event
    return (((srv.node.status(STREAM_ID)?.framesOut ?? 0) - a) * 1000) / (performance.now() - t0);
  };
  // Warm up until the victim's output flows, then measure it undisturbed.
  const deadline = Date.now() + 30_000;
  while ((srv.node.status(STREAM_ID)?.framesOut ?? 0) < 30 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const before = await framesOver(4_000);
  t.ok(before >= 20, `victim output before: ${before.toFixed(1)} fps`);

  const abusers: { id: string; codec: 'H264' | 'VP8' }[] = [];
  for (const [suffix, codec] of [
    ['h264', 'H264'],
    ['vp8', 'VP8'],
  ] as const) {
    const p = await pubs.publish({ url: `${srv.baseUrl}/live/${STREAM_ID}${suffix}/whip`, token: STREAM_KEY, source, raw: true, codec });
    t.equal(p.status, 201, `the ${codec} abuser is admitted like any publisher`);
    await pubs.waitState(p.id, 'connected', 20_000);
    abusers.push({ id: p.id, codec });
  }

  // Abuse for ≈ 6 s while measuring the victim.
  const during = framesOver(6_000);
  let accepted = 0;
  let offered = 0;
  for (let round = 0; round < 12; round++) {
    for (const a of abusers) {
      const { ssrc } = await pubs.sendRaw(a.id, []);
      const packets = [...badRtcp(ssrc), ...(a.codec === 'H264' ? badH264(ssrc, round * 100, round === 11) : badVp8(ssrc, round * 100)), ...badRtcp(ssrc ^ 0x55)];
      offered += packets.length;
      accepted += (await pubs.sendRaw(a.id, packets)).accepted;
    }
    await new Promise((r) => setTimeout(r, 400)); // pacing of the attack (the scenario, not a wait for a result)
  }
  const fpsDuring = await during;
  t.comment(`abusers sent ${accepted} of ${offered} crafted packets (libdatachannel refuses what SRTP cannot protect)`);
  t.ok(accepted > offered / 2, 'most crafted packets went out SRTP-protected');
  t.ok(fpsDuring >= Math.min(before * 0.8, 24), `victim output during the attack: ${fpsDuring.toFixed(1)} fps (before ${before.toFixed(1)})`);

  // Recovered: one of up to three 3 s windows at the rate of before. (One window alone read 20 fps
  // once while a Chromium test started beside it; harm that lasts shows in all three.)
  const floor = Math.min(before * 0.8, 24);
  let after = 0;
  let windows = 0;
  while (windows < 3 && after < floor) {
    after = await framesOver(3_000);
    windows++;
  }
  t.ok(after >= floor, `victim output after: ${after.toFixed(1)} fps (window ${windows} of at most 3)`);
  t.equal(srv.node.status(STREAM_ID)?.state, 'live', 'the victim stream is live');
  for (const suffix of ['h264', 'vp8']) {
    const s = srv.node.status(`${STREAM_ID}${suffix}`);
    t.comment(`${suffix} abuser's stream: framesIn ${s?.framesIn}, decoderRestarts ${s?.decoderRestarts}, ingest ${JSON.stringify(s?.ingest)?.slice(0, 200)}`);
    t.ok((s?.framesIn ?? 0) > 0, `the ${suffix} garbage reached the depacketizer and was assembled into frames`);
  }
  // The node still admits and serves: a fresh publisher on a new stream gets output.
  const fresh = await pubs.publish({ url: `${srv.baseUrl}/live/${STREAM_ID}fresh/whip`, token: STREAM_KEY, source });
  t.equal(fresh.status, 201, 'a new publisher is admitted after the attack');
  const end = Date.now() + 20_000;
  while ((srv.node.status(`${STREAM_ID}fresh`)?.framesOut ?? 0) < 10 && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  t.ok((srv.node.status(`${STREAM_ID}fresh`)?.framesOut ?? 0) >= 10, 'and its stream produces output');
});
