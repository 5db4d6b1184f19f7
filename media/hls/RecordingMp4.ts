/**
 * A recording as one ordinary MP4, remuxed (ffmpeg `-c copy`: no decode, no encode). Its
 * segments are split into runs — a new run at every discontinuity (the publisher came back) or
 * init change — each run written as one fragmented MP4 (its init segment, then its fragments),
 * and the runs joined by ffmpeg's concat demuxer, which lays them end to end: the time the
 * publisher was away is not in the file, as it is not in the VOD playlist. `+faststart` puts the
 * index first, so a browser plays it from the first byte; timestamps start at zero.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { runRemux } from './ClipMp4.ts';
import { initFileName, type RecordingSegmentFile } from './RecordingFiles.ts';

/** ms a remux may take before it is killed (an hour of 3 Mbit/s remuxes in a few seconds). */
const REMUX_TIMEOUT_MS = 120_000;

/** Splits segments (in order) into runs that play contiguously. */
export function recordingRuns(segments: readonly RecordingSegmentFile[]): RecordingSegmentFile[][] {
  const runs: RecordingSegmentFile[][] = [];
  let prev: RecordingSegmentFile | null = null;
  for (const s of segments) {
    const cont = prev !== null && !s.discontinuity && s.initId === prev.initId && s.seq === prev.seq + 1;
    if (cont) (runs.at(-1) as RecordingSegmentFile[]).push(s);
    else runs.push([s]);
    prev = s;
  }
  return runs;
}

/** Media time of a run, ms. */
function runMs(run: readonly RecordingSegmentFile[]): number {
  return run.reduce((ms, s) => ms + s.durationMs, 0);
}

/**
 * Writes the segments of the recording in `dir` to `out` (atomically). `tmpDir`: where the
 * per-run inputs go (same filesystem as `out` for the final rename).
 */
export async function remuxRecordingMp4(opts: { dir: string; segments: readonly RecordingSegmentFile[]; out: string; tmpDir: string; ffmpegPath: string }): Promise<{ size: number }> {
  if (opts.segments.length === 0) throw new Error('a recording with no segments has no MP4');
  await mkdir(opts.tmpDir, { recursive: true });
  const tag = join(opts.tmpDir, `.rec-${randomBytes(6).toString('hex')}`);
  const runs = recordingRuns(opts.segments);
  const inputs = runs.map((_, i) => `${tag}.run${i}.mp4`);
  const list = `${tag}.list.txt`;
  const output = `${tag}.out.mp4`;
  try {
    for (const [i, run] of runs.entries()) {
      const sink = createWriteStream(inputs[i] as string);
      const files = [initFileName((run[0] as RecordingSegmentFile).initId), ...run.map((s) => s.name)];
      // One file after another into the run's fragmented MP4, without holding it in memory.
      await pipeline(async function* () {
        for (const f of files) yield* createReadStream(join(opts.dir, f));
      }, sink);
    }
    // Each run's length from its segments: ffmpeg reads a fragmented MP4's length as its last
    // timestamp, so a run that does not start at media time 0 (a recording turned on mid-stream,
    // or one resumed after the slate was left out) would push the next run that much later.
    const entries = inputs.map((p, i) => `file '${p.replace(/'/g, "'\\''")}'\nduration ${(runMs(runs[i] ?? []) / 1000).toFixed(3)}`);
    await writeFile(list, `ffconcat version 1.0\n${entries.join('\n')}\n`);
    await runRemux(opts.ffmpegPath, [
      '-hide_banner', '-loglevel', 'error', '-nostdin',
      '-f', 'concat', '-safe', '0', '-i', list,
      '-map', '0', '-c', 'copy',
      '-avoid_negative_ts', 'make_zero',
      '-movflags', '+faststart',
      '-f', 'mp4', '-y', output,
    ], REMUX_TIMEOUT_MS);
    await rename(output, opts.out);
    return { size: (await stat(opts.out)).size };
  } finally {
    for (const p of [...inputs, list, output]) await rm(p, { force: true });
  }
}
