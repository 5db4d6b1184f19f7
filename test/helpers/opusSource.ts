/**
 * A publisher's microphone for OBS-like publishers: `seconds` of 48 kHz stereo sound (a tone with a
 * slow tremolo over quiet pink noise: never silence, so the node decodes and encodes it like a real
 * voice) encoded with ffmpeg/libopus in 20 ms frames at 64 kbit/s, as OBS sends, and cached in the
 * temp directory as a packet file: each Opus packet as a 16-bit big-endian length and its bytes.
 * `opusPackets()` reads it back.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface OpusSourceOptions {
  /** Length of the loop, s. Default 10. */
  seconds?: number;
  /** Tone, Hz. Default 220. */
  hz?: number;
}

/** Path of the cached packet file for these options (encoding it first if needed). */
export async function opusTone(opts: OpusSourceOptions = {}): Promise<string> {
  const seconds = opts.seconds ?? 10;
  const hz = opts.hz ?? 220;
  const path = join(tmpdir(), `reverie-opus-tone-${seconds}-${hz}.opus20`);
  if (existsSync(path)) return path;
  const graph = `sine=frequency=${hz}:sample_rate=48000:duration=${seconds},volume=0.4,tremolo=f=2:d=0.5[t];anoisesrc=color=pink:amplitude=0.03:sample_rate=48000:duration=${seconds}:seed=7[n];[t][n]amix=inputs=2:normalize=0,aformat=channel_layouts=stereo`;
  const ogg = await new Promise<Buffer>((resolve, reject) => {
    const ff = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-filter_complex', graph, '-c:a', 'libopus', '-b:a', '64000', '-frame_duration', '20', '-f', 'ogg', 'pipe:1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let stderr = '';
    ff.stdout.on('data', (d: Buffer) => out.push(d));
    ff.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    ff.once('error', reject);
    ff.once('exit', (code) => (code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`ffmpeg exited ${code}: ${stderr.trim()}`))));
  });
  // The Ogg stream's packets after its two headers (OpusHead, OpusTags): one 20 ms frame each.
  const packets = oggPackets(ogg).slice(2);
  const file = Buffer.concat(packets.flatMap((p) => [Buffer.from([p.length >> 8, p.length & 0xff]), p]));
  const partial = `${path}.${process.pid}.part`;
  writeFileSync(partial, file);
  renameSync(partial, path);
  return path;
}

/** The packets of a packet file written by opusTone. */
export function opusPackets(path: string): Buffer[] {
  const file = readFileSync(path);
  const out: Buffer[] = [];
  for (let at = 0; at + 2 <= file.length; ) {
    const n = file.readUInt16BE(at);
    out.push(file.subarray(at + 2, at + 2 + n));
    at += 2 + n;
  }
  return out;
}

/** The packets of an Ogg stream (one logical stream): segments joined until one shorter than 255 bytes. */
function oggPackets(ogg: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let partial: Buffer[] = [];
  for (let at = 0; at + 27 <= ogg.length && ogg.toString('ascii', at, at + 4) === 'OggS'; ) {
    const segments = ogg[at + 26] as number;
    let body = at + 27 + segments;
    for (let i = 0; i < segments; i++) {
      const len = ogg[at + 27 + i] as number;
      partial.push(ogg.subarray(body, body + len));
      body += len;
      if (len < 255) {
        out.push(Buffer.concat(partial));
        partial = [];
      }
    }
    at = body;
  }
  return out;
}
