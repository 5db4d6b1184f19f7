/**
 * The 24 major and minor keys: parsing what people type ("F# minor", "Db major", "c sharp minor",
 * "Bbm", "E♭ major") and the scale facts the composer needs.
 */

/** 'major': Ionian scale; 'minor': natural minor (Aeolian), with the raised 7th used for V. */
export type Mode = 'major' | 'minor';

export interface MusicalKey {
  /** Pitch class of the tonic, 0 = C … 11 = B. */
  tonic: number;
  mode: Mode;
  /** Normalised name, e.g. `F# minor`: the tonic as spelled by the caller, `#`/`b` accidentals. */
  name: string;
}

const LETTER_PC: Record<string, number> = { C: 0, D: 2, E: 4, F: 5, G: 7, A: 9, B: 11 };

/** Semitone offsets of the scale degrees 1–7. */
export const SCALE_STEPS: Record<Mode, readonly number[]> = {
  major: [0, 2, 4, 5, 7, 9, 11],
  minor: [0, 2, 3, 5, 7, 8, 10],
};

/**
 * Spelling used when the engine picks a key itself: the usual key-signature spelling (flats for
 * F, Bb, Eb, Ab, Db major and d, g, c, f, bb, eb minor; F# major and C#/F#/G# minor with sharps).
 */
const DEFAULT_SPELLING: Record<Mode, readonly string[]> = {
  major: ['C', 'Db', 'D', 'Eb', 'E', 'F', 'F#', 'G', 'Ab', 'A', 'Bb', 'B'],
  minor: ['C', 'C#', 'D', 'Eb', 'E', 'F', 'F#', 'G', 'G#', 'A', 'Bb', 'B'],
};

/** Every key in its default spelling, majors first (24 entries). */
export const ALL_KEYS: readonly string[] = (['major', 'minor'] as const).flatMap((mode) =>
  DEFAULT_SPELLING[mode].map((t) => `${t} ${mode}`),
);

// Accepts: tonic letter; optional accidental (#, ♯, b, ♭, "sharp", "flat", "-sharp"); then the mode
// as major/minor/maj/min/m/M (m = minor, M or nothing after a space = major only in the short forms
// "C", "CM"). Whitespace, case and a trailing "key" are free: "the key of A minor" is not accepted,
// only the key itself.
const KEY_RE =
  /^\s*([a-g])\s*(#|♯|b|♭|-?\s*sharp|-?\s*flat)?\s*(major|minor|maj|min|m|ionian|aeolian)?\s*(?:key)?\s*$/i;

/**
 * Parses one of the 24 keys. Returns `{tonic, mode, name}` or null when `s` is not a key.
 * A bare tonic ("C", "F#") means major. Enharmonic spellings are kept as written ("Db major" and
 * "C# major" are both accepted and name the same pitch class); B#, E#, Cb and Fb are accepted too.
 */
export function parseMusicalKey(s: string): MusicalKey | null {
  if (s.length > 40) return null;
  const m = KEY_RE.exec(s.normalize('NFC'));
  if (!m) return null;
  const letter = (m[1] as string).toUpperCase();
  const accRaw = (m[2] ?? '').toLowerCase().replace(/[\s-]/g, '');
  // "Bm" must read as B minor, but the regex cannot tell "b" (flat) from "b" (letter) in "bb";
  // the letter is always first, so a lone lower-case b after it is an accidental.
  let acc = '';
  if (accRaw === '#' || accRaw === '♯' || accRaw === 'sharp') acc = '#';
  else if (accRaw === 'b' || accRaw === '♭' || accRaw === 'flat') acc = 'b';
  const modeRaw = m[3] ?? '';
  let mode: Mode;
  if (modeRaw === '') mode = 'major';
  else if (modeRaw === 'M') mode = 'major';
  else {
    const lower = modeRaw.toLowerCase();
    mode = lower === 'm' || lower === 'min' || lower === 'minor' || lower === 'aeolian' ? 'minor' : 'major';
  }
  const tonic = ((LETTER_PC[letter] as number) + (acc === '#' ? 1 : acc === 'b' ? -1 : 0) + 12) % 12;
  return { tonic, mode, name: `${letter}${acc} ${mode}` };
}

/** The API validator's form: the normalised key name (`F# minor`) or null. */
export function parseKey(s: string): string | null {
  return parseMusicalKey(s)?.name ?? null;
}

/** A key in its default spelling. */
export function keyOf(tonic: number, mode: Mode): MusicalKey {
  const pc = ((tonic % 12) + 12) % 12;
  return { tonic: pc, mode, name: `${DEFAULT_SPELLING[mode][pc] as string} ${mode}` };
}

/** MIDI note number to frequency in Hz (A4 = 69 = 440 Hz). */
export function midiToHz(note: number): number {
  return 440 * Math.pow(2, (note - 69) / 12);
}
