/**
 * A clip's segments as one ordinary MP4: the fragments are concatenated behind their init
 * segment (a valid fragmented MP4) and remuxed by ffmpeg with `-c copy` — no decode, no encode,
 * ≈ 50 ms for 10 s — into a progressive MP4 whose index (moov) comes first, so a browser plays it
 * from the first byte, with timestamps starting at zero.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { ClipSource } from './ClipBuffer.ts';

/** ms an ffmpeg remux may take before it is killed (a 60 s clip remuxes in well under 1 s). */
const REMUX_TIMEOUT_MS = 20_000;

/** Writes `source` to `out` as a progressive MP4 (atomically: a temp file renamed into place). */
export async function writeClipMp4(source: ClipSource, opts: { out: string; ffmpegPath: string }): Promise<{ size: number }> {
  const dir = dirname(opts.out);
  await mkdir(dir, { recursive: true });
  const tag = randomBytes(6).toString('hex');
  const input = join(dir, `.clip-${tag}.in.mp4`);
  const output = join(dir, `.clip-${tag}.out.mp4`);
  try {
    const fragmented = Buffer.concat([source.init, ...source.segments.map((s) => s.bytes)]);
    await writeFile(input, fragmented);
    await runRemux(opts.ffmpegPath, [
      '-hide_banner', '-loglevel', 'error', '-nostdin',
      '-f', 'mp4', '-i', input,
      '-map', '0', '-c', 'copy',
      '-avoid_negative_ts', 'make_zero',
      '-movflags', '+faststart',
      '-f', 'mp4', '-y', output,
    ]);
    await rename(output, opts.out);
    return { size: (await stat(opts.out)).size };
  } finally {
    await rm(input, { force: true });
    await rm(output, { force: true });
  }
}

/** Runs an ffmpeg remux (`cmd`, `args`), killed after `timeoutMs`; rejects with its stderr's start. */
export function runRemux(cmd: string, args: string[], timeoutMs = REMUX_TIMEOUT_MS): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`ffmpeg remux failed (${signal ?? `exit ${code}`}): ${stderr.trim().slice(0, 500)}`));
    });
  });
}
