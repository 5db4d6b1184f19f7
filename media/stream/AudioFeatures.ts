/**
 * Cheap features of 48 kHz audio for sound-reactive params (AudioMappings): per 1 ms hop, the
 * loudness of the whole band and of three bands, and onsets (attacks) of the whole band and of
 * the low band (beats). A handful of multiply-adds per sample (eight one-pole filters: each band
 * edge is a pair, 12 dB per octave; and the bands' energies) and one log per hop: no FFT, so a stream's extraction costs well under 1 % of a core.
 *
 * Loudness is mapped linearly in dB to 0–1: 0 at −60 dBFS or below, 1 at full scale (a
 * full-scale square wave; a full-scale sine is −3 dBFS, 0.95).
 *
 * Onset: the energy of the last ONSET_SHORT_MS against the background (an average of the energy
 * before it): ONSET_RISE_DB above it and above ONSET_FLOOR_DBFS, at
 * most one per ONSET_REFRACTORY_MS. Its time is the end of the hop where it rose: within 1 ms of
 * the attack.
 */
import { SOUNDTRACK_SAMPLE_RATE } from './Soundtrack.ts';

/** Samples per hop: 1 ms at 48 kHz (the time resolution of every feature). */
export const HOP_SAMPLES = SOUNDTRACK_SAMPLE_RATE / 1000;
/** Floor of the loudness scale, dBFS (0 below it). */
const FLOOR_DB = -60;
/** Window of the loudness features (their energy's time constant), ms. */
const LEVEL_MS = 20;
/** Window of an onset's energy, ms: a click's few ms show at full strength. */
const ONSET_SHORT_MS = 3;
/**
 * Time constants of the background an onset rises over, ms: it rises slowly (a sustained sound
 * becomes background, not an onset per hop) and falls fast (a decaying kick does not hide the
 * hi-hat that follows it).
 */
const ONSET_BACKGROUND_RISE_MS = 200;
const ONSET_BACKGROUND_FALL_MS = 30;
/** Rise over the background that makes an onset, dB. */
const ONSET_RISE_DB = 12;
/** Below this an attack is noise, not an onset, dBFS. */
const ONSET_FLOOR_DBFS = -50;
/** Shortest time between two onsets, ms (a drum's ring is not a new onset). */
const ONSET_REFRACTORY_MS = 80;
/** Band edges, Hz: low below LOW_HZ, mid up to HIGH_HZ, high above. */
const LOW_HZ = 150;
const HIGH_HZ = 4000;

/** One hop's features. */
export interface AudioHop {
  /** Loudness 0–1 (dB-linear, see above) of the whole band and of each band. */
  rms: number;
  low: number;
  mid: number;
  high: number;
  /** An onset of the whole band ended in this hop. */
  onset: boolean;
  /** An onset of the low band (a beat) ended in this hop. */
  beat: boolean;
}

/** Per-sample coefficient of an exponential average with time constant `ms`. */
const alpha = (ms: number) => 1 - Math.exp(-1 / ((ms / 1000) * SOUNDTRACK_SAMPLE_RATE));
/** Per-hop coefficient of an exponential average with time constant `ms`. */
const hopAlpha = (ms: number) => 1 - Math.exp(-1 / ms);
/** One-pole low-pass coefficient at `hz`. */
const lowPass = (hz: number) => 1 - Math.exp((-2 * Math.PI * hz) / SOUNDTRACK_SAMPLE_RATE);

const toLevel = (energy: number): number => {
  // energy is a mean square of samples in [-1, 1]; 10·log10 of it is dBFS (0: a full-scale square).
  const db = 10 * Math.log10(energy + 1e-12);
  return db <= FLOOR_DB ? 0 : db >= 0 ? 1 : 1 - db / FLOOR_DB;
};

/** An onset detector over one energy signal (per sample, mean square). */
class OnsetDetector {
  #short = 0;
  #background = 0;
  #sinceMs = Infinity;
  readonly #aShort = alpha(ONSET_SHORT_MS);
  readonly #aRise = hopAlpha(ONSET_BACKGROUND_RISE_MS);
  readonly #aFall = hopAlpha(ONSET_BACKGROUND_FALL_MS);

