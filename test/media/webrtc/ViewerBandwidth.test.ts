/**
 * The WHEP viewer's rendition choice from its RTCP: receiver reports and REMB read from real
 * packet layouts, and the controller's moves down (loss at once, an estimate squeezed for 1.5 s), its probing, the
 * probe's end with a doubled wait, and the move up on an estimate that reaches the next rung.
 */
import t from 'tap';
import { readRtcpFeedback } from '../../../media/webrtc/RtcpFeedback.ts';
import { ViewerBandwidth, type Rung } from '../../../media/webrtc/ViewerBandwidth.ts';

const SSRC = 0x11223344;

/** A receiver report (PT 201) with one report block about `ssrc`: fraction lost `lost`/256. */
function rr(ssrc: number, lost: number): Buffer {
  const b = Buffer.alloc(32);
  b[0] = 0x81;
  b[1] = 201;
  b.writeUInt16BE(7, 2);
  b.writeUInt32BE(0xcafe, 4);
  b.writeUInt32BE(ssrc >>> 0, 8);
  b[12] = lost;
  return b;
}

/** A REMB (PSFB FMT 15) of `bps` (mantissa and exponent as libwebrtc writes them) for `ssrc`. */
function remb(bps: number, ssrc: number): Buffer {
  let exp = 0;
  while (bps >= 2 ** (18 + exp)) exp++;
  const mantissa = Math.floor(bps / 2 ** exp);
  const b = Buffer.alloc(24);
  b[0] = 0x8f;
  b[1] = 206;
  b.writeUInt16BE(5, 2);
  b.writeUInt32BE(0xcafe, 4);
  b.write('REMB', 12, 'latin1');
  b[16] = 1;
  b[17] = (exp << 2) | (mantissa >> 16);
  b.writeUInt16BE(mantissa & 0xffff, 18);
  b.writeUInt32BE(ssrc >>> 0, 20);
  return b;
}

t.test('receiver reports and REMB are read from a compound packet; other SSRCs and types are ignored', async (t) => {
  t.same(readRtcpFeedback(Buffer.concat([rr(SSRC, 64), remb(1_234_567, SSRC)]), SSRC), { fractionLost: 0.25, rembBps: 1_234_560 }, '25 % lost, 1.23 Mb/s (18-bit mantissa)');
  t.same(readRtcpFeedback(rr(0x99, 200), SSRC), {}, "a report about another SSRC (the viewer's audio) is not ours");
  const pli = Buffer.from([0x81, 206, 0, 2, 0, 0, 0xca, 0xfe, 0x11, 0x22, 0x33, 0x44]);
  t.same(readRtcpFeedback(Buffer.concat([pli, remb(300_000, SSRC)]), SSRC), { rembBps: 300_000 }, 'a PLI beside it changes nothing');
  t.same(readRtcpFeedback(Buffer.from([0x81, 201, 0, 40, 1, 2]), SSRC), {}, 'a truncated packet yields nothing (no throw)');
});

const LADDER: Rung[] = [
  { name: '', bps: 1_690_000 },
  { name: 'half', bps: 370_000 },
];

t.test('a viewer moves down on loss or a squeezed estimate, at once, to the rung the estimate carries', async (t) => {
  const bw = new ViewerBandwidth(LADDER, 0);
  t.equal(bw.rendition, '', 'starts on the full encode');
  t.notOk(bw.update({ rembBps: 1_500_000 }, 1_600_000, 1000), 'an estimate just under what it is sent (a clean link, libwebrtc grows it slowly): stays');
  t.notOk(bw.update({ rembBps: 1_200_000 }, 1_600_000, 1200), 'an estimate at 75 % of what it is sent: not yet (a jittery link dips and recovers)');
  t.notOk(bw.update({ rembBps: 1_450_000 }, 1_600_000, 1600), 'it came back: the squeeze starts again from the next dip');
  t.notOk(bw.update({ rembBps: 1_200_000 }, 1_600_000, 2000), 'squeezed again');
  t.notOk(bw.update({ rembBps: 1_150_000 }, 1_600_000, 3500), 'still squeezed after 1.5 s: stays');
  t.ok(bw.update({ rembBps: 1_150_000 }, 1_600_000, 4000), 'squeezed for 2 s (a link a little short): down');
  t.equal(bw.rendition, 'half');
  const overrun = new ViewerBandwidth(LADDER, 0);
  t.ok(overrun.update({ rembBps: 900_000 }, 1_600_000, 1000), 'under 65 % of what it is sent (a link overrun): down at once');
  const lossy = new ViewerBandwidth(LADDER, 0);
  t.ok(lossy.update({ fractionLost: 0.2 }, 1_600_000, 1000), '20 % lost with no estimate: one rung down');
  t.equal(lossy.status().switches, 1);
});

t.test('on the lower rung it probes after a quiet spell, stops with a doubled wait when the link has no room, and moves up when the estimate reaches the next rung', async (t) => {
  const bw = new ViewerBandwidth(LADDER, 0);
  bw.update({ fractionLost: 0.3, rembBps: 400_000 }, 1_600_000, 0);
  t.equal(bw.rendition, 'half', '30 % lost: down at once, to the rung the estimate carries');
  bw.update({ fractionLost: 0 }, 400_000, 1000);
  bw.update({ rembBps: 420_000, fractionLost: 0 }, 400_000, 3000);
  t.equal(bw.probeBps, 0, 'no probe before 4 s without trouble');
  bw.update({ rembBps: 420_000, fractionLost: 0 }, 400_000, 4100);
  t.equal(bw.probeBps, 420_000 * 1.25 - 370_000, 'then padding up to 1.25× the estimate, over what the rung needs');
  bw.update({ fractionLost: 0.6 }, 520_000, 4500);
  t.ok(bw.probeBps > 0, "loss reports during the probe are not read (Chromium counts padding as lost on a link that reorders)");
  bw.update({ rembBps: 400_000 }, 520_000, 4800);
  t.ok(bw.probeBps > 0, 'an estimate dipping under 80 % of what is sent does not end it at once (a jittery link)');
  bw.update({ rembBps: 300_000 }, 520_000, 5000);
  t.equal(bw.probeBps, 0, 'under 65 % (the probe overran the link) ends it');
  t.equal(bw.rendition, 'half', 'and does not move the viewer');
  bw.update({ rembBps: 430_000, fractionLost: 0 }, 400_000, 12_900);
  t.equal(bw.probeBps, 0, 'the next probe waits twice as long (8 s from the failure)');
  bw.update({ rembBps: 430_000 }, 400_000, 13_100);
  t.ok(bw.probeBps > 0, 'and starts after it');
  for (let bps = 430_000, at = 13_300; bps < 1_800_000; bps *= 1.08, at += 200) bw.update({ rembBps: bps, fractionLost: 0 }, bps, at);
  t.equal(bw.rendition, '', 'the estimate grew with the probe to the full rung: up');
  t.equal(bw.probeBps, 0, 'no probe on the top rung');
  t.equal(bw.status().switches, 2);
});
