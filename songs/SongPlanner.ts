/**
 * planSong(): request → SongPlan, the JSON-serialisable description both takes are rendered from.
 * Cheap and synchronous, so the API can call it while validating (artist refusal = 422).
 */
import { ArtistFilter } from './ArtistFilter.ts';
import { arrange, type AskedSection, type Section } from './Arranger.ts';
import { PlanInputError } from './PlanInputError.ts';
import { FALLBACK_BPM, FALLBACK_GENRE, genreById, type DrumFeel, type GenreId, type InstrumentId } from './Genres.ts';
import { keyOf, parseMusicalKey, type Mode } from './Keys.ts';
import { parsePrompt, type Mood, type TempoWord } from './PromptParser.ts';
import { Random } from './Random.ts';

export const SAMPLE_RATE = 48_000;
/** Spec limits, seconds. */
export const MIN_DURATION = 10;
export const MAX_DURATION = 120;
export const DEFAULT_DURATION = 120;
/** Bars in a loop when no duration is given. */
export const DEFAULT_LOOP_BARS = 8;

export interface PlanInput {
  prompt: string;
  /** Seconds, 10–120 (validated by the API); default 120, or 8 bars when loop is on. */
  duration?: number;
  /** 60–200 (validated by the API). */
  bpm?: number;
  /** One of the 24 keys ("F# minor"); invalid strings are ignored here (the API rejects them). */
  key?: string;
  loop?: boolean;
  /** 0–2147483647. Take n renders with seed + n − 1. */
  seed: number;
  /**
   * A section plan to follow (validated shapes from the API); their bars set the length, which
   * must be 10–120 s at the song's tempo (else PlanInputError on `sections`). Not with `duration`.
   */
  sections?: AskedSection[] | undefined;
}

export interface SongPlan {
  version: 1;
  prompt: string;
  /** The prompt with vocal words removed: what the engine read. */
  cleanedPrompt: string;
  /** Words dropped because the output is instrumental. */
  droppedWords: string[];
  seed: number;
  /** Genre named in the prompt, or null. */
  genre: GenreId | null;
  /** Genre whose palette is played (the named one, else pop's palette at 100 bpm). */
  style: GenreId;
  moods: Mood[];
  energy: number;
  bpm: number;
  /** Where bpm came from. */
  bpmSource: 'request' | 'prompt-number' | 'prompt-word' | 'genre' | 'default';
  tempoWord: TempoWord | null;
  /** The key played, e.g. `F# minor` (always set). */
  key: string;
  /** The key asked for (request field, else words in the prompt), normalised; null if none: what the API echoes. */
  keyRequested: string | null;
  tonic: number;
  mode: Mode;
  loop: boolean;
  /** Seconds asked for; when absent 120, or the loop's own length (8 bars) for loops. */
  durationRequested: number;
  beatsPerBar: 4;
  bars: number;
  sampleRate: typeof SAMPLE_RATE;
  /** Exact length of every take in samples and seconds (whole bars). */
  totalSamples: number;
  duration: number;
  /** Fade-out at the end in seconds (0 for loops). */
  fadeSeconds: number;
  swing: number;
  drums: DrumFeel;
  instruments: { bass: InstrumentId; chords: InstrumentId; pad: InstrumentId | null; lead: InstrumentId; arp: boolean };
  instrumentWords: string[];
  sections: Section[];
}

let filter: ArtistFilter | undefined;
/** The shared artist filter (loaded once from songs/data). */
export function artistFilter(): ArtistFilter {
  filter ??= ArtistFilter.fromDataFiles();
  return filter;
}

/**
 * Whole bars for a requested length: as many whole bars as fit in `duration` (a take is never
 * longer than asked), moved up to the fewest bars that last 10 s when that is shorter than 10 s
 * (the spec's minimum wins). Loops without a duration are 8 bars (16 when 8 bars are under 10 s,
 * i.e. above 192 bpm). Default duration 120 s.
 */
export function barsFor(bpm: number, duration: number | undefined, loop: boolean): number {
  const barSec = 240 / bpm;
  // 1e-9 s of slack: 10 s at 120 bpm is exactly 5 bars, whatever the division rounds to.
  if (duration === undefined && loop) return DEFAULT_LOOP_BARS * (DEFAULT_LOOP_BARS * barSec < MIN_DURATION ? 2 : 1);
  let bars = Math.floor((duration ?? DEFAULT_DURATION) / barSec + 1e-9);
  const minBars = Math.ceil(MIN_DURATION / barSec - 1e-9);
  if (bars < minBars) bars = minBars;
  return Math.max(1, bars);
}

function resolveBpm(
  input: PlanInput,
  parsed: ReturnType<typeof parsePrompt>,
  genreId: GenreId | null,
): { bpm: number; source: SongPlan['bpmSource'] } {
  if (input.bpm !== undefined) return { bpm: Math.round(input.bpm), source: 'request' };
  if (parsed.bpm !== null) return { bpm: parsed.bpm, source: 'prompt-number' };
  const g = genreId ? genreById(genreId) : null;
  if (parsed.tempoWord) {
    const base = g ? g.bpm : { usual: FALLBACK_BPM, min: 72, max: 128 };
    const table: Record<TempoWord, number> = g
      ? { veryslow: Math.max(60, base.min * 0.85), slow: base.min, mid: base.usual, fast: base.max, veryfast: Math.min(200, base.max * 1.1) }
      : { veryslow: 64, slow: 72, mid: 100, fast: 128, veryfast: 160 };
    return { bpm: Math.round(table[parsed.tempoWord]), source: 'prompt-word' };
  }
  if (g) return { bpm: g.bpm.usual, source: 'genre' };
  return { bpm: FALLBACK_BPM, source: 'default' };
}