  /** One sample's square. */
  sample(sq: number): void {
    this.#short += this.#aShort * (sq - this.#short);
  }

  /** End of a hop: whether an onset rose in it. */
  hop(): boolean {
    this.#sinceMs++;
    const shortDb = 10 * Math.log10(this.#short + 1e-12);
    const backDb = 10 * Math.log10(this.#background + 1e-12);
    const onset = this.#sinceMs >= ONSET_REFRACTORY_MS && shortDb >= ONSET_FLOOR_DBFS && shortDb - backDb >= ONSET_RISE_DB;
    if (onset) this.#sinceMs = 0;
    // The background follows the energy slowly, so a sustained sound is no onset once it is the background.
    this.#background += (this.#short > this.#background ? this.#aRise : this.#aFall) * (this.#short - this.#background);
    return onset;
  }
}

export class AudioFeatures {
  /**
   * One-pole states, in pairs: low = LP(LOW_HZ)²; mid = HP(LOW_HZ)² of LP(HIGH_HZ)²; high =
   * HP(HIGH_HZ)² (a high-pass stage is its input less its one-pole low-pass).
   */
  readonly #s = new Float64Array(8);
  #eAll = 0;
  #eLow = 0;
  #eMid = 0;
  #eHigh = 0;
  readonly #onset = new OnsetDetector();
  readonly #beat = new OnsetDetector();
  /** Samples into the current hop. */
  #inHop = 0;
  readonly #a1 = lowPass(LOW_HZ);
  readonly #a2 = lowPass(HIGH_HZ);
  readonly #aLevel = alpha(LEVEL_MS);

  /**
   * Feeds int16 samples, interleaved stereo (`channels` 2, default) or mono (`frames` of them from
   * `offset` frames in), calling `onHop` at the end of each 1 ms hop with the frames pushed up to
   * its end (counted from `offset`).
   */
  push(pcm: Int16Array, onHop: (hop: AudioHop, end: number) => void, offset = 0, frames = pcm.length / 2 - offset, channels: 1 | 2 = 2): void {
    const a1 = this.#a1;
    const a2 = this.#a2;
    const al = this.#aLevel;
    const st = this.#s;
    let [l1 = 0, l2 = 0, m1 = 0, m2 = 0, m3 = 0, m4 = 0, h1 = 0, h2 = 0] = st;
    let eAll = this.#eAll;
    let eLow = this.#eLow;
    let eMid = this.#eMid;
    let eHigh = this.#eHigh;
    const end = offset + frames;
    for (let i = offset; i < end; i++) {
      const x = channels === 2 ? ((pcm[2 * i] as number) + (pcm[2 * i + 1] as number)) / 65536 : (pcm[i] as number) / 32768;
      l1 += a1 * (x - l1);
      l2 += a1 * (l1 - l2);
      m1 += a2 * (x - m1);
      m2 += a2 * (m1 - m2);
      m3 += a1 * (m2 - m3);
      const midA = m2 - m3;
      m4 += a1 * (midA - m4);
      const mid = midA - m4;
      h1 += a2 * (x - h1);
      const highA = x - h1;
      h2 += a2 * (highA - h2);
      const high = highA - h2;
      const sq = x * x;
      const lowSq = l2 * l2;
      eAll += al * (sq - eAll);
      eLow += al * (lowSq - eLow);
      eMid += al * (mid * mid - eMid);
      eHigh += al * (high * high - eHigh);
      this.#onset.sample(sq);
      this.#beat.sample(lowSq);
      if (++this.#inHop === HOP_SAMPLES) {
        this.#inHop = 0;
        // Levels are scaled so a full-scale square reads 1 (mean square 1 of samples in [-1, 1]).
        onHop({ rms: toLevel(eAll), low: toLevel(eLow), mid: toLevel(eMid), high: toLevel(eHigh), onset: this.#onset.hop(), beat: this.#beat.hop() }, i + 1 - offset);
      }
    }
    st.set([l1, l2, m1, m2, m3, m4, h1, h2]);
    this.#eAll = eAll;
    this.#eLow = eLow;
    this.#eMid = eMid;
    this.#eHigh = eHigh;
  }
}
