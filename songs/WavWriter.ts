/**
 * RIFF/WAVE writer: PCM 16-bit little-endian, interleaved stereo (44-byte header, no extra chunks,
 * so identical audio gives identical bytes).
 */

/** Bytes of the RIFF/WAVE header written here. */
export const WAV_HEADER_BYTES = 44;

/** Writes the 44-byte header of a 16-bit stereo PCM WAV of `n` frames at `buf[at]`. */
export function writeWavHeader(buf: Buffer, n: number, sampleRate: number, at = 0): void {
  const dataBytes = n * 4;
  buf.write('RIFF', at, 'ascii');
  buf.writeUInt32LE(36 + dataBytes, at + 4);
  buf.write('WAVE', at + 8, 'ascii');
  buf.write('fmt ', at + 12, 'ascii');
  buf.writeUInt32LE(16, at + 16);
  buf.writeUInt16LE(1, at + 20); // PCM
  buf.writeUInt16LE(2, at + 22);
  buf.writeUInt32LE(sampleRate, at + 24);
  buf.writeUInt32LE(sampleRate * 4, at + 28);
  buf.writeUInt16LE(4, at + 32);
  buf.writeUInt16LE(16, at + 34);
  buf.write('data', at + 36, 'ascii');
  buf.writeUInt32LE(dataBytes, at + 40);
}

/** Float samples → 16-bit WAV. Adds TPDF dither from a fixed-seed generator (deterministic). */
export function writeWav(L: Float32Array, R: Float32Array, n: number, sampleRate: number): Buffer {
  const buf = Buffer.alloc(WAV_HEADER_BYTES + n * 4);
  writeWavHeader(buf, n, sampleRate);
  new WavDither(buf, n).write(L, R, 0, n);
  return buf;
}

/**
 * Writes a WAV's samples span by span (progressive rendering): the dither generator carries over,
 * so spans written in order give the bytes writeWav gives. `buf` holds the 44-byte header first.
 */
export class WavDither {
  readonly #pcm: Int16Array;
  #s = 0x2545f491;

  constructor(buf: Buffer, n: number) {
    this.#pcm = new Int16Array(buf.buffer, buf.byteOffset + WAV_HEADER_BYTES, n * 2);
  }

  /** Converts L/R[from..to) into the buffer. */
  write(L: Float32Array, R: Float32Array, from: number, to: number): void {
    this.#s = ditherSpan(L, R, from, to, this.#pcm, this.#s);
  }
}

function ditherSpan(L: Float32Array, R: Float32Array, from: number, to: number, pcm: Int16Array, seed: number): number {
  let s = seed;
  for (let i = from; i < to; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const d1 = (s >>> 0) / 4294967296;
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const d2 = (s >>> 0) / 4294967296;
    const l = round16((L[i] as number) * 32767 + d1 - d2);
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const d3 = (s >>> 0) / 4294967296;
    const r = round16((R[i] as number) * 32767 + d2 - d3);
    pcm[2 * i] = l;
    pcm[2 * i + 1] = r;
  }
  return s;
}

/**
 * Math.round(v) clamped to int16, without Math.round (which V8 runs several times slower here):
 * truncate v + 32768.5 (positive, so truncation is floor), then correct the one-off error its
 * rounding can cause. Same result as Math.round for every finite v.
 */
export function round16(v: number): number {
  if (!(v > -32768.5)) return v <= -32768.5 ? -32768 : 0; // NaN → 0, as the int16 store of NaN
  if (v >= 32767.5) return 32767;
  let r = ((v + 32768.5) | 0) - 32768;
  if (r - v > 0.5) r -= 1;
  else if (v - r >= 0.5) r += 1;
  return r;
}
