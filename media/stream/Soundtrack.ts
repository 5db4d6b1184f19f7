/**
 * A song's take playing as a stream's soundtrack: the take's PCM and where it plays on the node's
 * clock. `render` mixes it into a block of output audio, sample by sample, over the publisher's
 * audio (ducked while the song sounds) or alone.
 *
 * The take's timeline is fixed at `startAt` (ms epoch): output sample k of a block that begins at
 * wall time T plays take frame round((T − startAt)·48) + k, and every later block continues where
 * the last ended, so the song is sample-accurate and a loop is gapless (frame len wraps to frame 0,
 * the bar grid of a take rendered as a loop goes on across the seam). A stream whose publisher
 * comes later hears the song where it is by then, as a radio would.
 *
 * Format: 48 kHz interleaved stereo int16 in and out (the takes' WAVs and the outputs' AAC share it).
 */
import { InvalidStateError } from '../errors.ts';
import { OPUS_PCM_RATE } from '../gst/OpusDecoderBin.ts';

/** Hz: the soundtrack mixes at the rate Opus decodes to and encodes from. */
export const SOUNDTRACK_SAMPLE_RATE = OPUS_PCM_RATE;
/** Bytes of the RIFF/WAVE header of the takes' WAVs (songs/WavWriter.ts writes no other chunk). */
const WAV_HEADER_BYTES = 44;
/** Time the publisher's gain takes to move between full and ducked, ms: a step would click. */
const DUCK_RAMP_MS = 10;

/** What the node plays: the API has checked the song (the caller's, rendered) and the numbers. */
export interface SoundtrackSpec {
  songId: string;
  take: 1 | 2;
  /** Blob key of the take's WAV (`songs/<songId>/<take>.wav`). */
  wavKey: string;
  /** ms epoch of the take's first sample on the node's clock. */
  startAt: number;
  /** Start again at the take's first sample after its last, with no gap. */
  loop: boolean;
  /** Gain of the song, dB (0: as rendered). */
  gainDb: number;
  /** Gain of the publisher's audio while the song sounds, dB (0: no ducking; −60: muted). */
  duckPublisherDb: number;
}

/**
 * - `waiting`: startAt is still ahead;
 * - `playing`: the take sounds (looping ones stay here);
 * - `ended`: a take without loop played to its end.
 */
export type SoundtrackState = 'waiting' | 'playing' | 'ended';

export interface SoundtrackStatus {
  songId: string;
  take: 1 | 2;
  state: SoundtrackState;
  /** Where in the take the output is, s (0 while waiting; its length once ended). */
  positionS: number;
  /** Length of the take, s. */
  durationS: number;
  /** Whole passes through the take completed (loops). */
  loops: number;
  loop: boolean;
  gainDb: number;
  duckPublisherDb: number;
  startAt: number;
}

/** The interleaved stereo int16 samples of a take's WAV; throws on any other layout. */
export function takePcm(wav: Buffer): Int16Array {
  const ok =
    wav.length >= WAV_HEADER_BYTES &&
    wav.toString('ascii', 0, 4) === 'RIFF' &&
    wav.toString('ascii', 8, 12) === 'WAVE' &&
    wav.readUInt16LE(20) === 1 &&
    wav.readUInt16LE(22) === 2 &&
    wav.readUInt32LE(24) === SOUNDTRACK_SAMPLE_RATE &&
    wav.readUInt16LE(34) === 16 &&
    wav.toString('ascii', 36, 40) === 'data';
  if (!ok) throw new Error('not a 48 kHz 16-bit stereo PCM WAV');
  const bytes = Math.min(wav.readUInt32LE(40), wav.length - WAV_HEADER_BYTES) & ~3;
  // A copy: aligned for Int16Array, and the file's Buffer (maybe pooled) can go.
  const out = new Int16Array(bytes / 2);
  Buffer.from(out.buffer).set(wav.subarray(WAV_HEADER_BYTES, WAV_HEADER_BYTES + bytes));
  return out;
}

const dbToGain = (db: number): number => 10 ** (db / 20);

export class Soundtrack {
  readonly spec: SoundtrackSpec;
  readonly #pcm: Int16Array;
  /** Frames of the take. */
  readonly #frames: number;
  readonly #gain: number;
  readonly #duck: number;
  /** Take frame of the next output sample, counted from startAt (negative: not started); undefined before the first block. */
  #pos: number | undefined;
  /** The publisher's gain now (ramps between 1 and #duck). */
  #publisherGain = 1;
  readonly #rampStep = 1 / ((DUCK_RAMP_MS / 1000) * SOUNDTRACK_SAMPLE_RATE);

