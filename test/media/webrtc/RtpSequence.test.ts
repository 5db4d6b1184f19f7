import t from 'tap';
import { RtpSequence } from '../../../media/webrtc/RtpSequence.ts';

const packet = (seq: number, ts: number): Buffer => {
  const b = Buffer.alloc(12);
  b[0] = 0x80;
  b.writeUInt16BE(seq & 0xffff, 2);
  b.writeUInt32BE(ts >>> 0, 4);
  return b;
};

t.test('one source keeps its own steps: wraps, losses and reordering', async (t) => {
  const s = new RtpSequence();
  const first = s.next(packet(65_534, 0));
  const outs = [65_535, 0, 2, 1, 3].map((seq, i) => s.next(packet(seq, 960 * (i + 1))));
  t.same(outs.map((o) => (o - first) & 0xffff), [1, 2, 4, 3, 5], 'the same steps across the wrap, the loss and the swap');
});

t.test('a new source (numbers far off, or RTP time far off) continues after the last number sent', async (t) => {
  const s = new RtpSequence();
  const a = [100, 101, 102].map((seq, i) => s.next(packet(seq, 5000 + 960 * i)));
  // The soundtrack's mix: its numbers happen to lie behind (what an SRTP replay check drops).
  const b = [40_100, 40_101].map((seq, i) => s.next(packet(seq, 123_456_789 + 960 * i)));
  t.same(b, [((a[2] as number) + 1) & 0xffff, ((a[2] as number) + 2) & 0xffff], 'the mix follows the publisher');
  // Back to a publisher whose numbers are near the mix's but whose clock is its own.
  const c = s.next(packet(40_090, 777));
  t.equal(c, ((b[1] as number) + 1) & 0xffff, 'an RTP time jump is a new source too');
  t.equal(s.next(packet(40_091, 777 + 960)), (c + 1) & 0xffff, 'and it goes on from there');
});
