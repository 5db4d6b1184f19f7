/**
 * OutputClock: live frames keep their RTP intervals on one timeline that never goes backwards
 * (a new publisher, RTP time that jumps back, the slate), follows a publisher clock that drifts,
 * and leaves out the frames queued through a stall the slate covered instead of starting a run
 * ahead of the node's clock. The end-to-end check (a clip made under load, read by ffmpeg) is
 * OutputClock.e2e.test.ts.
 */
import t from 'tap';
import { OutputClock } from '../../../media/stream/OutputClock.ts';

const FRAME_MS = 1000 / 30;

t.test('OutputClock: live frames keep their RTP intervals; restarts and the slate never go backwards', async (t) => {
  const near = (a: number, b: number) => Math.abs(a - b) < 1e-6;
  const inner = new OutputClock(FRAME_MS);
  // Every frame here is output (the stale ones are the next test's).
  const clock = {
    live: (m: number, c: number, n: number): number => {
      const p = inner.live(m, c, n);
      if (p === null) t.fail(`frame at ${m} called stale`);
      return p ?? NaN;
    },
    slate: (n: number) => inner.slate(n),
    restart: () => inner.restart(),
  };
  // First publisher: RTP time = capture time on the node's clock, pushed 50 ms later (its pipeline latency).
  const a = [1000, 1000 + FRAME_MS, 1000 + 3 * FRAME_MS].map((m) => clock.live(m, m, m + 50));
  t.same(a, [1000, 1000 + FRAME_MS, 1000 + 3 * FRAME_MS], 'RTP times as they are, a dropped frame a gap');
  // Capture time wobbles within 20 ms (the window's least delay moving): intervals stay the RTP ones.
  const w = [4, 5, 6].map((i) => clock.live(1000 + i * FRAME_MS, 1000 + i * FRAME_MS + (i % 2 ? 15 : -15), 1050 + i * FRAME_MS));
  t.ok(near(w[0]! - a[2]!, FRAME_MS) && near(w[2]! - w[1]!, FRAME_MS), 'capture-time jitter does not show in the intervals');
  // The slate continues the timeline at the live frames' lag behind the node's clock.
  const s1 = clock.slate(1000 + 6 * FRAME_MS + 50 + 500);
  t.ok(near(s1, 1000 + 6 * FRAME_MS + 500), 'slate at the node clock minus the last lag');
  const s2 = clock.slate(1000 + 6 * FRAME_MS + 50 + 500);
  t.ok(near(s2, s1 + FRAME_MS), 'a second slate frame at the same instant still advances, by a whole frame');
  // A new publisher whose RTP clock starts at 0 and whose capture time is behind the last output.
  clock.restart();
  const b0 = clock.live(0, s2 - 100, s2);
  t.ok(near(b0, s2 + FRAME_MS), `the new publisher's first frame (${b0}) is a frame after the last output (${s2})`);
  const b1 = clock.live(FRAME_MS, s2 - 100 + FRAME_MS, s2 + FRAME_MS);
  t.ok(near(b1 - b0, FRAME_MS), 'its frames keep their RTP intervals, though later than capture');
  // Its RTP time jumps back (a restarted encoder): a new run, still forwards.
  const b2 = clock.live(-5000, s2 - 100 + 2 * FRAME_MS, s2 + 2 * FRAME_MS);
  t.ok(b2 > b1, 'RTP time that jumps back does not take the output back');
  t.ok(near(clock.live(-5000 + FRAME_MS, s2 - 100 + 3 * FRAME_MS, s2 + 3 * FRAME_MS) - b2, FRAME_MS), 'intervals kept after it');

  // Later than capture (here by ≈ 167 ms): every frame present, nothing changes (no interval shorter than the RTP one)…
  let m = -5000 + FRAME_MS;
  let c = s2 - 100 + 3 * FRAME_MS;
  let prev = clock.live((m += FRAME_MS), (c += FRAME_MS), c + 50);
  const late0 = prev - c;
  for (let i = 0; i < 300; i++) {
    const p = clock.live((m += FRAME_MS), (c += FRAME_MS), c + 50);
    if (!near(p - prev, FRAME_MS)) t.fail(`interval ${p - prev} ms with every frame present`);
    prev = p;
  }
  // …across gaps (dropped frames) it moves back towards capture time, < 1 ms per gap.
  for (let i = 0; i < 400; i++) {
    const p = clock.live((m += 2 * FRAME_MS), (c += 2 * FRAME_MS), c + 50);
    if (p - prev > 2 * FRAME_MS + 1e-6 || p - prev < 2 * FRAME_MS - 1) t.fail(`interval ${p - prev} ms across a dropped frame`);
    prev = p;
  }
  t.ok(late0 > 100 && prev - c <= 20 + 1e-6, `${late0.toFixed(1)} ms late became ${(prev - c).toFixed(1)} ms across the gaps`);
  // Earlier than capture (a publisher clock that runs slow): later by ≤ 0.1 ms a frame, never a shorter interval.
  for (let i = 0; i < 1200; i++) {
    const p = clock.live((m += FRAME_MS), (c += FRAME_MS + 0.05), c + 50);
    if (p - prev < FRAME_MS - 1e-6 || p - prev > FRAME_MS + 0.1 + 1e-6) t.fail(`interval ${p - prev} ms following a slow clock`);
    prev = p;
  }
  t.ok(Math.abs(prev - c) <= 20 + 0.1, `a clock 0.05 ms a frame slow is followed (${(prev - c).toFixed(1)} ms off after 1200 frames, 60 ms of drift)`);
});

