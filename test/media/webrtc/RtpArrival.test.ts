import t from 'tap';
import { RtpArrival, rtpDelta } from '../../../media/webrtc/RtpArrival.ts';

t.test('rtpDelta is the signed distance across a 32-bit wrap', async (t) => {
  t.equal(rtpDelta(5, 2 ** 32 - 10), 15, 'forward across the wrap');
  t.equal(rtpDelta(2 ** 32 - 10, 5), -15, 'back across the wrap');
  t.equal(rtpDelta(100, 40), 60);
  t.equal(rtpDelta(40, 100), -60);
});

t.test('RTP time keeps moving forward when the timestamp wraps (a random start can be an hour from it)', async (t) => {
  const a = new RtpArrival(90_000, 2000);
  // 30 fps, 3000 ticks a frame, starting 10 frames before the wrap; each frame arrives 5 ms after its RTP time.
  const start = 2 ** 32 - 10 * 3000;
  const times: number[] = [];
  for (let i = 0; i < 20; i++) times.push(a.arrive((start + i * 3000) % 2 ** 32, 1000 + (i * 100) / 3));
  const steps = times.slice(1).map((v, i) => v - (times[i] as number));
  t.ok(steps.every((d) => Math.abs(d - 100 / 3) < 1e-6), `33.3 ms a frame through the wrap (steps ${steps.map((d) => d.toFixed(1)).join(' ')})`);
  t.ok(Math.abs((a.least as number) - (1000 - (times[0] as number))) < 1e-6, 'the least (arrival − RTP time) did not move at the wrap');
});
