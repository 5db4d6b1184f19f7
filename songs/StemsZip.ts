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
import { crc32 } from 'node:zlib';
import { STEM_NAMES, type MasteredStems, type StemName } from './Mixer.ts';
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

/** Builds the zip from the dry float stems, their master gain and the take's WAV (as written by writeWav). */
export function buildStemsZip(stems: MasteredStems, mixWav: Buffer, n: number, sampleRate: number): StemsZip {
  const wavBytes = WAV_HEADER_BYTES + n * 4;
  const names = STEM_NAMES.map((s) => `${s}.wav`);
  // Local header + name (+ a 5-byte alignment extra when that sum is odd; sizes of WAVs are even).
  const headLen = names.map((nm) => LOCAL + nm.length + ((LOCAL + nm.length) % 2 === 1 ? 5 : 0));
  const nameBytes = names.reduce((a, s) => a + s.length, 0);
  const total = headLen.reduce((a, h) => a + h + wavBytes, 0) + STEM_NAMES.length * CENTRAL + nameBytes + END;
  // Every byte is written below (headers field by field, data sample by sample): no zero-fill needed.
  const zip = Buffer.allocUnsafe(total);
  const members = {} as StemsZip['members'];
  const offsets: number[] = [];
  const views = {} as Record<StemName, Int16Array>;
  let at = 0;
  names.forEach((name, k) => {
    const stem = STEM_NAMES[k] as StemName;
    const dataAt = at + (headLen[k] as number);
    offsets.push(at);
    zip.writeUInt32LE(0x04034b50, at);
    zip.writeUInt16LE(10, at + 4); // version needed: 1.0 (stored)
    zip.writeUInt16LE(0, at + 6); // flags
    zip.writeUInt16LE(0, at + 8); // method: stored
    zip.writeUInt16LE(0, at + 10); // time 00:00
    zip.writeUInt16LE(DOS_DATE, at + 12);
    zip.writeUInt32LE(0, at + 14); // crc, filled in below
    zip.writeUInt32LE(wavBytes, at + 18);
    zip.writeUInt32LE(wavBytes, at + 22);
    zip.writeUInt16LE(name.length, at + 26);
    const extra = (headLen[k] as number) - LOCAL - name.length;
    zip.writeUInt16LE(extra, at + 28);
    zip.write(name, at + LOCAL, 'ascii');
    if (extra > 0) {
      zip.writeUInt16LE(ALIGN_EXTRA_ID, at + LOCAL + name.length);
      zip.writeUInt16LE(extra - 4, at + LOCAL + name.length + 2);
      zip.fill(0, at + LOCAL + name.length + 4, dataAt);
    }
    writeWavHeader(zip, n, sampleRate, dataAt);
    views[stem] = new Int16Array(zip.buffer, zip.byteOffset + dataAt + WAV_HEADER_BYTES, n * 2);
    members[stem] = { offset: dataAt, size: wavBytes };
    at = dataAt + wavBytes;
  });
  const mix = new Int16Array(mixWav.buffer, mixWav.byteOffset + WAV_HEADER_BYTES, n * 2);
  const clipped = fillStems(stems, mix, views, n);
  names.forEach((_, k) => {
    const stem = STEM_NAMES[k] as StemName;
    const m = members[stem];
    zip.writeUInt32LE(crc32(zip.subarray(m.offset, m.offset + m.size)), (offsets[k] as number) + 14);
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
    zip.fill(0, at + 30, at + 42); // extra and comment lengths, disk, internal and external attributes
    zip.writeUInt32LE(local, at + 42);
    zip.write(name, at + CENTRAL, 'ascii');
    at += CENTRAL + name.length;
  });
  const cdSize = at - cdStart;
  zip.writeUInt32LE(0x06054b50, at);
  zip.writeUInt32LE(0, at + 4); // disk numbers
  zip.writeUInt16LE(STEM_NAMES.length, at + 8);
  zip.writeUInt16LE(STEM_NAMES.length, at + 10);
  zip.writeUInt32LE(cdSize, at + 12);
  zip.writeUInt32LE(cdStart, at + 16);
  zip.writeUInt16LE(0, at + 20); // comment length
  at += END;
  if (at !== total) throw new Error(`stems zip size mismatch [expected:${total}] [wrote:${at}]`);
  return { zip, members, clipped };
}

/**
 * One pass over the samples: the four dry stems through the master gain, rounded to 16 bits, and
 * effects = mix − their sum (clamped; returns how many samples needed clamping).
 */
function fillStems(stems: MasteredStems, mix: Int16Array, v: Record<StemName, Int16Array>, n: number): number {
  const oD = v.drums;
  const oB = v.bass;
  const oC = v.chords;
  const oL = v.lead;
  const oE = v.effects;
  const gain = stems.gain;
  const s = stems.dry;
  let clipped = 0;
  const channels: [Float32Array, Float32Array, Float32Array, Float32Array, number][] = [
    [s.drums.L, s.bass.L, s.chords.L, s.lead.L, 0],
    [s.drums.R, s.bass.R, s.chords.R, s.lead.R, 1],
  ];
  for (const [sd, sb, sc, sl, c] of channels) {
    for (let i = 0; i < n; i++) {
      const j = 2 * i + c;
      const g = gain[i] as number;
      const d = q16((sd[i] as number) * g);
      const b = q16((sb[i] as number) * g);
      const h = q16((sc[i] as number) * g);
      const l = q16((sl[i] as number) * g);
      oD[j] = d;
      oB[j] = b;
      oC[j] = h;
      oL[j] = l;
      let e = (mix[j] as number) - d - b - h - l;
      if (e > 32767 || e < -32768) {
        e = e > 32767 ? 32767 : -32768;
        clipped++;
      }
      oE[j] = e;
    }
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
