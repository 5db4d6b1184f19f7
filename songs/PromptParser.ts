/**
 * Reads a text prompt: drops words that ask for vocals (the output is instrumental), and finds
 * genre, mood, energy, instruments, tempo ("slow", "uptempo", "at 90 bpm", "128bpm") and key
 * ("in F# minor"). Artist names are checked separately (ArtistFilter.ts).
 */
import { normalizeWords } from './ArtistFilter.ts';
import { GENRES, type GenreId, type InstrumentId } from './Genres.ts';
import { parseMusicalKey, type Mode, type MusicalKey } from './Keys.ts';

/**
 * 'happy' bright, major; 'sad' melancholic, minor, slower; 'dark' tense, minor, low register;
 * 'chill' relaxed, soft; 'epic' big, wide, loud; 'romantic' warm 7ths; 'mysterious' modal, airy;
 * 'energetic' busy, loud.
 */
export type Mood = 'happy' | 'sad' | 'dark' | 'chill' | 'epic' | 'romantic' | 'mysterious' | 'energetic';

/** Tempo words: 'veryslow' ≈ 64, 'slow' ≈ 72, 'mid' ≈ 100, 'fast' ≈ 128, 'veryfast' ≈ 160 bpm with no genre. */
export type TempoWord = 'veryslow' | 'slow' | 'mid' | 'fast' | 'veryfast';

/** Which part an instrument word changes. */
export type Role = 'bass' | 'chords' | 'pad' | 'lead';

export interface ParsedPrompt {
  /** The prompt with vocal words removed. */
  cleaned: string;
  /** Words removed because they ask for vocals or lyrics, as written. */
  dropped: string[];
  /** First genre named, or null. */
  genre: GenreId | null;
  /** Every genre named, in order. */
  genres: GenreId[];
  moods: Mood[];
  /** 0–1 from words such as "chill" or "intense"; null when none. */
  energy: number | null;
  /** Instrument choices from words ("piano" → chords: piano). */
  instruments: Partial<Record<Role, InstrumentId>>;
  /** Instrument words found, as normalised text (for the plan and docs). */
  instrumentWords: string[];
  arp: boolean | null;
  drums: boolean | null;
  /** Tempo written as a number ("at 90 bpm"), folded into 60–200 by halving or doubling. */
  bpm: number | null;
  tempoWord: TempoWord | null;
  key: MusicalKey | null;
  /** "in a minor key" without a tonic. */
  mode: Mode | null;
}

// Vocal words (reference songs.md §5.4). Voice types count only when no instrument follows
// ("tenor sax" stays). Structural words (verse, chorus, hook, bridge, drop) are kept.
const VOCAL_WORDS = [
  'vocals?', 'vocalists?', 'vocalizing', 'vocalising', 'vocoder', 'voices?', 'singers?', 'singing', 'sings?', 'sung',
  'lyrics?', 'lyrical', 'rap', 'raps', 'rapper', 'rappers', 'rapping', 'rapped', 'choirs?', 'choral', 'chants?', 'chanting',
  'a\\s*cappella', 'acapella', 'humming', 'hummed', 'whispers?', 'whispered', 'whispering', 'spoken\\s+word', 'feat\\.?',
  'featuring', 'duets?', 'ad-?libs?', 'falsetto', 'beatbox(?:ing)?', 'crooning', 'crooner', 'yodel(?:ing|ling)?',
  'hooks?\\s+sung', 'autotune', 'auto-tune',
];
const VOICE_TYPES = ['soprano', 'mezzo', 'alto', 'tenor', 'baritone', 'contralto'];
const INSTRUMENT_AFTER = '(?:sax|saxophone|saxes|recorder|horn|trombone|ukulele|clarinet|flute|guitar|violin|viola|sax\\b)';

const VOCAL_RE = new RegExp(
  `(?:\\b(?:female|male|lead|backing|male\\s+and\\s+female|soulful|operatic)\\s+)?\\b(?:${VOCAL_WORDS.join('|')})\\b|\\b(?:${VOICE_TYPES.join('|')})\\b(?!\\s*${INSTRUMENT_AFTER})`,
  'gi',
);

/** Genre aliases that only count when nothing else names a genre ("80s rock" is rock). */
const WEAK_ALIASES: Record<string, GenreId> = { '80s': 'synthwave', eighties: 'synthwave', groove: 'funk', dance: 'house', club: 'house' };

