/**
 * ffprobe/ffmpeg checks of a recording (an MP4 file or an HLS playlist URL), shared by the
 * recording tests: container duration, video packets (pts, keyframe flag) in order, and how many
 * frames actually decode, and each frame's luma range (tells the slate from live frames).
 * Asynchronous: the server under test may be this very process.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface ProbedRecording {
  duration: number;
  width: number;
  audio: boolean;
  packets: { pts: number; key: boolean }[];
  decodedFrames: number;
}

export async function probeRecording(input: string): Promise<ProbedRecording> {
  const fmt = JSON.parse((await run('ffprobe', ['-v', 'error', '-show_format', '-show_streams', '-of', 'json', input], { encoding: 'utf8' })).stdout) as {
    format: { duration: string };
    streams: { codec_type: string; width?: number }[];
  };
  const { stdout: out } = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=pts_time,flags', '-of', 'csv=p=0', input], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const packets = out
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(','))
    .map(([pts, flags]) => ({ pts: Number(pts), key: (flags ?? '').includes('K') }));
  const { stdout: decoded } = await run('ffmpeg', ['-v', 'error', '-i', input, '-map', '0:v', '-fps_mode', 'passthrough', '-f', 'framemd5', '-'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return {
    duration: Number(fmt.format.duration),
    width: fmt.streams.find((s) => s.codec_type === 'video')?.width ?? 0,
    audio: fmt.streams.some((s) => s.codec_type === 'audio'),
    packets,
    decodedFrames: decoded.split('\n').filter((l) => /^\d/.test(l)).length,
  };
}

/** True when every pts is greater than the one before. */
export function increasing(values: readonly number[]): boolean {
  return values.every((v, i) => i === 0 || v > (values[i - 1] as number));
}

/** Side of the square each frame is scaled to for frameLuma, px (fits any size change mid-file). */
const LUMA_SIDE = 96;

/** Each video frame's darkest and brightest luma (its Y plane scaled to 96², limited range 16…235), in order. */
export async function frameLuma(file: string): Promise<{ min: number; max: number }[]> {
  const args = ['-v', 'error', '-i', file, '-map', '0:v', '-fps_mode', 'passthrough', '-vf', `scale=${LUMA_SIDE}:${LUMA_SIDE}`, '-pix_fmt', 'yuv420p', '-f', 'rawvideo', '-'];
  const { stdout } = await run('ffmpeg', args, { encoding: 'buffer', maxBuffer: 256 * 1024 * 1024 });
  const frame = (LUMA_SIDE * LUMA_SIDE * 3) / 2;
  const out: { min: number; max: number }[] = [];
  for (let o = 0; o + frame <= stdout.length; o += frame) {
    const y = stdout.subarray(o, o + LUMA_SIDE * LUMA_SIDE);
    out.push({ min: Math.min(...y), max: Math.max(...y) });
  }
  return out;
}
