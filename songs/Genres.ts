/**
 * The genre table: the one source for tempo defaults, drum feel, progressions, instruments and
 * arrangement shape. docs/songs.md shows the same table (test/songs/Genres.test.ts checks that the
 * doc names every genre). Tempo figures follow reference/songs.md §4.1; progressions §4.3; drum
 * grids §4.4; arrangement templates §4.5.
 */
import type { Mode } from './Keys.ts';

export type GenreId =
  | 'lofi'
  | 'hiphop'
  | 'trap'
  | 'house'
  | 'techno'
  | 'trance'
  | 'dnb'
  | 'dubstep'
  | 'ambient'
  | 'cinematic'
  | 'rock'
  | 'pop'
  | 'jazz'
  | 'synthwave'
  | 'funk'
  | 'reggae';

/**
 * Drum grid family (Drums.ts holds the 16-step patterns):
 * 'boombap' kick 1 & 3 with pushes, snare 2 & 4, swung 16ths; 'trap' half-time snare on 3, hat
 * rolls, 808; 'fourfloor' kick every beat, open hats off-beat; 'techno' four-floor with rumble and
 * 16th hats; 'breakbeat' two-step d&b; 'halftime' dubstep snare on 3; 'backbeat' rock/pop 8ths;
 * 'disco' four-floor with 16th hats and open hats; 'onedrop' reggae kick+rim on 3; 'jazz' ride
 * swing with feathered kick; 'cinematic' toms and big hits; 'none' no drums (ambient).
 */
export type DrumFeel =
  | 'boombap'
  | 'trap'
  | 'fourfloor'
  | 'techno'
  | 'breakbeat'
  | 'halftime'
  | 'backbeat'
  | 'disco'
  | 'onedrop'
  | 'jazz'
  | 'cinematic'
  | 'none';

/** Section shape: 'song' verse/chorus; 'edm' build/drop/break; 'through' slow swells (ambient, film). */
export type Template = 'song' | 'edm' | 'through';

/** Instruments the synth can play (Instruments.ts holds the patches). */
export type InstrumentId =
  | 'subBass'
  | 'bass808'
  | 'synthBass'
  | 'acidBass'
  | 'fingerBass'
  | 'reeseBass'
  | 'warmPad'
  | 'strings'
  | 'epiano'
  | 'piano'
  | 'organ'
  | 'pluck'
  | 'stab'
  | 'guitar'
  | 'distGuitar'
  | 'supersaw'
  | 'squareLead'
  | 'sawLead'
  | 'sax'
  | 'flute'
  | 'bell'
  | 'mallet'
  | 'brass';

export interface Genre {
  id: GenreId;
  name: string;
  /** Words and phrases in a prompt that name this genre (normalised, lower case). */
  aliases: readonly string[];
  /** Tempo in bpm: the usual one, and the range "slow"/"fast" move within. */
  bpm: { usual: number; min: number; max: number };
  /** Preferred mode when no key is asked and the mood does not decide. */
  mode: Mode | 'either';
  drums: DrumFeel;
  /** 16th-note swing, 0 = straight, 0.33 = triplet feel (fraction of a 16th the off-16th is late). */
  swing: number;
  /** Roman-numeral progressions relative to the tonic's major scale (bVI = flat six), one chord per bar. */
  progressions: { major: readonly string[][]; minor: readonly string[][] };
  /** Default instruments by role. */
  bass: InstrumentId;
  chords: InstrumentId;
  pad: InstrumentId | null;
  lead: InstrumentId;
  /** Whether an arpeggio line plays in the busier sections. */
  arp: boolean;
  template: Template;
  /** Default energy 0–1 (prompt words move it). */
  energy: number;
  /** Words for the docs: what you hear. */
  description: string;
}

