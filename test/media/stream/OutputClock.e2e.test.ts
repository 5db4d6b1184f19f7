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
import { HlsOutput, type Frame, type FrameProcessorFactory } from '../../../media/index.ts';
import { stampedH264 } from '../../helpers/h264Source.ts';
import { startObsPublishers } from '../../helpers/obsPublisher.ts';
import { until } from '../../helpers/until.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';

const run = promisify(execFile);
const FRAME_MS = 1000 / 30;

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
  const msn0 = stream?.readers.find(HlsOutput)?.packager.stats().msn ?? -1;

  // Load until the segments begun under it hold 5 s of media (30 s at most).
  const load = loadNode(2, 30_000);
  t.teardown(() => load.stop());
  const underLoadMs = () => (stream?.readers.find(HlsOutput)?.clip(60)?.segments ?? []).filter((s) => s.msn > msn0).reduce((sum, s) => sum + s.durationMs, 0);
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
  const msn0 = stream?.readers.find(HlsOutput)?.packager.stats().msn ?? -1;
  await until('2 live segments', () => stream?.readers.find(HlsOutput)?.packager.stats().msn ?? -1, (msn) => msn >= msn0 + 2, 20_000, 200);

  await pubs.stop(first.id);
  const slate0 = stream?.status().slate.framesOut ?? 0;
  await until('slate frames out', () => stream?.status().slate.framesOut ?? 0, (n) => n >= slate0 + 10, 20_000, 100);
  // The next publisher's RTP time starts again at 0 (its own clock), behind everything output so far.
  const second = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(second.status, 201, 'second publisher accepted');
  await until('live again', () => stream?.status(), (s) => s?.state === 'live' && s.output === 'live', 30_000, 100);
  const msn1 = stream?.readers.find(HlsOutput)?.packager.stats().msn ?? -1;
  await until('2 more live segments', () => stream?.readers.find(HlsOutput)?.packager.stats().msn ?? -1, (msn) => msn >= msn1 + 2, 20_000, 200);
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
