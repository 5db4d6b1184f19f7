/**
 * Refuses prompts that name a well-known artist (spec: "Artist names are refused"; reference
 * songs.md §5.3). Names come from data/artists.txt (≥ 2,000 entries); those that are ordinary words
 * or first names (data/artists-common-words.txt: Yes, Queen, Air, Genesis…) count only when the
 * prompt uses them as a reference: "in the style of X", "like X", "by X", "X vibes", "X's"….
 * Matching is on whole normalised tokens, so "Queensland" never matches "Queen".
 */
import { readFileSync } from 'node:fs';

export interface ArtistMatch {
  /** The artist as written in our list (e.g. `Daft Punk`). */
  artist: string;
  /** The matched words as normalised from the prompt (e.g. `daft punk`). */
  matched: string;
  /** True when the name is an ordinary word and was refused because of its reference phrase. */
  ambiguous: boolean;
}

/** Thrown by planSong(); the API answers 422 with `.artist` in the message. */
export class ArtistRefusedError extends Error {
  readonly artist: string;
  readonly matches: readonly ArtistMatch[];
  constructor(matches: readonly ArtistMatch[]) {
    const first = matches[0];
    const artist = first ? first.artist : '';
    super(`prompt names an artist; describe the style instead (genre, era, instruments) [artist:${artist}]`);
    this.name = 'ArtistRefusedError';
    this.artist = artist;
    this.matches = matches;
  }
}

/**
 * Normalises text to space-separated lower-case ASCII tokens: accents stripped (NFKD), `&` and `+`
 * → "and", `$` → "s" (Ke$ha), `!` between letters → "i" (P!nk), `'s` → a separate "s" token
 * (possessive), other apostrophes and dots removed (R.E.M. → rem), everything else a separator.
 */
export function normalizeWords(s: string): string {
  let t = s.normalize('NFKD').replace(/[\u0300-\u036f]/g, '').toLowerCase();
  t = t.replace(/(?<=[a-z])!(?=[a-z])/g, 'i');
  t = t.replace(/[&+]/g, ' and ').replace(/\$/g, 's');
  t = t.replace(/['’]s\b/g, ' s');
  t = t.replace(/['’.]/g, '');
  t = t.replace(/[^a-z0-9]+/g, ' ').trim();
  return t;
}

function nameKey(name: string): string {
  const n = normalizeWords(name);
  return n.startsWith('the ') ? n.slice(4) : n;
}

/** Phrases (normalised) that make the following words a reference to an artist. */
const BEFORE = [
  'style of',
  'styles of',
  'like',
  'by',
  'inspired by',
  'influenced by',
  'similar to',
  'a la',
  'ala',
  'reminiscent of',
  'vein of',
  'tribute to',
  'homage to',
  'vibe of',
  'vibes of',
  'sound of',
  'sounds of',
  'cover of',
  'meets',
  'channeling',
  'channelling',
  'imitating',
  'copy of',
  'version of',
] as const;
/** Words after a name that make it a reference ("Queen-style", "Air vibes", "Drake type beat"). */
const AFTER = new Set(['style', 'styled', 'vibes', 'vibe', 'type', 'esque', 'ish', 'inspired', 's', 'meets', 'like', 'sound', 'sounding', 'tribute', 'cover']);

/**
 * Words that, right after an ordinary-word name, show it is not an artist: "like future bass",
 * "sounds like pink noise", "in the style of roots reggae", "like air pads".
 */
const NOT_ARTIST_AFTER = new Set([
  'bass', 'noise', 'reggae', 'music', 'pad', 'pads', 'chords', 'drums', 'beat', 'beats', 'trance', 'house', 'techno',
  'synth', 'synths', 'sounds', 'piano', 'guitar', 'strings', 'melody', 'rock', 'pop', 'jazz', 'funk', 'soul',
  'ambience', 'ambient', 'texture', 'textures', 'tones', 'tone', 'vibrato', 'lead', 'stab', 'stabs', 'hop', 'step',
]);

export class ArtistFilter {
  private readonly strict = new Map<string, string>();
  private readonly ambiguous = new Map<string, string>();
  private readonly maxTokens: number;

  /** `names`: artists (display form); `commonWords`: the subset refused only in reference phrases. */
  constructor(names: readonly string[], commonWords: readonly string[]) {
    const amb = new Set(commonWords.map(nameKey));
    let max = 1;
    for (const name of names) {
      const key = nameKey(name);
      if (key === '') continue;
      max = Math.max(max, key.split(' ').length);
      const target = amb.has(key) ? this.ambiguous : this.strict;
      if (!target.has(key)) target.set(key, name);
    }
    this.maxTokens = max;
  }

  /** Loads data/artists.txt and data/artists-common-words.txt. */
  static fromDataFiles(): ArtistFilter {
    const read = (file: string) =>
      readFileSync(new URL(`./data/${file}`, import.meta.url), 'utf8')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !l.startsWith('#'));
    return new ArtistFilter(read('artists.txt'), read('artists-common-words.txt'));
  }

  /** Number of distinct names (after normalisation). */
  get size(): number {
    return this.strict.size + this.ambiguous.size;
  }

  /** Every artist reference in `prompt`, longest match first at each position. */
  find(prompt: string): ArtistMatch[] {
    const tokens = normalizeWords(prompt).split(' ').filter((t) => t !== '');
    const out: ArtistMatch[] = [];
    let i = 0;
    while (i < tokens.length) {
      let matchedLen = 0;
      for (let len = Math.min(this.maxTokens, tokens.length - i); len >= 1; len--) {
        const key = tokens.slice(i, i + len).join(' ');
        const strict = this.strict.get(key);
        if (strict !== undefined) {
          out.push({ artist: strict, matched: key, ambiguous: false });
          matchedLen = len;
          break;
        }
        const amb = this.ambiguous.get(key);
        if (amb !== undefined && this.isReference(tokens, i, len)) {
          out.push({ artist: amb, matched: key, ambiguous: true });
          matchedLen = len;
          break;
        }
      }
      i += matchedLen > 0 ? matchedLen : 1;
    }
    return out;
  }

  /** Throws ArtistRefusedError when `prompt` names an artist. */
  check(prompt: string): void {
    const found = this.find(prompt);
    if (found.length > 0) throw new ArtistRefusedError(found);
  }

  private isReference(tokens: readonly string[], start: number, len: number): boolean {
    const next = tokens[start + len];
    if (next !== undefined && NOT_ARTIST_AFTER.has(next)) return false;
    if (next !== undefined && AFTER.has(next)) return true;
    // "like the X": skip one "the" before looking for the phrase.
    let end = start;
    if (tokens[end - 1] === 'the') end--;
    for (const phrase of BEFORE) {
      const words = phrase.split(' ');
      if (end - words.length < 0) continue;
      let ok = true;
      for (let k = 0; k < words.length; k++) {
        if (tokens[end - words.length + k] !== words[k]) {
          ok = false;
          break;
        }
      }
      if (ok) return true;
    }
    return false;
  }
}
