/**
 * The stems of a take as one zip: five 16-bit stereo 48 kHz WAVs stored uncompressed (deflate
 * gains little on audio and would cost seconds), so each member's bytes lie contiguously in the
 * zip and one stem can be served as a byte range of it. Fixed timestamps (1980-01-01): the same
 * stems give the same bytes.
 *
 * Sum rule: drums, bass, chords and lead are the dry float stems times the master gain, rounded to
 * 16 bits (no dither); the effects stem is the take's WAV minus those four, sample by sample. So the five
 * stems add up to the take's WAV exactly (the effects stem carries the mix's dither and the
 * others' rounding, at most a few LSB, ≈ −84 dBFS).
 */
import { writeSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import { STEM_NAMES, type MasteredStems, type StemName, type StereoBuffer } from './Mixer.ts';
import { WAV_HEADER_BYTES, writeWavHeader } from './WavWriter.ts';

export interface StemsZip {
  zip: Buffer;
  /** Byte offset and size of each stem's WAV inside `zip`. */
  members: Record<StemName, { offset: number; size: number }>;
  /** Samples where the effects stem hit the int16 limits (then the sum is off there); 0 in practice. */
  clipped: number;
}

const LOCAL = 30;
const CENTRAL = 46;
const END = 22;
/** DOS date of 1980-01-01, time 00:00. */
const DOS_DATE = (0 << 9) | (1 << 5) | 1;

/** Zip-align extra field id (as Android's zipalign writes): pads a local header so member data starts 2-byte aligned. */
const ALIGN_EXTRA_ID = 0xd935;

/** Where the zip's bytes go: appended in order, and a few header bytes patched afterwards (the CRCs). */
export interface ZipSink {
  write(bytes: Uint8Array): void;
  /** Overwrites bytes already written, at byte offset `at` of the zip. */
  patch(at: number, bytes: Uint8Array): void;
}

/** A zip in memory (tests and callers without a file to write to). */
class BufferSink implements ZipSink {
  readonly buf: Buffer;
  at = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  write(bytes: Uint8Array): void {
    this.buf.set(bytes, this.at);
    this.at += bytes.length;
  }

  patch(at: number, bytes: Uint8Array): void {
    this.buf.set(bytes, at);
  }
}

/** A zip written to an open file descriptor (the blob store's file for it). */
export class FileSink implements ZipSink {
  readonly #fd: number;
  constructor(fd: number) {
    this.#fd = fd;
  }

  write(bytes: Uint8Array): void {
    let off = 0;
    while (off < bytes.length) off += writeSync(this.#fd, bytes, off, bytes.length - off);
  }

  patch(at: number, bytes: Uint8Array): void {
    // Positional write: the file's offset for the next write() stays where it was.
    writeSync(this.#fd, bytes, 0, bytes.length, at);
  }
}

/** Frames converted per chunk: 1 MiB of 16-bit stereo, reused for every chunk of every stem. */
const CHUNK_FRAMES = 1 << 18;
let chunkBuf: Int16Array | null = null;

/** Builds the zip in memory from the dry float stems, their master gain and the take's WAV (as written by writeWav). */
export function buildStemsZip(stems: MasteredStems, mixWav: Buffer, n: number, sampleRate: number): StemsZip {
  const sink = new BufferSink(stemsZipSize(n));
  const { members, clipped } = writeStemsZip(stems, mixWav, n, sampleRate, sink);
  return { zip: sink.buf, members, clipped };
}

/** Bytes of the zip of `n`-frame stems. */
export function stemsZipSize(n: number): number {
  return layout(n).total;
}

function layout(n: number): { names: string[]; headLen: number[]; wavBytes: number; total: number } {
  const wavBytes = WAV_HEADER_BYTES + n * 4;
  const names = STEM_NAMES.map((s) => `${s}.wav`);
  // Local header + name (+ a 5-byte alignment extra when that sum is odd; sizes of WAVs are even).
  const headLen = names.map((nm) => LOCAL + nm.length + ((LOCAL + nm.length) % 2 === 1 ? 5 : 0));
  const nameBytes = names.reduce((a, s) => a + s.length, 0);
  const total = headLen.reduce((a, h) => a + h + wavBytes, 0) + STEM_NAMES.length * CENTRAL + nameBytes + END;
  return { names, headLen, wavBytes, total };
}

/**
 * Writes the zip member by member into `sink`, converting the stems to 16 bits a chunk at a time
 * into one reused 1 MiB buffer: no 115 MB zip is ever held in memory (fresh memory costs ≈ 3.5 ms
 * per MB to first touch on our VMs; written to a file, the bytes go straight to the page cache).
 * Same bytes as building it whole (the layout and the arithmetic are the same).
 */
export function writeStemsZip(stems: MasteredStems, mixWav: Buffer, n: number, sampleRate: number, sink: ZipSink): Omit<StemsZip, 'zip'> {
  const { names, headLen, wavBytes, total } = layout(n);
  chunkBuf ??= new Int16Array(CHUNK_FRAMES * 2);
  const chunk = chunkBuf;
  const chunkBytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  const members = {} as StemsZip['members'];
  const offsets: number[] = [];
  const crcs: number[] = [];
  const mix = new Int16Array(mixWav.buffer, mixWav.byteOffset + WAV_HEADER_BYTES, n * 2);
  const s = stems.dry;
  let clipped = 0;
  let at = 0;
  names.forEach((name, k) => {
    const stem = STEM_NAMES[k] as StemName;
    const h = headLen[k] as number;
    const dataAt = at + h;
    offsets.push(at);
    const head = Buffer.alloc(h + WAV_HEADER_BYTES);
    head.writeUInt32LE(0x04034b50, 0);
    head.writeUInt16LE(10, 4); // version needed: 1.0 (stored)
    head.writeUInt16LE(0, 6); // flags
    head.writeUInt16LE(0, 8); // method: stored
    head.writeUInt16LE(0, 10); // time 00:00
    head.writeUInt16LE(DOS_DATE, 12);
    head.writeUInt32LE(0, 14); // crc, patched once the member is written
    head.writeUInt32LE(wavBytes, 18);
    head.writeUInt32LE(wavBytes, 22);
    head.writeUInt16LE(name.length, 26);
    const extra = h - LOCAL - name.length;
    head.writeUInt16LE(extra, 28);
    head.write(name, LOCAL, 'ascii');
    if (extra > 0) {
      head.writeUInt16LE(ALIGN_EXTRA_ID, LOCAL + name.length);
      head.writeUInt16LE(extra - 4, LOCAL + name.length + 2);
    }
    writeWavHeader(head, n, sampleRate, h);
    sink.write(head);
    let crc = crc32(head.subarray(h));
    for (let a = 0; a < n; a += CHUNK_FRAMES) {
      const b = Math.min(n, a + CHUNK_FRAMES);
      if (stem === 'effects') clipped += effectsChunk(s.drums, s.bass, s.chords, s.lead, stems.gain, mix, a, b, chunk);
      else dryChunk(s[stem].L, s[stem].R, stems.gain, a, b, chunk);
      const bytes = chunkBytes.subarray(0, (b - a) * 4);
      crc = crc32(bytes, crc);
      sink.write(bytes);
    }
    crcs.push(crc);
    const c = Buffer.allocUnsafe(4);
    c.writeUInt32LE(crc, 0);
    sink.patch(at + 14, c);
    members[stem] = { offset: dataAt, size: wavBytes };
    at = dataAt + wavBytes;
  });
  const cdStart = at;
  const tail = Buffer.alloc(total - at);
  let p = 0;
  names.forEach((name, k) => {
    tail.writeUInt32LE(0x02014b50, p);
    tail.writeUInt16LE(20, p + 4); // made by: 2.0, MS-DOS attributes
    tail.writeUInt16LE(10, p + 6);
    tail.writeUInt16LE(0, p + 8);
    tail.writeUInt16LE(0, p + 10);
    tail.writeUInt16LE(0, p + 12);
    tail.writeUInt16LE(DOS_DATE, p + 14);
    tail.writeUInt32LE(crcs[k] as number, p + 16);
    tail.writeUInt32LE(wavBytes, p + 20);
    tail.writeUInt32LE(wavBytes, p + 24);
    tail.writeUInt16LE(name.length, p + 28);
    // extra and comment lengths, disk, internal and external attributes: 0 (Buffer.alloc)
    tail.writeUInt32LE(offsets[k] as number, p + 42);
    tail.write(name, p + CENTRAL, 'ascii');
    p += CENTRAL + name.length;
  });
  const cdSize = p;
  tail.writeUInt32LE(0x06054b50, p);
  tail.writeUInt32LE(0, p + 4); // disk numbers
  tail.writeUInt16LE(STEM_NAMES.length, p + 8);
  tail.writeUInt16LE(STEM_NAMES.length, p + 10);
  tail.writeUInt32LE(cdSize, p + 12);
  tail.writeUInt32LE(cdStart, p + 16);
  tail.writeUInt16LE(0, p + 20); // comment length
  p += END;
  if (at + p !== total) throw new Error(`stems zip size mismatch [expected:${total}] [wrote:${at + p}]`);
  sink.write(tail);
  return { members, clipped };
}

/** A dry stem through the master gain, rounded to 16 bits, frames [a, b) into `out` (interleaved). */
function dryChunk(L: Float32Array, R: Float32Array, gain: Float32Array, a: number, b: number, out: Int16Array): void {
  for (let i = a, j = 0; i < b; i++, j += 2) {
    const g = gain[i] as number;
    out[j] = q16((L[i] as number) * g);
    out[j + 1] = q16((R[i] as number) * g);
  }
}

/**
 * effects = mix − the four dry stems as rounded above (clamped; returns how many samples needed
 * clamping), frames [a, b) into `out`.
 */
function effectsChunk(
  d: StereoBuffer, b_: StereoBuffer, c: StereoBuffer, l: StereoBuffer, gain: Float32Array, mix: Int16Array, a: number, b: number, out: Int16Array,
): number {
  let clipped = 0;
  const dL = d.L, dR = d.R, bL = b_.L, bR = b_.R, cL = c.L, cR = c.R, lL = l.L, lR = l.R;
  for (let i = a, j = 0; i < b; i++, j += 2) {
    const g = gain[i] as number;
    let e = (mix[2 * i] as number) - q16((dL[i] as number) * g) - q16((bL[i] as number) * g) - q16((cL[i] as number) * g) - q16((lL[i] as number) * g);
    if (e > 32767 || e < -32768) {
      e = e > 32767 ? 32767 : -32768;
      clipped++;
    }
    out[j] = e;
    let f = (mix[2 * i + 1] as number) - q16((dR[i] as number) * g) - q16((bR[i] as number) * g) - q16((cR[i] as number) * g) - q16((lR[i] as number) * g);
    if (f > 32767 || f < -32768) {
      f = f > 32767 ? 32767 : -32768;
      clipped++;
    }
    out[j + 1] = f;
  }
  return clipped;
}

/** Float (±1) → int16, rounding half up, clamped. The sum rule does not depend on how stems round. */
function q16(x: number): number {
  const v = x * 32767 + 32768.5;
  if (!(v > 0)) return -32768; // also NaN
  if (v >= 65535) return 32767;
  return (v | 0) - 32768;
}
