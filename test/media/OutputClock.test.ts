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
import { STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';

const run = promisify(execFile);
const FRAME_MS = 1000 / 30;

t.test('OutputClock: live frames keep their capture intervals; restarts and the slate never go backwards', async (t) => {
  const clock = new OutputClock(FRAME_MS);
  // First publisher: capture times on the node's clock, 50 ms behind now (its pipeline latency).
  const a = [1000, 1000 + FRAME_MS, 1000 + 3 * FRAME_MS].map((c) => clock.live(c, c + 50));
  t.same(a, [1000, 1000 + FRAME_MS, 1000 + 3 * FRAME_MS], 'capture times as they are, a dropped frame a gap');
  // The slate continues the timeline at the live frames' lag behind the node's clock.
  const s1 = clock.slate(1000 + 3 * FRAME_MS + 50 + 500);
  t.equal(s1, 1000 + 3 * FRAME_MS + 500, 'slate at the node clock minus the last lag');
  // Slate ticks that come late or in a burst still advance.
  const s2 = clock.slate(1000 + 3 * FRAME_MS + 50 + 500);
  t.ok(s2 > s1, 'a second slate frame at the same instant still advances');
  // A new publisher whose capture clock is behind the last output: its run starts after it.
  const b0 = clock.live(900, 1700);
  t.ok(b0 > s2, `the new publisher's first frame (${b0}) follows the last output (${s2})`);
  const b1 = clock.live(900 + FRAME_MS, 1700 + FRAME_MS);
  t.ok(Math.abs(b1 - b0 - FRAME_MS) < 1e-6, 'and its frames keep their capture intervals');
  // Its RTP time jumps back (a restarted encoder): a new run, still forwards.
  const b2 = clock.live(100, 1800);
  t.ok(b2 > b1, 'a capture clock that jumps back does not take the output back');
  t.ok(Math.abs(clock.live(100 + 2 * FRAME_MS, 1800 + 2 * FRAME_MS) - b2 - 2 * FRAME_MS) < 1e-6, 'intervals kept after it');
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

  // Load for as long as the packager takes to complete 7 more segments (≈ 7 s), 20 s at most.
  const load = loadNode(2, 20_000);
  t.teardown(() => load.stop());
  try {
    await until('7 segments under load', () => stream?.status().hls?.msn ?? -1, (msn) => msn >= msn0 + 7, 30_000, 200);
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
  const off = deltas.filter((d) => d < FRAME_MS - 1 || Math.abs(d - Math.round(d / FRAME_MS) * FRAME_MS) > 1);
  t.same(off, [], 'every frame interval is a whole number of 33.3 ms frames, within 1 ms');
  t.ok(deltas.some((d) => Math.abs(d - FRAME_MS) <= 1), 'and consecutive frames are 33.3 ms apart');
});