const MOOD_WORDS: Record<Mood, readonly string[]> = {
  happy: ['happy', 'joyful', 'cheerful', 'upbeat', 'uplifting', 'bright', 'sunny', 'fun', 'playful', 'summer', 'summery', 'positive', 'feel good', 'optimistic'],
  sad: ['sad', 'melancholic', 'melancholy', 'sorrowful', 'somber', 'sombre', 'heartbreak', 'heartbroken', 'lonely', 'bittersweet', 'nostalgic', 'emotional', 'rainy', 'tearful', 'grief'],
  dark: ['dark', 'ominous', 'sinister', 'menacing', 'tense', 'suspense', 'suspenseful', 'scary', 'eerie', 'horror', 'brooding', 'gritty', 'evil', 'creepy', 'haunting', 'night'],
  chill: ['chill', 'chilled', 'relaxed', 'relaxing', 'calm', 'mellow', 'peaceful', 'soothing', 'gentle', 'soft', 'cozy', 'cosy', 'lazy', 'dreamy', 'warm', 'serene', 'quiet'],
  epic: ['epic', 'heroic', 'triumphant', 'majestic', 'grand', 'powerful', 'anthemic', 'huge', 'massive', 'inspiring', 'inspirational'],
  romantic: ['romantic', 'love', 'sensual', 'tender', 'intimate', 'sexy', 'smooth'],
  mysterious: ['mysterious', 'mystical', 'ethereal', 'magical', 'otherworldly', 'spacey', 'space', 'cosmic', 'hypnotic', 'floating'],
  energetic: ['energetic', 'intense', 'driving', 'aggressive', 'hard', 'banging', 'hype', 'party', 'euphoric', 'pumping', 'powerful', 'explosive', 'wild', 'rave'],
};

const ENERGY_WORDS: Record<string, number> = {
  chill: 0.25, relaxed: 0.25, relaxing: 0.2, calm: 0.2, mellow: 0.3, peaceful: 0.15, soothing: 0.15, gentle: 0.25, soft: 0.25,
  quiet: 0.15, sleepy: 0.1, minimal: 0.4, laid: 0.3, energetic: 0.85, intense: 0.9, driving: 0.8, aggressive: 0.95, hard: 0.85,
  banging: 0.9, hype: 0.9, party: 0.85, euphoric: 0.85, pumping: 0.85, explosive: 0.95, epic: 0.85, powerful: 0.85, wild: 0.9,
  upbeat: 0.7, uplifting: 0.7,
};

const TEMPO_WORDS: ReadonlyArray<[RegExp, TempoWord]> = [
  [/\b(?:very|super|extremely|really)\s+slow\b/i, 'veryslow'],
  [/\b(?:very|super|extremely|really)\s+fast\b|\bfrantic\b|\bbreakneck\b/i, 'veryfast'],
  [/\bmid[\s-]?tempo\b|\bmoderate(?:\s+tempo)?\b|\bmedium\s+tempo\b/i, 'mid'],
  [/\bup[\s-]?tempo\b|\bfast\b|\bquick\b|\bupbeat\b|\brapid\b/i, 'fast'],
  [/\bslow(?:ly|er)?\b|\blaid[\s-]back\b|\bdown[\s-]?tempo\b|\bleisurely\b/i, 'slow'],
];

