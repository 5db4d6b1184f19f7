/**
 * The stems of a take as one zip: five 16-bit stereo 48 kHz WAVs stored uncompressed (deflate
 * gains little on audio and would cost seconds), so each member's bytes lie contiguously in the
 * zip and one stem can be served as a byte range of it. Fixed timestamps (1980-01-01): the same
 * stems give the same bytes.
 *
 * Sum rule: drums, bass, chords and lead are the mastered float stems rounded to 16 bits (no
 * dither); the effects stem is the take's WAV minus those four, sample by sample. So the five
 * stems add up to the take's WAV exactly (the effects stem carries the mix's dither and the
 * others' rounding, at most a few LSB, ≈ −84 dBFS).
 */
import { crc32 } from 'node:zlib';
import { STEM_NAMES, type StemName, type StereoBuffer } from './Mixer.ts';
import { round16, WAV_HEADER_BYTES, writeWavHeader } from './WavWriter.ts';

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

/** Builds the zip from the mastered float stems and the take's WAV (as written by writeWav). */
export function buildStemsZip(stems: Record<StemName, StereoBuffer>, mixWav: Buffer, n: number, sampleRate: number): StemsZip {
  const wavBytes = WAV_HEADER_BYTES + n * 4;
  const names = STEM_NAMES.map((s) => `${s}.wav`);
  const nameBytes = names.reduce((a, s) => a + s.length, 0);
  const total = STEM_NAMES.length * (LOCAL + wavBytes) + nameBytes + STEM_NAMES.length * CENTRAL + nameBytes + END;
  const zip = Buffer.alloc(total);
  const mix = new Int16Array(mixWav.buffer, mixWav.byteOffset + WAV_HEADER_BYTES, n * 2);
  const offsets: number[] = [];
  const members = {} as StemsZip['members'];
  let at = 0;
  let clipped = 0;
  // Running sum of the four dry stems as written, for the effects stem.
  const dry = new Int32Array(n * 2);
  // Member data starts at odd offsets (30-byte headers, odd names): fill an aligned scratch, then copy.
  const pcm = new Int16Array(n * 2);
  const pcmBytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  STEM_NAMES.forEach((stem, k) => {
    const name = names[k] as string;
    offsets.push(at);
    const dataAt = at + LOCAL + name.length;
    writeWavHeader(zip, n, sampleRate, dataAt);
    const { L, R } = stems[stem];
    if (stem !== 'effects') {
      for (let i = 0; i < n; i++) {
        const l = round16((L[i] as number) * 32767);
        const r = round16((R[i] as number) * 32767);
        pcm[2 * i] = l;
        pcm[2 * i + 1] = r;
        dry[2 * i] = (dry[2 * i] as number) + l;
        dry[2 * i + 1] = (dry[2 * i + 1] as number) + r;
      }
    } else {
      for (let i = 0; i < 2 * n; i++) {
        const v = (mix[i] as number) - (dry[i] as number);
        if (v > 32767 || v < -32768) clipped++;
        pcm[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
      }
    }
    pcmBytes.copy(zip, dataAt + WAV_HEADER_BYTES);
    const data = zip.subarray(dataAt, dataAt + wavBytes);
    const crc = crc32(data);
    zip.writeUInt32LE(0x04034b50, at);
    zip.writeUInt16LE(10, at + 4); // version needed: 1.0 (stored)
    zip.writeUInt16LE(0, at + 6); // flags
    zip.writeUInt16LE(0, at + 8); // method: stored
    zip.writeUInt16LE(0, at + 10); // time
    zip.writeUInt16LE(DOS_DATE, at + 12);
    zip.writeUInt32LE(crc, at + 14);
    zip.writeUInt32LE(wavBytes, at + 18);
    zip.writeUInt32LE(wavBytes, at + 22);
    zip.writeUInt16LE(name.length, at + 26);
    zip.writeUInt16LE(0, at + 28);
    zip.write(name, at + LOCAL, 'ascii');
    members[stem] = { offset: dataAt, size: wavBytes };
    at = dataAt + wavBytes;
  });
  const cdStart = at;
  names.forEach((name, k) => {
    const local = offsets[k] as number;
    zip.writeUInt32LE(0x02014b50, at);
    zip.writeUInt16LE(20, at + 4); // made by: 2.0, MS-DOS attributes
    zip.writeUInt16LE(10, at + 6);
    zip.writeUInt16LE(0, at + 8);
    zip.writeUInt16LE(0, at + 10);
    zip.writeUInt16LE(0, at + 12);
    zip.writeUInt16LE(DOS_DATE, at + 14);
    zip.writeUInt32LE(zip.readUInt32LE(local + 14), at + 16); // crc
    zip.writeUInt32LE(wavBytes, at + 20);
    zip.writeUInt32LE(wavBytes, at + 24);
    zip.writeUInt16LE(name.length, at + 28);
    // extra, comment, disk, internal and external attributes: 0 (Buffer.alloc zero-fills)
    zip.writeUInt32LE(local, at + 42);
    zip.write(name, at + CENTRAL, 'ascii');
    at += CENTRAL + name.length;
  });
  const cdSize = at - cdStart;
  zip.writeUInt32LE(0x06054b50, at);
  zip.writeUInt16LE(STEM_NAMES.length, at + 8);
  zip.writeUInt16LE(STEM_NAMES.length, at + 10);
  zip.writeUInt32LE(cdSize, at + 12);
  zip.writeUInt32LE(cdStart, at + 16);
  at += END;
  if (at !== total) throw new Error(`stems zip size mismatch [expected:${total}] [wrote:${at}]`);
  return { zip, members, clipped };
}