t.test('OutputClock: a run that starts late after a stall the slate covered catches up by leaving frames out, intervals whole', async (t) => {
  const clock = new OutputClock(FRAME_MS);
  // Live at 40 ms behind the node's clock, up to 1000 + 9 frames.
  let last = 0;
  for (let i = 0; i < 10; i++) last = clock.live(1000 + i * FRAME_MS, 1000 + i * FRAME_MS, 1040 + i * FRAME_MS) ?? NaN;
  // The event loop stalls 1.8 s; the slate's tick comes first after it, at the node's clock.
  const stallEnd = 1040 + 9 * FRAME_MS + 1800;
  const s = clock.slate(stallEnd);
  t.ok(Math.abs(s - (stallEnd - 40)) < 1e-6, 'the slate frame at the node clock minus the lag');
  // The 54 frames captured during the stall come out in a burst, then frames at the publisher's pace.
  const out: { pts: number; capture: number }[] = [];
  const left: number[] = [];
  for (let i = 10; i < 160; i++) {
    const capture = 1000 + i * FRAME_MS;
    const now = i < 64 ? stallEnd + (i - 10) * 0.5 : capture + 40;
    const pts = clock.live(capture, capture, now);
    if (pts === null) left.push(i);
    else out.push({ pts, capture });
  }
  const intervals = out.slice(1).map((o, k) => o.pts - (out[k] as { pts: number }).pts);
  t.ok(out[0] !== undefined && out[0].pts > s, 'the first frame after the slate follows it');
  t.ok(intervals.every((d) => Math.abs(d / FRAME_MS - Math.round(d / FRAME_MS)) < 0.03 && d >= FRAME_MS - 1), `every interval a whole number of frames (within 1 ms): ${intervals.map((d) => d.toFixed(1)).join(' ')}`);
  t.ok(left.length >= 45 && left.length <= 60, `${left.length} frames left out to catch up 1.8 s`);
  const tail = out.slice(-50);
  t.ok(tail.every((o) => o.pts - o.capture <= 150 + 1e-6), `then within 150 ms of capture time (last: ${((out.at(-1)?.pts ?? 0) - (out.at(-1)?.capture ?? 0)).toFixed(1)} ms), never again ahead of the node's clock`);
  const lastOut = out.at(-1) as { pts: number; capture: number };
  t.ok(Math.abs(clock.lateMs - (lastOut.pts - lastOut.capture)) < 1e-6, `lateMs says how far the output sits after capture now (${clock.lateMs.toFixed(1)} ms)`);
  t.ok(Number.isFinite(last), 'the frames before the stall were output');
});

t.test('OutputClock: a source slower than the nominal rate catches up without leaving a frame out, no interval under a frame', async (t) => {
  const clock = new OutputClock(FRAME_MS);
  // A diffusion pipeline's output: every fifth frame of a 30 fps publisher (≈ 6 fps).
  const SRC_MS = 5 * FRAME_MS;
  let prev = NaN;
  let i = 0;
  // The run starts with capture time 600 ms ahead of its RTP time (the window's least delay was
  // high at the start: a starved publisher), then capture time falls back to the RTP time.
  prev = clock.live(0, 600, 650) ?? NaN;
  const out: number[] = [prev];
  const intervals: number[] = [];
  let left = 0;
  for (i = 1; i < 30; i++) {
    const m = i * SRC_MS;
    const pts = clock.live(m, m, m + 50);
    if (pts === null) {
      left++;
      continue;
    }
    intervals.push(pts - prev);
    out.push(pts);
    prev = pts;
  }
  t.equal(left, 0, 'no frame left out');
  t.ok(intervals.every((d) => d >= FRAME_MS - 1e-6), `every interval at least a nominal frame: ${intervals.map((d) => d.toFixed(1)).join(' ')}`);
  const lateEnd = (out.at(-1) ?? NaN) - 29 * SRC_MS;
  t.ok(lateEnd <= 150 + 1e-6, `caught up: ${lateEnd.toFixed(1)} ms late at the end (600 at the start)`);
  t.ok(intervals.slice(0, 5).some((d) => d < SRC_MS - 1), 'by shortening intervals while late');
  t.ok(intervals.slice(-10).every((d) => Math.abs(d - SRC_MS) < 1), 'then the source intervals again');
});

t.test('predict: the output time a live frame will get, without moving the clock', async (t) => {
  const clock = new OutputClock(FRAME_MS);
  // Before a run: the frame's capture time (a run starts there), or a frame after the slate's last.
  t.equal(clock.predict(500, 1000), 1000);
  const s = clock.slate(990);
  t.equal(clock.predict(500, 1000), s + FRAME_MS, 'behind the slate: a frame after it');
  const first = clock.live(500, 1000, 1030) as number;
  t.equal(first, s + FRAME_MS);
  // In a run: RTP time plus the run's offset, as live gives it.
  for (let i = 1; i <= 5; i++) {
    const predicted = clock.predict(500 + i * FRAME_MS, 1000 + i * FRAME_MS);
    t.equal(predicted, clock.live(500 + i * FRAME_MS, 1000 + i * FRAME_MS, 1030 + i * FRAME_MS), `frame ${i}`);
  }
  t.ok(first - 1000 > 0, `this run sits ${(first - 1000).toFixed(1)} ms after its capture times for good`);
});
