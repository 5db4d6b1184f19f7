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

/** Each video frame's darkest and brightest luma (ffmpeg signalstats YMIN/YMAX, limited range 16…235), in order. */
export async function frameLuma(file: string): Promise<{ min: number; max: number }[]> {
  // The movie source takes a filter-graph string: quote the path for it.
  const graph = `movie='${file.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}',signalstats`;
  const { stdout } = await run('ffprobe', ['-v', 'error', '-f', 'lavfi', '-i', graph, '-show_entries', 'frame_tags=lavfi.signalstats.YMIN,lavfi.signalstats.YMAX', '-of', 'csv=p=0'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(',').map(Number))
    .map(([min, max]) => ({ min: min ?? NaN, max: max ?? NaN }));
}
