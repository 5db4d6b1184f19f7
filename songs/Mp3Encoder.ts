/**
 * MP3 encoding with the native LAME CLI (docs/decisions/0002-mp3-encoder.md): CBR 192 kbps,
 * 48 kHz, joint stereo. LAME writes no timestamps, so the same WAV gives the same bytes; its
 * Info/LAME tag carries the encoder delay and padding for gapless players.
 */
import { spawn } from 'node:child_process';

export class Mp3EncodeError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'Mp3EncodeError';
  }
}

/** LAME binary; override with REVERIE_LAME_PATH for a non-standard install. */
const LAME = process.env.REVERIE_LAME_PATH ?? 'lame';
/**
 * -b 192 --cbr: constant 192 kbps (every frame 576 bytes at 48 kHz); -q 3: LAME's default
 * algorithm quality; --noreplaygain: skips the ReplayGain scan (we normalise loudness ourselves);
 * --resample 48: output rate pinned to 48 kHz.
 */
export const LAME_ARGS = ['--silent', '--nohist', '--noreplaygain', '-b', '192', '--cbr', '-q', '3', '-m', 'j', '--resample', '48', '-', '-'] as const;

/**
 * Encodes a 16-bit stereo 48 kHz WAV (as written by WavWriter) to MP3. `onChunk` sees the bytes as
 * LAME writes them, in order (their concatenation is the result): players can start on them.
 * LAME rewrites nothing at the end when writing to a pipe, so the first bytes are final.
 */
export function encodeMp3(wav: Buffer, onChunk?: (chunk: Buffer) => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(LAME, [...LAME_ARGS], { stdio: ['pipe', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    const errChunks: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => {
      chunks.push(c);
      onChunk?.(c);
    });
    child.stderr.on('data', (c: Buffer) => errChunks.push(c));
    child.on('error', (err) => reject(new Mp3EncodeError(`lame failed to start [bin:${LAME}]`, { cause: err })));
    child.on('close', (code, signal) => {
      if (code === 0) resolve(Buffer.concat(chunks));
      else reject(new Mp3EncodeError(`lame exited [code:${code}] [signal:${signal}] ${Buffer.concat(errChunks).toString('utf8').slice(0, 400)}`));
    });
    child.stdin.on('error', () => {
      // EPIPE when lame dies early; reported by 'close'.
    });
    child.stdin.end(wav);
  });
}
