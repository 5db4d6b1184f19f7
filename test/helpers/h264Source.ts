/**
 * A synthetic H.264 source for OBS-like publishers: `frames` pictures of size×size, each carrying
 * a 16-bit frame counter as the 4×4 grid of black/white blocks that `stampedFrames.ts` reads back
 * in a browser (counter n = frame index + 1), plus seeded noise inside every block so that the
 * stream — and the node's re-encode of it — runs at a realistic bitrate (a clean test pattern
 * encodes at a tenth of what diffusion output costs and flatters every per-byte cost).
 *
 * Encoded once with ffmpeg/libx264 the way OBS is told to for WHIP (baseline, no B-frames,
 * zerolatency, fixed GOP) with an access-unit delimiter before every picture, and cached in the
 * temp directory by its parameters. `accessUnits()` splits the Annex B file at those delimiters.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NAL_AUD, nalType } from '../../media/H264Nal.ts';

export interface H264SourceOptions {
  /** Picture width and height, px (a multiple of 16). Default 512. */
  size?: number;
  /** Pictures in the loop; the counter wraps after it. Default 300 (10 s at 30 fps). */
  frames?: number;
  /** Frame rate the encoder is told, fps. Default 30. */
  fps?: number;
  /** x264 target bitrate, kbit/s. Default 1500 (what OBS users set for 512² and what diffusion output needs). */
  bitrateKbps?: number;
  /** Key-frame interval, pictures. Default 60 (2 s at 30 fps, OBS's usual setting). */
  gop?: number;
  /** Noise amplitude inside the blocks, 0–60 luma steps. Default 40. */
  noise?: number;
  /**
   * Every picture the same (counter 1, the same noise): a still camera, for tests where only the
   * stream's params may change the output. Default false.
   */
  still?: boolean;
}

const GRID = 4;

/** Path of the cached Annex B file for these options (encoding it first if needed). */
export async function stampedH264(opts: H264SourceOptions = {}): Promise<string> {
  const size = opts.size ?? 512;
  const frames = opts.frames ?? 300;
  const fps = opts.fps ?? 30;
  const kbps = opts.bitrateKbps ?? 1500;
  const gop = opts.gop ?? 60;
  const noise = Math.min(60, Math.max(0, opts.noise ?? 40));
  const still = opts.still === true;
  const path = join(tmpdir(), `reverie-stamped-${size}-${frames}-${fps}-${kbps}-${gop}-${noise}${still ? '-still' : ''}.h264`);
  if (existsSync(path)) return path;
  const partial = `${path}.${process.pid}.part`;
  const ffmpeg = spawn(
    'ffmpeg',
    [
      ...['-hide_banner', '-loglevel', 'error', '-y'],
      ...['-f', 'rawvideo', '-pix_fmt', 'yuv420p', '-s', `${size}x${size}`, '-r', String(fps), '-i', '-'],
      ...['-c:v', 'libx264', '-preset', 'ultrafast', '-tune', 'zerolatency', '-profile:v', 'baseline', '-level', '3.1'],
      ...['-b:v', `${kbps}k`, '-maxrate', `${kbps}k`, '-bufsize', `${kbps}k`],
      ...['-x264-params', `aud=1:keyint=${gop}:min-keyint=${gop}:scenecut=0:bframes=0`],
      ...['-f', 'h264', partial],
    ],
    { stdio: ['pipe', 'ignore', 'pipe'] },
  );
  let stderr = '';
  ffmpeg.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<void>((resolve, reject) => {
    ffmpeg.once('error', reject);
    ffmpeg.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`ffmpeg exited ${code}: ${stderr.trim()}`))));
  });
  let seed = 0x2545f491;
  const rand = () => {
    // xorshift32: deterministic noise, so the cached file is the same on every machine.
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x100000000;
  };
  const block = size / GRID;
  const frame = Buffer.alloc((size * size * 3) / 2, 128);
  for (let i = 0; i < frames; i++) {
    const n = still ? 1 : (i % 0xffff) + 1;
    if (still && i > 0) {
      if (!ffmpeg.stdin.write(frame)) await new Promise((r) => ffmpeg.stdin.once('drain', r));
      continue;
    }
    for (let y = 0; y < size; y++) {
      const row = Math.floor(y / block) * GRID;
      for (let x = 0; x < size; x++) {
        const bit = (n >> (row + Math.floor(x / block))) & 1;
        const base = bit ? 210 : 45;
        frame[y * size + x] = base + Math.round((rand() - 0.5) * noise);
      }
    }
    if (!ffmpeg.stdin.write(frame)) await new Promise((r) => ffmpeg.stdin.once('drain', r));
  }
  ffmpeg.stdin.end();
  await done;
  renameSync(partial, path);
  return path;
}

/** Splits an Annex B stream encoded with `aud=1` into access units (each starts with its delimiter). */
export function accessUnits(annexB: Buffer): Buffer[] {
  const starts: number[] = [];
  for (let i = 0; i + 4 < annexB.length; i++) {
    // 00 00 01 09 or 00 00 00 01 09: an access-unit delimiter NAL (type 9).
    if (annexB[i] === 0 && annexB[i + 1] === 0 && annexB[i + 2] === 1 && nalType(annexB.subarray(i + 3)) === NAL_AUD) {
      starts.push(i > 0 && annexB[i - 1] === 0 ? i - 1 : i);
      i += 3;
    }
  }
  return starts.map((s, k) => annexB.subarray(s, starts[k + 1] ?? annexB.length));
}

/** Reads the cached source as access units. */
export function readAccessUnits(path: string): Buffer[] {
  return accessUnits(readFileSync(path));
}
