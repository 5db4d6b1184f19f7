import t from 'tap';
import { MAX_HOLD_MS, ViewerAudio } from '../../../media/webrtc/ViewerAudio.ts';
import { readSenderReport, senderReport } from '../../../media/webrtc/SenderReport.ts';

/** An Opus RTP packet with timestamp `ts` and sequence number `seq`. */
function opus(ts: number, seq: number): Buffer {
  const p = Buffer.alloc(40);
  p[0] = 0x80;
  p[1] = 111;
  p.writeUInt16BE(seq & 0xffff, 2);
  p.writeUInt32BE(ts >>> 0, 4);
  return p;
}

/** A ViewerAudio on a clock the test moves; what it sends, with when. */
function harness() {
  let now = 1000;
  const sent: { seq: number; at: number }[] = [];
  const audio = new ViewerAudio({ send: (rtp) => sent.push({ seq: rtp.readUInt16BE(2), at: now }), now: () => now });
  return {
    audio,
    sent,
    get now() {
      return now;
    },
    set now(v: number) {
      now = v;
    },
  };
}

t.test('without a picture the sound goes at once', async (t) => {
  const h = harness();
  for (let i = 0; i < 5; i++) {
    h.audio.push(opus(960 * i, i));
    h.now += 20;
  }
  t.same(h.sent.map((s) => s.seq), [0, 1, 2, 3, 4]);
  t.equal(h.audio.held, 0);
  t.equal(h.audio.holdMs, 0);
});

t.test('the sound is held for the median delay of the pictures that went out, in order', async (t) => {
  const h = harness();
  // Pictures go out 150 ms after their capture (one slow frame at 400 does not move the median).
  for (const lag of [150, 150, 400, 150, 150]) h.audio.videoOut(h.now - lag);
  t.equal(h.audio.holdMs, 150);
  // Audio arrives 20 ms after its first sample's capture (one 20 ms packet): it goes 130 ms later.
  h.audio.push(opus(0, 1));
  h.now += 20;
  h.audio.push(opus(960, 2));
  t.same(h.sent, [], 'nothing before its picture');
  t.equal(h.audio.held, 2);
  // Driven by the test's clock: a later packet drains what is due.
  h.now = 1000 + 130;
  h.audio.push(opus(1920, 3));
  t.same(h.sent.map((s) => s.seq), [1], 'the first packet once its picture went out');
  h.now = 1000 + 150;
  h.audio.push(opus(2880, 4));
  t.same(h.sent.map((s) => s.seq), [1, 2], 'then the next, in order');
  h.audio.close();
  t.equal(h.audio.held, 0, 'close drops what is held');
});

t.test('a held packet goes on its own once due (timer)', async (t) => {
  const sent: { at: number }[] = [];
  const real = new ViewerAudio({ send: () => sent.push({ at: performance.now() }) });
  real.videoOut(performance.now() - 60);
  const t0 = performance.now();
  real.push(opus(0, 7));
  await new Promise<void>((resolve) => {
    const check = setInterval(() => {
      if (sent.length > 0) {
        clearInterval(check);
        resolve();
      }
    }, 2);
  });
  const waited = (sent[0]?.at ?? 0) - t0;
  t.ok(waited >= 35 && waited < 200, `sent ${waited.toFixed(0)} ms later (60 ms picture delay less the 20 ms packet)`);
});

t.test('the hold is bounded, and a stalled picture stops holding', async (t) => {
  const h = harness();
  h.audio.videoOut(h.now - 5000);
  t.equal(h.audio.holdMs, MAX_HOLD_MS, 'a picture 5 s late holds the sound at most MAX_HOLD_MS');
  h.now += 2500;
  t.equal(h.audio.holdMs, 0, 'no picture for 2.5 s: no hold');
});

t.test('sender-report time follows the audio capture clock, across a new source', async (t) => {
  const h = harness();
  t.equal(h.audio.rtpAt(h.now), null, 'unknown before a packet');
  // Packets of 20 ms arrive 20 ms after their first sample's capture: RTP 48 000 at capture 1000 ms.
  for (let i = 0; i < 5; i++) {
    h.audio.push(opus(48_000 + 960 * i, i));
    h.now += 20;
  }
  t.equal(h.audio.rtpAt(980), 48_000, 'the first sample was captured a packet before it arrived');
  t.equal(h.audio.rtpAt(1980), 96_000, '48 000 ticks a second');
  // A new source: its RTP time starts far back; the mapping starts afresh from it.
  h.audio.push(opus(5, 9));
  t.equal(h.audio.rtpAt(h.now - 20), 5);
});

t.test('a sender report maps an RTP timestamp to epoch ms in NTP format, with counts and the CNAME', async (t) => {
  const sr = senderReport(0xdeadbeef, { rtp: 123_456_789, ntpMs: 1_795_000_000_123.5 }, 42, 4200, 'reverie');
  t.equal(sr.length % 4, 0, 'whole 32-bit words');
  t.equal(sr[1], 200, 'an SR first');
  t.equal(sr[29], 202, 'then an SDES');
  t.equal(sr.readUInt16BE(30), (sr.length - 28) / 4 - 1, 'SDES length field');
  t.equal(sr.subarray(38, 45).toString(), 'reverie', 'CNAME');
  const r = readSenderReport(sr, 0xdeadbeef);
  t.ok(r, 'read back');
  t.equal(r?.rtp, 123_456_789);
  t.ok(Math.abs((r?.ntpMs ?? 0) - 1_795_000_000_123.5) < 0.001, 'epoch ms through NTP seconds since 1900');
  t.equal(r?.packets, 42);
  t.equal(r?.octets, 4200);
  t.equal(readSenderReport(sr, 1), null, 'another SSRC: none');
});

t.test('a packet nobody listens to only moves the clock on', async (t) => {
  const h = harness();
  h.audio.videoOut(h.now - 100);
  h.audio.push(opus(48_000, 1), false);
  t.equal(h.audio.held, 0, 'nothing queued, no timer');
  t.same(h.sent, [], 'nothing sent');
  t.equal(h.audio.rtpAt(h.now - 20), 48_000, 'the clock knows it');
});

t.test("our own encoder's lookahead: its packets are placed that much earlier, and the reports say so", async (t) => {
  const plain = harness();
  const ours = harness();
  for (let i = 0; i < 10; i++) {
    plain.audio.push(opus(960 * i, i));
    ours.audio.push(opus(960 * i, i), true, 6.5);
    plain.now += 20;
    ours.now += 20;
  }
  // The same RTP time is captured 6.5 ms earlier: audio captured now has an RTP time 312 ticks later.
  t.equal(((ours.audio.rtpAt(ours.now) as number) - (plain.audio.rtpAt(plain.now) as number)) >>> 0, 312);
});