const POP_MAJOR = [
  ['I', 'V', 'vi', 'IV'],
  ['vi', 'IV', 'I', 'V'],
  ['I', 'vi', 'IV', 'V'],
  ['IV', 'I', 'V', 'vi'],
];
const POP_MINOR = [
  ['i', 'bVI', 'bIII', 'bVII'],
  ['i', 'bVII', 'bVI', 'bVII'],
  ['i', 'iv', 'bVI', 'bVII'],
];
const EDM_MINOR = [
  ['i', 'bVI', 'bIII', 'bVII'],
  ['i', 'bVII', 'bVI', 'V'],
  ['bVI', 'bVII', 'i', 'i'],
  ['i', 'iv', 'bVI', 'bVII'],
];
const JAZZY_MAJOR = [
  ['ii7', 'V7', 'Imaj7', 'vi7'],
  ['Imaj7', 'vi7', 'ii7', 'V7'],
  ['IVmaj7', 'iii7', 'ii7', 'Imaj7'],
  ['Imaj7', 'IVmaj7', 'iii7', 'vi7'],
];
const JAZZY_MINOR = [
  ['i7', 'iv7', 'bVIImaj7', 'bIIImaj7'],
  ['ii7', 'V7', 'i7', 'i7'],
  ['i7', 'bVImaj7', 'iv7', 'V7'],
  ['i7', 'iv7', 'i7', 'bVImaj7'],
];

