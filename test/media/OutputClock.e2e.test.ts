/**
 * Output frames are stamped from the publisher's capture clock (the RTP time of their source
 * frame), on one timeline per stream that never goes backwards: across a new publisher with its
 * own clock, across the slate, and whatever the node's load does to when frames are encoded.
 *
 * The end-to-end test makes a clip while the node is loaded (worker threads burning CPU, the
 * event loop blocked in irregular spells, a processor that takes an irregular time per frame) and
 * reads it with real ffmpeg and ffprobe: ffmpeg says nothing, and every frame interval is a whole
 * number of the publisher's 33.3 ms frames (frames the processor dropped leave a gap).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import type { Frame, FrameProcessorFactory } from '../../media/index.ts';
import { OutputClock } from '../../media/OutputClock.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';

const run = promisify(execFile);
const FRAME_MS = 1000 / 30;

t.test('OutputClock: live frames keep their RTP intervals; restarts and the slate never go backwards', async (t) => {
  const near = (a: number, b: number) => Math.abs(a - b) < 1e-6;
  const clock = new OutputClock(FRAME_MS);
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

/** Passes frames through after an irregular wait (1–70 ms, a fixed sequence): a jittery model. */
function jitteryProcessor(): FrameProcessorFactory {
  let i = 0;
  return async () => ({
    process: async (frame: Frame) => {
      const waitMs = 1 + ((i++ * 37) % 70);
      await new Promise((r) => setTimeout(r, waitMs));
      return { ...frame };
    },
    update: () => undefined,
    close: () => undefined,
  });
}

/** `n` worker threads spinning until stopped (at most `maxMs`), and the event loop blocked in irregular spells (up to 60 ms). */
function loadNode(n: number, maxMs: number): { stop: () => Promise<void> } {
  const code = `
    const { workerData } = require('node:worker_threads');
    const end = Date.now() + workerData.maxMs;
    let x = 0;
    while (Date.now() < end && Atomics.load(workerData.stop, 0) === 0) x += Math.sqrt(x + 1);
  `;
  const stop = new Int32Array(new SharedArrayBuffer(4));
  const workers = Array.from({ length: n }, () => new Worker(code, { eval: true, workerData: { maxMs, stop } }));
  const done = workers.map((w) => new Promise<void>((resolve) => w.once('exit', () => resolve())));
  let k = 0;
  const started = performance.now();
  const blocker = setInterval(() => {
    if (performance.now() - started > maxMs) return;
    const until = performance.now() + ((k++ * 23) % 60);
    while (performance.now() < until); // the event loop busy, as under many streams
  }, 45);
  return {
    stop: async () => {
      clearInterval(blocker);
      Atomics.store(stop, 0, 1);
      await Promise.all(done);
    },
  };
}

/** Video packets' pts (ms) in file order, from the stream's own time base. */
async function videoPts(file: string): Promise<number[]> {
  const { stdout } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=time_base:packet=pts', '-of', 'json', file]);
  const j = JSON.parse(stdout) as { streams: { time_base: string }[]; packets: { pts: number }[] };
  const [num, den] = (j.streams[0]?.time_base ?? '1/90000').split('/').map(Number) as [number, number];
  return j.packets.map((p) => (p.pts * num * 1000) / den);
}

