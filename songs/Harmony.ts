/**
 * Roman-numeral chords in a key (reference songs.md §4.3) and voice-leading of chord voicings.
 * Numerals are relative to the tonic's major scale: in a minor key write i, iv, bVI, bVII, V.
 */
import { SCALE_STEPS, type Mode } from './Keys.ts';

export interface Chord {
  /** MIDI pitch class offset of the root from the tonic, 0–11. */
  root: number;
  /** Semitones above the root (0 first), e.g. [0, 4, 7, 10]. */
  intervals: number[];
  minor: boolean;
  symbol: string;
}

const NUMERALS = ['vii', 'iii', 'vi', 'iv', 'ii', 'v', 'i'];
const DEGREE: Record<string, number> = { i: 0, ii: 1, iii: 2, iv: 3, v: 4, vi: 5, vii: 6 };
const MAJOR = [0, 2, 4, 5, 7, 9, 11];

/** Parses "bVImaj7", "ii7", "V7", "iv", "Isus4", "vii°". Throws on an unknown numeral. */
export function parseRoman(symbol: string): Chord {
  let s = symbol;
  let acc = 0;
  if (s.startsWith('b')) {
    acc = -1;
    s = s.slice(1);
  } else if (s.startsWith('#')) {
    acc = 1;
    s = s.slice(1);
  }
  const lower = s.toLowerCase();
  const numeral = NUMERALS.find((n) => lower.startsWith(n));
  if (!numeral) throw new RangeError(`unknown chord numeral [chord:${symbol}]`);
  const written = s.slice(0, numeral.length);
  const suffix = s.slice(numeral.length);
  const minor = written === written.toLowerCase();
  const root = (((MAJOR[DEGREE[numeral] as number] as number) + acc) % 12 + 12) % 12;
  let intervals = minor ? [0, 3, 7] : [0, 4, 7];
  switch (suffix) {
    case '':
      break;
    case '7':
      intervals = minor ? [0, 3, 7, 10] : [0, 4, 7, 10];
      break;
    case 'maj7':
      intervals = [0, 4, 7, 11];
      break;
    case '9':
      intervals = minor ? [0, 3, 7, 10, 14] : [0, 4, 7, 10, 14];
      break;
    case 'sus2':
      intervals = [0, 2, 7];
      break;
    case 'sus4':
      intervals = [0, 5, 7];
      break;
    case 'dim':
    case '°':
      intervals = [0, 3, 6];
      break;
    case 'add9':
      intervals = minor ? [0, 3, 7, 14] : [0, 4, 7, 14];
      break;
    default:
      throw new RangeError(`unknown chord suffix [chord:${symbol}]`);
  }
  return { root, intervals, minor, symbol };
}

/** Pitch classes (relative to tonic) of the key's scale. */
export function scaleOf(mode: Mode): readonly number[] {
  return SCALE_STEPS[mode];
}

/**
 * Places chord tones between `lo` and `hi` (MIDI) nearest to the previous voicing (smallest total
 * movement), so that chords glide instead of jumping. `tonic` is the key's MIDI pitch class.
 */
export function voiceChord(chord: Chord, tonic: number, prev: readonly number[] | null, lo: number, hi: number, size: number): number[] {
  const pcs = chord.intervals.map((i) => (tonic + chord.root + i) % 12);
  // Candidate notes: every chord tone in range.
  const pool: number[] = [];
  for (let n = lo; n <= hi; n++) if (pcs.includes(((n % 12) + 12) % 12)) pool.push(n);
  const centre = prev && prev.length > 0 ? prev.reduce((a, b) => a + b, 0) / prev.length : (lo + hi) / 2;
  let best: number[] = [];
  let bestCost = Infinity;
  // Windows of `size` consecutive pool notes cover every inversion.
  for (let s = 0; s + size <= pool.length; s++) {
    const v = pool.slice(s, s + size);
    // Must contain the third (or the sus/dim colour tone) and the root.
    const has = new Set(v.map((n) => ((n % 12) + 12) % 12));
    if (!has.has(pcs[0] as number) || (pcs.length > 1 && !has.has(pcs[1] as number))) continue;
    let cost = 0;
    if (prev && prev.length > 0) {
      for (const n of v) {
        let m = Infinity;
        for (const p of prev) m = Math.min(m, Math.abs(n - p));
        cost += m;
      }
    } else {
      cost = Math.abs(v.reduce((a, b) => a + b, 0) / v.length - centre);
    }
    if (cost < bestCost) {
      bestCost = cost;
      best = v;
    }
  }
  if (best.length === 0) best = pool.slice(0, size);
  return best;
}