export const GENRES: readonly Genre[] = [
  {
    id: 'lofi',
    name: 'Lo-fi / chillhop',
    aliases: ['lo-fi', 'lofi', 'lo fi', 'chillhop', 'chill hop', 'study beats', 'beats to study', 'jazzhop', 'jazz hop'],
    bpm: { usual: 85, min: 70, max: 95 },
    mode: 'either',
    drums: 'boombap',
    swing: 0.18,
    progressions: { major: JAZZY_MAJOR, minor: JAZZY_MINOR },
    bass: 'fingerBass',
    chords: 'epiano',
    pad: 'warmPad',
    lead: 'mallet',
    arp: false,
    template: 'song',
    energy: 0.35,
    description: 'dusty swung boom-bap drums, Rhodes-style electric piano 7th chords, soft round bass, vibraphone melody',
  },
  {
    id: 'hiphop',
    name: 'Hip-hop / boom bap',
    aliases: ['hip hop', 'hip-hop', 'hiphop', 'boom bap', 'boombap', 'old school hip hop', 'instrumental hip hop'],
    bpm: { usual: 90, min: 80, max: 100 },
    mode: 'minor',
    drums: 'boombap',
    swing: 0.12,
    progressions: { major: JAZZY_MAJOR, minor: [['i', 'iv', 'i', 'bVI'], ['i', 'bVII', 'bVI', 'V'], ...JAZZY_MINOR.slice(0, 2)] },
    bass: 'subBass',
    chords: 'piano',
    pad: 'strings',
    lead: 'bell',
    arp: false,
    template: 'song',
    energy: 0.55,
    description: 'punchy kick and snare on 2 and 4, swung hats, deep sub bass, piano loop, string pad, bell melody',
  },
  {
    id: 'trap',
    name: 'Trap',
    aliases: ['trap', 'drill', 'trap beat'],
    bpm: { usual: 140, min: 130, max: 160 },
    mode: 'minor',
    drums: 'trap',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: [['i', 'bVI', 'i', 'bVII'], ['i', 'iv', 'bVI', 'V'], ['i', 'i', 'bVI', 'bVII']] },
    bass: 'bass808',
    chords: 'bell',
    pad: 'warmPad',
    lead: 'bell',
    arp: true,
    template: 'edm',
    energy: 0.7,
    description: 'half-time snare on beat 3, rolling hi-hats, long 808 bass, dark bells and pad',
  },
  {
    id: 'house',
    name: 'House',
    aliases: ['house', 'deep house', 'tech house', 'progressive house', 'edm', 'dance', 'club', 'garage house'],
    bpm: { usual: 124, min: 118, max: 130 },
    mode: 'either',
    drums: 'fourfloor',
    swing: 0.05,
    progressions: { major: [['vi', 'IV', 'I', 'V'], ['I', 'iii', 'vi', 'IV'], ...JAZZY_MAJOR.slice(1, 3)], minor: JAZZY_MINOR.slice(0, 3).concat(EDM_MINOR.slice(0, 2)) },
    bass: 'synthBass',
    chords: 'stab',
    pad: 'warmPad',
    lead: 'pluck',
    arp: true,
    template: 'edm',
    energy: 0.7,
    description: 'four-on-the-floor kick, off-beat open hats, claps on 2 and 4, chord stabs, off-beat bass, side-chain pumping pad',
  },
  {
    id: 'techno',
    name: 'Techno',
    aliases: ['techno', 'minimal techno', 'industrial techno', 'detroit techno', 'berlin techno', 'acid', 'acid techno', 'rave'],
    bpm: { usual: 130, min: 125, max: 140 },
    mode: 'minor',
    drums: 'techno',
    swing: 0,
    progressions: { major: [['I', 'I', 'I', 'I']], minor: [['i', 'i', 'i', 'i'], ['i', 'i', 'bVII', 'i'], ['i', 'iv', 'i', 'i']] },
    bass: 'acidBass',
    chords: 'stab',
    pad: 'warmPad',
    lead: 'pluck',
    arp: true,
    template: 'edm',
    energy: 0.8,
    description: 'driving four-floor kick with rumble, 16th hats, hypnotic acid bass line, sparse stabs',
  },
  {
    id: 'trance',
    name: 'Trance',
    aliases: ['trance', 'uplifting trance', 'psytrance', 'psy trance', 'progressive trance', 'euphoric'],
    bpm: { usual: 138, min: 128, max: 145 },
    mode: 'minor',
    drums: 'fourfloor',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: EDM_MINOR },
    bass: 'synthBass',
    chords: 'supersaw',
    pad: 'strings',
    lead: 'supersaw',
    arp: true,
    template: 'edm',
    energy: 0.8,
    description: 'four-floor kick, rolling off-beat bass, supersaw chords and lead, 16th arpeggio, long builds',
  },
  {
    id: 'dnb',
    name: 'Drum & bass',
    aliases: ['drum and bass', 'drum n bass', 'drum & bass', 'drum bass', 'dnb', 'd&b', 'jungle', 'liquid', 'neurofunk'],
    bpm: { usual: 174, min: 160, max: 180 },
    mode: 'minor',
    drums: 'breakbeat',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: [['i', 'bVI', 'bIII', 'bVII'], ['i7', 'iv7', 'bVImaj7', 'bVII'], ['i', 'i', 'bVI', 'bVII']] },
    bass: 'reeseBass',
    chords: 'warmPad',
    pad: 'strings',
    lead: 'pluck',
    arp: true,
    template: 'edm',
    energy: 0.85,
    description: 'two-step break (kick on 1 and the and-of-3, snare on 2 and 4), detuned reese bass, lush pads',
  },
  {
    id: 'dubstep',
    name: 'Dubstep',
    aliases: ['dubstep', 'brostep', 'riddim', 'wobble'],
    bpm: { usual: 140, min: 138, max: 150 },
    mode: 'minor',
    drums: 'halftime',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: [['i', 'i', 'bVI', 'bVII'], ['i', 'bVI', 'iv', 'V']] },
    bass: 'reeseBass',
    chords: 'warmPad',
    pad: 'strings',
    lead: 'sawLead',
    arp: false,
    template: 'edm',
    energy: 0.85,
    description: 'half-time snare on beat 3, wobbling filtered bass, dark pads',
  },
  {
    id: 'ambient',
    name: 'Ambient / downtempo',
    aliases: ['ambient', 'downtempo', 'drone', 'meditation', 'meditative', 'new age', 'chillout', 'chill out', 'atmospheric', 'soundscape', 'sleep'],
    bpm: { usual: 80, min: 60, max: 100 },
    mode: 'either',
    drums: 'none',
    swing: 0,
    progressions: { major: [['Imaj7', 'IVmaj7', 'Imaj7', 'vi7'], ['I', 'iii', 'IV', 'I'], ['IV', 'I', 'V', 'vi']], minor: [['i7', 'bVImaj7', 'i7', 'bVII'], ['i', 'iv', 'bVI', 'bIII']] },
    bass: 'subBass',
    chords: 'warmPad',
    pad: 'strings',
    lead: 'bell',
    arp: true,
    template: 'through',
    energy: 0.2,
    description: 'no drums, slow evolving pads, soft sub bass, sparse bells, long reverb',
  },
  {
    id: 'cinematic',
    name: 'Cinematic / orchestral',
    aliases: ['cinematic', 'orchestral', 'film score', 'movie', 'soundtrack', 'score', 'trailer', 'epic orchestral', 'filmic', 'orchestra'],
    bpm: { usual: 90, min: 60, max: 120 },
    mode: 'minor',
    drums: 'cinematic',
    swing: 0,
    progressions: { major: [['I', 'V', 'vi', 'IV'], ['I', 'bVI', 'bVII', 'I'], ['IV', 'V', 'iii', 'vi']], minor: [['i', 'bVI', 'bIII', 'bVII'], ['i', 'bVI', 'iv', 'V'], ['i', 'bVII', 'bVI', 'V']] },
    bass: 'subBass',
    chords: 'strings',
    pad: 'warmPad',
    lead: 'brass',
    arp: true,
    template: 'through',
    energy: 0.6,
    description: 'string ensemble chords, brass melody, ostinato, taiko-style toms and big hits, wide hall reverb',
  },
  {
    id: 'rock',
    name: 'Rock',
    aliases: ['rock', 'indie rock', 'alternative', 'alt rock', 'punk', 'grunge', 'hard rock', 'metal', 'garage rock', 'post rock', 'indie'],
    bpm: { usual: 120, min: 100, max: 150 },
    mode: 'either',
    drums: 'backbeat',
    swing: 0,
    progressions: { major: [['I', 'IV', 'V', 'IV'], ['I', 'bVII', 'IV', 'I'], ['I', 'V', 'vi', 'IV'], ['vi', 'IV', 'I', 'V']], minor: [['i', 'bVII', 'bVI', 'bVII'], ['i', 'bIII', 'bVII', 'iv'], ['i', 'bVI', 'bIII', 'bVII']] },
    bass: 'fingerBass',
    chords: 'distGuitar',
    pad: 'organ',
    lead: 'distGuitar',
    arp: false,
    template: 'song',
    energy: 0.75,
    description: 'live-style backbeat with crashes and fills, driven guitar chords, picked bass on 8ths, organ bed, guitar lead',
  },
  {
    id: 'pop',
    name: 'Pop',
    aliases: ['pop', 'synth pop', 'synthpop', 'electropop', 'dance pop', 'indie pop', 'k-pop', 'kpop', 'radio'],
    bpm: { usual: 115, min: 100, max: 128 },
    mode: 'major',
    drums: 'backbeat',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: POP_MINOR },
    bass: 'synthBass',
    chords: 'piano',
    pad: 'warmPad',
    lead: 'pluck',
    arp: true,
    template: 'song',
    energy: 0.65,
    description: 'backbeat with claps, piano chords, synth bass on the roots, warm pad, plucky hook',
  },
  {
    id: 'jazz',
    name: 'Jazz',
    aliases: ['jazz', 'swing', 'bebop', 'cool jazz', 'smooth jazz', 'jazzy', 'bossa', 'bossa nova', 'lounge', 'jazz trio'],
    bpm: { usual: 120, min: 90, max: 180 },
    mode: 'either',
    drums: 'jazz',
    swing: 0.3,
    progressions: { major: [['ii7', 'V7', 'Imaj7', 'Imaj7'], ['Imaj7', 'vi7', 'ii7', 'V7'], ['iii7', 'VI7', 'ii7', 'V7']], minor: [['ii7', 'V7', 'i7', 'i7'], ['i7', 'iv7', 'ii7', 'V7'], ['i7', 'bVI7', 'ii7', 'V7']] },
    bass: 'fingerBass',
    chords: 'piano',
    pad: null,
    lead: 'sax',
    arp: false,
    template: 'song',
    energy: 0.5,
    description: 'swung ride cymbal and brushes, walking bass, piano comping on 7th chords, sax-like melody',
  },
  {
    id: 'synthwave',
    name: 'Synthwave / retrowave',
    aliases: ['synthwave', 'retrowave', 'outrun', 'darksynth', 'vaporwave', 'retro synth', 'chillwave'],
    bpm: { usual: 100, min: 80, max: 118 },
    mode: 'minor',
    drums: 'backbeat',
    swing: 0,
    progressions: { major: POP_MAJOR, minor: [['i', 'bVI', 'bIII', 'bVII'], ['i', 'bVII', 'bVI', 'bVII'], ['bVI', 'bVII', 'i', 'i']] },
    bass: 'synthBass',
    chords: 'warmPad',
    pad: 'strings',
    lead: 'squareLead',
    arp: true,
    template: 'song',
    energy: 0.6,
    description: 'big reverb snare on 2 and 4, driving 8th-note bass, lush analogue pads, square lead, 16th arpeggios',
  },
  {
    id: 'funk',
    name: 'Funk / disco',
    aliases: ['funk', 'funky', 'disco', 'nu disco', 'nu-disco', 'boogie', 'soul', 'motown', 'groove'],
    bpm: { usual: 115, min: 100, max: 125 },
    mode: 'either',
    drums: 'disco',
    swing: 0.08,
    progressions: { major: [['I7', 'IV7', 'I7', 'IV7'], ['ii7', 'V7', 'Imaj7', 'vi7'], ['Imaj7', 'IVmaj7', 'iii7', 'vi7']], minor: [['i7', 'iv7', 'i7', 'iv7'], ['i7', 'bVII', 'bVI', 'bVII'], ['i7', 'i7', 'iv7', 'bVII']] },
    bass: 'fingerBass',
    chords: 'guitar',
    pad: 'strings',
    lead: 'brass',
    arp: false,
    template: 'song',
    energy: 0.7,
    description: 'four-floor or backbeat with 16th hats and open-hat lifts, syncopated octave bass, clean guitar chops, brass stabs, strings',
  },
  {
    id: 'reggae',
    name: 'Reggae / dub',
    aliases: ['reggae', 'dub', 'ska', 'roots reggae', 'dancehall', 'rocksteady'],
    bpm: { usual: 75, min: 60, max: 90 },
    mode: 'major',
    drums: 'onedrop',
    swing: 0.1,
    progressions: { major: [['I', 'IV', 'V', 'IV'], ['I', 'V', 'vi', 'IV'], ['I', 'I', 'IV', 'IV']], minor: [['i', 'iv', 'i', 'iv'], ['i', 'bVII', 'i', 'bVII']] },
    bass: 'subBass',
    chords: 'organ',
    pad: null,
    lead: 'mallet',
    arp: false,
    template: 'song',
    energy: 0.45,
    description: 'one-drop (kick and rim on beat 3), off-beat organ and guitar skank, deep melodic bass, dub delays',
  },
];

const BY_ID = new Map<GenreId, Genre>(GENRES.map((g) => [g.id, g]));

export function genreById(id: GenreId): Genre {
  const g = BY_ID.get(id);
  if (!g) throw new RangeError(`unknown genre [genre:${id}]`);
  return g;
}

/** The style used when no genre is named: pop's palette, but at the spec's default 100 bpm. */
export const FALLBACK_GENRE: GenreId = 'pop';
/** Spec: "else 100". */
export const FALLBACK_BPM = 100;