/** Instrument phrases (normalised) → role and patch. Longer phrases are tried first. */
const INSTRUMENTS: ReadonlyArray<[string, Role, InstrumentId]> = [
  ['electric piano', 'chords', 'epiano'], ['rhodes', 'chords', 'epiano'], ['wurlitzer', 'chords', 'epiano'], ['e piano', 'chords', 'epiano'],
  ['grand piano', 'chords', 'piano'], ['piano', 'chords', 'piano'], ['keys', 'chords', 'epiano'],
  ['hammond', 'chords', 'organ'], ['organ', 'chords', 'organ'],
  ['distorted guitar', 'chords', 'distGuitar'], ['electric guitar', 'chords', 'distGuitar'], ['power chords', 'chords', 'distGuitar'],
  ['acoustic guitar', 'chords', 'guitar'], ['clean guitar', 'chords', 'guitar'], ['guitar', 'chords', 'guitar'], ['guitars', 'chords', 'guitar'],
  ['ukulele', 'chords', 'guitar'], ['harp', 'chords', 'guitar'],
  ['strings', 'pad', 'strings'], ['string section', 'pad', 'strings'], ['violin', 'pad', 'strings'], ['violins', 'pad', 'strings'],
  ['cello', 'pad', 'strings'], ['orchestra', 'pad', 'strings'], ['pads', 'pad', 'warmPad'], ['pad', 'pad', 'warmPad'],
  ['supersaw', 'lead', 'supersaw'], ['supersaws', 'lead', 'supersaw'],
  ['tenor sax', 'lead', 'sax'], ['alto sax', 'lead', 'sax'], ['saxophone', 'lead', 'sax'], ['sax', 'lead', 'sax'],
  ['trumpet', 'lead', 'brass'], ['horns', 'lead', 'brass'], ['horn', 'lead', 'brass'], ['brass', 'lead', 'brass'], ['trombone', 'lead', 'brass'],
  ['flute', 'lead', 'flute'], ['pan flute', 'lead', 'flute'], ['recorder', 'lead', 'flute'], ['ocarina', 'lead', 'flute'],
  ['bells', 'lead', 'bell'], ['glockenspiel', 'lead', 'bell'], ['music box', 'lead', 'bell'], ['celesta', 'lead', 'bell'], ['chimes', 'lead', 'bell'],
  ['marimba', 'lead', 'mallet'], ['vibraphone', 'lead', 'mallet'], ['xylophone', 'lead', 'mallet'], ['kalimba', 'lead', 'mallet'], ['steel drums', 'lead', 'mallet'],
  ['chiptune', 'lead', 'squareLead'], ['8 bit', 'lead', 'squareLead'], ['square lead', 'lead', 'squareLead'],
  ['pluck', 'lead', 'pluck'], ['plucks', 'lead', 'pluck'], ['synth lead', 'lead', 'sawLead'], ['lead synth', 'lead', 'sawLead'],
  ['808', 'bass', 'bass808'], ['808s', 'bass', 'bass808'], ['acid', 'bass', 'acidBass'], ['303', 'bass', 'acidBass'], ['tb 303', 'bass', 'acidBass'],
  ['bass guitar', 'bass', 'fingerBass'], ['slap bass', 'bass', 'fingerBass'], ['upright bass', 'bass', 'fingerBass'], ['double bass', 'bass', 'fingerBass'],
  ['walking bass', 'bass', 'fingerBass'], ['sub bass', 'bass', 'subBass'], ['reese', 'bass', 'reeseBass'], ['wobble', 'bass', 'reeseBass'],
  ['synth bass', 'bass', 'synthBass'],
];

function includesPhrase(words: string, phrase: string): number {
  const idx = ` ${words} `.indexOf(` ${phrase} `);
  return idx;
}

/** Folds a written tempo into 60–200 by halving or doubling ("300 bpm" → 150). */
export function foldBpm(bpm: number): number {
  let b = bpm;
  while (b > 200) b /= 2;
  while (b < 60 && b > 0) b *= 2;
  return Math.round(Math.min(200, Math.max(60, b)));
}