t.test('a clip made while the node is loaded reads in ffmpeg without a complaint, with the publisher’s 33.3 ms frame intervals', { timeout: 180_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 }, createProcessor: jitteryProcessor() });
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 300 }) });
  t.equal(pub.status, 201, 'publisher accepted');
  const stream = await until('the stream', () => srv.node.getStream(STREAM_ID), (s) => s !== undefined, 20_000);
  await until('live output', () => stream?.status().state, (s) => s === 'live', 30_000);
  const msn0 = stream?.status().hls?.msn ?? -1;

  // Load until the segments begun under it hold 5 s of media (30 s at most).
  const load = loadNode(2, 30_000);
  t.teardown(() => load.stop());
  const underLoadMs = () => (stream?.clip(60)?.segments ?? []).filter((s) => s.msn > msn0).reduce((sum, s) => sum + s.durationMs, 0);
  try {
    await until('5 s of output under load', underLoadMs, (ms) => ms >= 5000, 40_000, 200);
  } finally {
    await load.stop();
  }

  const dir = mkdtempSync(join(tmpdir(), 'rv-clock-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'clip.mp4');
  const clip = await srv.node.clip(STREAM_ID, 5, file);
  t.ok(clip && clip.durationMs >= 5000, `a clip of ${clip?.durationMs} ms`);

  const { stderr } = await run('ffmpeg', ['-v', 'error', '-nostdin', '-i', file, '-f', 'null', '-']);
  t.equal(stderr.trim(), '', 'ffmpeg reads the clip without a complaint (no non-monotonic DTS)');

  const pts = await videoPts(file);
  // The load and the processor's waits drop many frames (a few fps come out): enough intervals to check.
  t.ok(pts.length > 20, `${pts.length} video frames`);
  const deltas = pts.slice(1).map((p, i) => p - (pts[i] as number));
  const sorted = [...deltas].sort((x, y) => x - y);
  t.comment(`frame intervals, ms: min ${sorted[0]?.toFixed(2)}, median ${sorted[sorted.length >> 1]?.toFixed(2)}, max ${sorted.at(-1)?.toFixed(2)}`);
  const off = deltas.filter((d) => d < FRAME_MS - 1 || Math.abs(d - Math.round(d / FRAME_MS) * FRAME_MS) > 1);
  t.same(off, [], 'every frame interval is a whole number of 33.3 ms frames, within 1 ms');
  t.ok(deltas.some((d) => Math.abs(d - FRAME_MS) <= 1), 'and consecutive frames are 33.3 ms apart');
});

t.test('across the slate and a new publisher with its own RTP clock, the output timeline goes on forwards and ffmpeg reads it silently', { timeout: 180_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256 }, createProcessor: jitteryProcessor() });
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 300 });
  const first = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(first.status, 201, 'first publisher accepted');
  const stream = await until('the stream', () => srv.node.getStream(STREAM_ID), (s) => s !== undefined, 20_000);
  await until('live output', () => stream?.status().state, (s) => s === 'live', 30_000);
  // An HLS player watches, so the outputs carry the slate while the publisher is away.
  const playlist = `${srv.baseUrl}/hls/${PLAYBACK_ID}/plain.m3u8`;
  t.equal((await fetch(playlist)).status, 200, 'an HLS player reads the playlist');
  const msn0 = stream?.status().hls?.msn ?? -1;
  await until('2 live segments', () => stream?.status().hls?.msn ?? -1, (msn) => msn >= msn0 + 2, 20_000, 200);

  await pubs.stop(first.id);
  const slate0 = stream?.status().slate.framesOut ?? 0;
  await until('slate frames out', () => stream?.status().slate.framesOut ?? 0, (n) => n >= slate0 + 10, 20_000, 100);
  // The next publisher's RTP time starts again at 0 (its own clock), behind everything output so far.
  const second = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(second.status, 201, 'second publisher accepted');
  await until('live again', () => stream?.status(), (s) => s?.state === 'live' && s.output === 'live', 30_000, 100);
  const msn1 = stream?.status().hls?.msn ?? -1;
  await until('2 more live segments', () => stream?.status().hls?.msn ?? -1, (msn) => msn >= msn1 + 2, 20_000, 200);
  t.equal((await fetch(playlist)).status, 200, 'the player still reads the playlist');

  const dir = mkdtempSync(join(tmpdir(), 'rv-clock-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'clip.mp4');
  const clip = await srv.node.clip(STREAM_ID, 60, file);
  t.ok(clip, `a clip of everything held (${clip?.durationMs} ms)`);
  const { stderr } = await run('ffmpeg', ['-v', 'error', '-nostdin', '-i', file, '-f', 'null', '-']);
  t.equal(stderr.trim(), '', 'ffmpeg reads live, slate and live again without a complaint');
  const pts = await videoPts(file);
  const deltas = pts.slice(1).map((p, i) => p - (pts[i] as number));
  t.same(deltas.filter((d) => d < FRAME_MS - 1), [], `${pts.length} frames, each at least one 33.3 ms frame after the one before`);
});