  constructor(spec: SoundtrackSpec, pcm: Int16Array) {
    if (pcm.length < 2) throw new InvalidStateError(`soundtrack take is empty [songId:${spec.songId}] [take:${spec.take}]`);
    this.spec = { ...spec };
    this.#pcm = pcm;
    this.#frames = pcm.length >> 1;
    this.#gain = dbToGain(spec.gainDb);
    this.#duck = dbToGain(spec.duckPublisherDb);
  }

  /** The take frame `pos` (from startAt) plays, or −1 when none does (before the start, after a non-looping end). */
  #frameAt(pos: number): number {
    if (pos < 0) return -1;
    if (pos < this.#frames) return pos;
    return this.spec.loop ? pos % this.#frames : -1;
  }

  /**
   * Mixes `frames` output frames starting at wall time `atMs` (the first block fixes the
   * timeline; later ones follow on) into `out` (interleaved, 2·frames long): the take at its gain
   * plus `publisher` (same layout; null: no publisher audio) ducked while the take sounds.
   */
  render(out: Int16Array, frames: number, atMs: number, publisher: Int16Array | null): void {
    this.#pos ??= Math.round(((atMs - this.spec.startAt) / 1000) * SOUNDTRACK_SAMPLE_RATE);
    const pcm = this.#pcm;
    const g = this.#gain;
    const step = this.#rampStep;
    let pg = this.#publisherGain;
    for (let i = 0; i < frames; i++) {
      const f = this.#frameAt(this.#pos + i);
      const target = f >= 0 ? this.#duck : 1;
      if (pg < target) pg = Math.min(target, pg + step);
      else if (pg > target) pg = Math.max(target, pg - step);
      for (let c = 0; c < 2; c++) {
        const j = 2 * i + c;
        let v = publisher ? (publisher[j] ?? 0) * pg : 0;
        if (f >= 0) v += (pcm[2 * f + c] as number) * g;
        // Saturate, never wrap: a wrapped sample is a full-scale click.
        out[j] = v > 32767 ? 32767 : v < -32768 ? -32768 : Math.round(v);
      }
    }
    this.#publisherGain = pg;
    this.#pos += frames;
  }

  /**
   * The take's own samples (no gain, no publisher) at wall time `atMs` onwards, `frames` of them
   * into `out` (interleaved; zeros where the take does not sound): what sound-reactive params read
   * (AudioMappings). Leaves the mix's position alone.
   */
  read(out: Int16Array, frames: number, atMs: number): void {
    const pos = Math.round(((atMs - this.spec.startAt) / 1000) * SOUNDTRACK_SAMPLE_RATE);
    const pcm = this.#pcm;
    for (let i = 0; i < frames; i++) {
      const f = this.#frameAt(pos + i);
      out[2 * i] = f >= 0 ? (pcm[2 * f] as number) : 0;
      out[2 * i + 1] = f >= 0 ? (pcm[2 * f + 1] as number) : 0;
    }
  }

  /** Output time that passed without a block (the node was too busy): the take moves on with the clock. */
  skip(frames: number, atMs: number): void {
    this.#pos ??= Math.round(((atMs - this.spec.startAt) / 1000) * SOUNDTRACK_SAMPLE_RATE);
    this.#pos += frames;
  }

  /** Where the take is on the node's clock (the blocks rendered follow the same clock, skip() keeps them on it). */
  status(nowMs = Date.now()): SoundtrackStatus {
    const pos = Math.round(((nowMs - this.spec.startAt) / 1000) * SOUNDTRACK_SAMPLE_RATE);
    const state: SoundtrackState = pos < 0 ? 'waiting' : !this.spec.loop && pos >= this.#frames ? 'ended' : 'playing';
    const frame = state === 'waiting' ? 0 : state === 'ended' ? this.#frames : pos % this.#frames;
    return {
      songId: this.spec.songId,
      take: this.spec.take,
      state,
      positionS: frame / SOUNDTRACK_SAMPLE_RATE,
      durationS: this.#frames / SOUNDTRACK_SAMPLE_RATE,
      loops: state === 'playing' && this.spec.loop ? Math.floor(pos / this.#frames) : 0,
      loop: this.spec.loop,
      gainDb: this.spec.gainDb,
      duckPublisherDb: this.spec.duckPublisherDb,
      startAt: this.spec.startAt,
    };
  }
}