export function parsePrompt(prompt: string): ParsedPrompt {
  const dropped: string[] = [];
  // Quoted passages of more than 6 words read as lyrics.
  let text = prompt.replace(/["“”]([^"“”]{0,400})["“”]/g, (m: string, inner: string) => {
    if (inner.trim().split(/\s+/).length > 6) {
      dropped.push(m);
      return ' ';
    }
    return m;
  });
  text = text.replace(VOCAL_RE, (m: string) => {
    dropped.push(m.trim());
    return ' ';
  });
  const cleaned = text.replace(/\s+/g, ' ').trim();
  const words = normalizeWords(cleaned);

  // Genres: earliest mention wins; the longest alias at a position.
  const found: { id: GenreId; at: number; len: number }[] = [];
  for (const g of GENRES) {
    for (const alias of g.aliases) {
      const a = normalizeWords(alias);
      const at = includesPhrase(words, a);
      if (at >= 0) found.push({ id: g.id, at, len: a.length });
    }
  }
  found.sort((x, y) => x.at - y.at || y.len - x.len);
  const genres: GenreId[] = [];
  for (const f of found) if (!genres.includes(f.id)) genres.push(f.id);
  if (genres.length === 0) {
    for (const [alias, id] of Object.entries(WEAK_ALIASES)) if (includesPhrase(words, alias) >= 0 && !genres.includes(id)) genres.push(id);
  }

  const moods: Mood[] = [];
  for (const [mood, list] of Object.entries(MOOD_WORDS) as [Mood, readonly string[]][]) {
    if (list.some((w) => includesPhrase(words, w) >= 0)) moods.push(mood);
  }
  let energy: number | null = null;
  const energies: number[] = [];
  for (const w of words.split(' ')) {
    const e = ENERGY_WORDS[w];
    if (e !== undefined) energies.push(e);
  }
  if (energies.length > 0) energy = energies.reduce((s, x) => s + x, 0) / energies.length;

  const instruments: Partial<Record<Role, InstrumentId>> = {};
  const instrumentWords: string[] = [];
  const sortedInstr = [...INSTRUMENTS].sort((a, b) => b[0].length - a[0].length);
  let remaining = ` ${words} `;
  for (const [phrase, role, id] of sortedInstr) {
    if (remaining.includes(` ${phrase} `)) {
      remaining = remaining.replace(` ${phrase} `, ' ');
      instrumentWords.push(phrase);
      if (instruments[role] === undefined) instruments[role] = id;
    }
  }
  let arp: boolean | null = null;
  if (/\barp(?:s|eggio|eggios|eggiated|eggiator)?\b/i.test(cleaned)) arp = true;
  let drums: boolean | null = null;
  if (/\b(?:no|without)\s+(?:drums|percussion|beats?)\b|\bdrumless\b|\bbeatless\b/i.test(cleaned)) drums = false;
  else if (/\b(?:drums|percussion|beat|breakbeat|drum\s+kit)\b/i.test(cleaned)) drums = true;

  // Tempo: a number first ("at 90 bpm", "128bpm", "90 beats per minute").
  let bpm: number | null = null;
  const num = /(\d{2,3}(?:\.\d+)?)\s*-?\s*(?:bpm|beats\s+(?:per|a)\s+minute)\b/i.exec(cleaned) ?? /\btempo\s+(?:of\s+)?(\d{2,3})\b/i.exec(cleaned);
  if (num) bpm = foldBpm(Number(num[1]));
  let tempoWord: TempoWord | null = null;
  for (const [re, w] of TEMPO_WORDS) {
    if (re.test(cleaned)) {
      tempoWord = w;
      break;
    }
  }

  // Key: "in a minor key" is a mode; "in A minor", "F#m", "in the key of Eb major" are keys.
  let key: MusicalKey | null = null;
  let mode: Mode | null = null;
  const modeOnly = /\b(?:an?\s+|in\s+)?(major|minor)\s+(?:key|scale|tonality|mode)\b/i.exec(cleaned);
  const keyRe = /(\bin\s+(?:the\s+key\s+of\s+)?|\bkey\s+of\s+|\bkey:\s*)?\b([A-Ga-g])(\s*(?:#|♯|♭|b|-?\s*sharp|-?\s*flat))?(?:\s*(major|minor|maj|min)\b|(m)\b)/g;
  for (let m = keyRe.exec(cleaned); m; m = keyRe.exec(cleaned)) {
    const intro = m[1];
    const letter = m[2] as string;
    const after = cleaned.slice(m.index + m[0].length);
    // "a minor key" is a mode; a lone lower-case "a" is the article unless introduced ("in a minor").
    if (letter === 'a' && !m[3] && (/^\s*(?:key|scale|tonality|mode)\b/i.test(after) || !intro)) continue;
    // "Fm"/"Am" short forms only with a capital letter ("fm synth" is not F minor).
    if (m[5] && letter !== letter.toUpperCase()) continue;
    const parsed = parseMusicalKey(`${letter}${m[3] ?? ''} ${m[4] ?? (m[5] ? 'minor' : 'major')}`);
    if (parsed) {
      key = parsed;
      break;
    }
  }
  if (!key && modeOnly) mode = (modeOnly[1] as string).toLowerCase() as Mode;
  if (!key && !mode) {
    if (moods.includes('sad') || moods.includes('dark') || moods.includes('mysterious')) mode = 'minor';
    else if (moods.includes('happy')) mode = 'major';
  }

  return {
    cleaned,
    dropped,
    genre: genres[0] ?? null,
    genres,
    moods,
    energy,
    instruments,
    instrumentWords,
    arp,
    drums,
    bpm,
    tempoWord,
    key,
    mode,
  };
}