/** Builds the plan; throws ArtistRefusedError when the prompt names an artist. */
export function planSong(input: PlanInput): SongPlan {
  artistFilter().check(input.prompt);
  const parsed = parsePrompt(input.prompt);
  const rng = new Random(input.seed).fork('plan');
  const styleId = parsed.genre ?? FALLBACK_GENRE;
  const genre = genreById(styleId);
  const loop = input.loop ?? false;
  const { bpm, source } = resolveBpm(input, parsed, parsed.genre);

  // Key: request field, else words, else a seeded choice whose mode follows mood, then genre.
  const requested = input.key !== undefined ? parseMusicalKey(input.key) : null;
  const chosen = requested ?? parsed.key;
  let tonic: number;
  let mode: Mode;
  if (chosen) {
    tonic = chosen.tonic;
    mode = chosen.mode;
  } else {
    mode = parsed.mode ?? (genre.mode === 'either' ? (rng.chance(0.5) ? 'major' : 'minor') : genre.mode);
    tonic = rng.int(12);
  }
  const key = chosen ? chosen.name : keyOf(tonic, mode).name;

  let energy = parsed.energy ?? genre.energy;
  if (parsed.energy !== null && parsed.genre) energy = (parsed.energy * 2 + genre.energy) / 3;
  energy = Math.round(Math.min(1, Math.max(0, energy)) * 100) / 100;

  const barSec = 240 / bpm;
  const asked = input.sections && input.sections.length > 0 ? input.sections : undefined;
  if (asked) {
    if (input.duration !== undefined) throw new PlanInputError('sections', 'give either duration or sections, not both (the sections set the length)');
    for (const a of asked) if (a.style) artistFilter().check(a.style);
    const sum = asked.reduce((s, a) => s + a.bars, 0);
    const sec = sum * barSec;
    if (sec < MIN_DURATION - 1e-9 || sec > MAX_DURATION + 1e-9) {
      throw new PlanInputError('sections', `must last 10 to 120 seconds in total: ${sum} bars at ${bpm} bpm are ${Math.round(sec * 100) / 100} s`);
    }
  }
  const bars = asked ? asked.reduce((s, a) => s + a.bars, 0) : barsFor(bpm, input.duration, loop);
  const totalSamples = Math.round(bars * barSec * SAMPLE_RATE);
  const duration = totalSamples / SAMPLE_RATE;
  const fadeSeconds = loop ? 0 : Math.min(Math.max(barSec, 1.5), 4, duration * 0.25);

  const arp = parsed.arp ?? genre.arp;
  const sections = arrange({ bars, genre, mode, energy, loop, arp, rng: rng.fork('arrange'), asked });
  let drums = genre.drums;
  if (asked) {
    // "no drums" in the prompt holds for sections whose own style words do not mention drums.
    if (parsed.drums === false) for (const s of sections) if (!/\bdrums?\b/i.test(s.style)) s.layers.drums = 0;
    // A section asking for drums in a drumless genre gets the half-time feel (as "with drums" does).
    if (drums === 'none' && sections.some((s) => s.layers.drums > 0)) drums = 'halftime';
  } else {
    if (parsed.drums === false) for (const s of sections) s.layers.drums = 0;
    if (parsed.drums === true && drums === 'none') {
      drums = 'halftime';
      for (const s of sections) if (s.kind !== 'intro' && s.kind !== 'break') s.layers.drums = 1;
    }
    if (parsed.drums === false) drums = 'none';
  }

  const pad = parsed.instruments.pad ?? genre.pad;
  return {
    version: 1,
    prompt: input.prompt,
    cleanedPrompt: parsed.cleaned,
    droppedWords: parsed.dropped,
    seed: input.seed,
    genre: parsed.genre,
    style: styleId,
    moods: parsed.moods,
    energy,
    bpm,
    bpmSource: source,
    tempoWord: parsed.tempoWord,
    key,
    keyRequested: chosen ? chosen.name : null,
    tonic,
    mode,
    loop,
    durationRequested: input.duration ?? (loop || asked ? Math.round(duration * 1000) / 1000 : DEFAULT_DURATION),
    beatsPerBar: 4,
    bars,
    sampleRate: SAMPLE_RATE,
    totalSamples,
    duration,
    fadeSeconds: Math.round(fadeSeconds * 1000) / 1000,
    swing: genre.swing,
    drums,
    instruments: {
      bass: parsed.instruments.bass ?? genre.bass,
      chords: parsed.instruments.chords ?? genre.chords,
      pad: pad === parsed.instruments.chords ? null : pad,
      lead: parsed.instruments.lead ?? genre.lead,
      arp,
    },
    instrumentWords: parsed.instrumentWords,
    sections,
  };
}
