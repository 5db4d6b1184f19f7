/**
 * MP3 encoding with the native LAME CLI (docs/decisions/0002-mp3-encoder.md): CBR 192 kbps,
 * 48 kHz, joint stereo. LAME writes no timestamps, so the same WAV gives the same bytes; its
 * Info/LAME tag carries the encoder delay and padding for gapless players.
 */
import { EncoderHost, type HostedJob } from './EncoderHost.ts';

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
  const enc = new Mp3Stream(onChunk);
  enc.write(wav);
  return enc.end();
}

/**
 * One LAME process fed a WAV piece by piece (progressive rendering: the first section is encoded
 * while the rest renders). The pieces must be written in order and not changed afterwards (they
 * are queued without a copy). LAME runs under the thread's EncoderHost, not as our own child:
 * forking the render process would make its next writes to every page fault again.
 */
export class Mp3Stream {
  readonly #job: HostedJob;
  readonly #done: Promise<Buffer>;
  readonly #first: Promise<void>;

  constructor(onChunk?: (chunk: Buffer) => void) {
    const chunks: Buffer[] = [];
    let firstSeen: () => void = () => {};
    // Settles on the first MP3 bytes, or when LAME ends without any (then `end()` reports why).
    this.#first = new Promise<void>((resolve) => {
      firstSeen = resolve;
    });
    let resolveDone: (b: Buffer) => void = () => {};
    let rejectDone: (e: Error) => void = () => {};
    this.#done = new Promise<Buffer>((resolve, reject) => {
      resolveDone = resolve;
      rejectDone = reject;
    });
    // Keeps an early failure from being unhandled before end() is awaited.
    this.#done.catch(() => {});
    this.#job = EncoderHost.get().start([LAME, ...LAME_ARGS], {
      onStdout: (c) => {
        chunks.push(c);
        firstSeen();
        onChunk?.(c);
      },
      onExit: ({ code, signal, stderr, error }) => {
        firstSeen();
        if (error !== null) rejectDone(new Mp3EncodeError(`lame failed to start [bin:${LAME}]: ${error}`));
        else if (code === 0) resolveDone(Buffer.concat(chunks));
        else rejectDone(new Mp3EncodeError(`lame exited [code:${code}] [signal:${signal}] ${stderr}`));
      },
    });
  }

  write(piece: Buffer): void {
    this.#job.write(piece);
  }

  /** Settles once LAME has written its first bytes (or has ended). */
  firstOutput(): Promise<void> {
    return this.#first;
  }

  /** Closes LAME's input; resolves to the whole MP3. */
  end(): Promise<Buffer> {
    this.#job.end();
    return this.#done;
  }

  /** Stops LAME (a render that failed half-way). */
  abort(): void {
    this.#job.kill();
  }
}
