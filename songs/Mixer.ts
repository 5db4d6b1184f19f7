/**
 * Renders a Score to a mastered stereo float signal: voices and drums into a stereo bus plus reverb
 * and delay sends, side-chain ducking, effects, loop-tail folding, bus compression, fade-out,
 * loudness normalisation to −14 LUFS and a true-peak limiter at −1 dBTP.
 */
import { applyCompressor, CompressorRun } from './Compressor.ts';
import { compose, takeSeed, type Score } from './Composer.ts';
import { applyDelay, Delay, type DelayOptions } from './Delay.ts';
import { BufferPool } from './BufferPool.ts';
import { buildKit } from './DrumKit.ts';
import { DuckCurve } from './DuckCurve.ts';
import type { DrumKind } from './Drums.ts';
import { PATCHES, type Patch } from './Instruments.ts';
import { applyLimiter, LimiterRun, peakEnvelope, type LimiterScratch } from './Limiter.ts';
import { fromDb, integratedLoudness, toDb, truePeak } from './Loudness.ts';
import { applyReverb, Reverb, type ReverbOptions } from './Reverb.ts';
import type { SongPlan } from './SongPlanner.ts';
import { renderVoice, voiceLength } from './Synth.ts';

/** Loudness target, LUFS (streaming reference, songs.md §4.7). */
export const TARGET_LUFS = -14;
/** Limiter ceiling, dBTP: the spec asks ≤ −1 dBTP; this aims a little lower for int16 rounding. */
const LIMITER_CEILING_DB = -1.25;
/** Seconds of tail rendered past a loop's end and folded onto its start. */
const LOOP_TAIL_SECONDS = 4;

/**
 * Stem groups, in the order producers expect them: dry drums, bass, chords + pad, lead + arp, and
 * the reverb and delay returns of every part (the send effects are shared, so they are a stem of
 * their own rather than being split by part).
 */
export type StemName = 'drums' | 'bass' | 'chords' | 'lead' | 'effects';
export const STEM_NAMES: readonly StemName[] = ['drums', 'bass', 'chords', 'lead', 'effects'];

/** The stems the mixer accumulates: the dry groups (effects = mix − these, in StemsZip). */
export type DryStemName = Exclude<StemName, 'effects'>;
export const DRY_STEMS: readonly DryStemName[] = ['drums', 'bass', 'chords', 'lead'];

export interface StereoBuffer {
  L: Float32Array;
  R: Float32Array;
}

export interface MasteredStems {
  dry: Record<DryStemName, StereoBuffer>;
  /** Master gain per sample (linear, the same for both channels). */
  gain: Float32Array;
}

export interface MixOptions {
  /** Also return mastered stems (costs memory and a little time). Default false. */
  stems?: boolean;
}

export interface MixResult {
  L: Float32Array;
  R: Float32Array;
  /** Samples (= plan.totalSamples). */
  n: number;
  loudness: number;
  truePeakDb: number;
  /** Milliseconds per stage, for the benchmark. */
  timings: Record<string, number>;
  /** The notes and hits that were rendered (for the MIDI file). */
  score: Score;
  /**
   * With `stems`: each dry group and the master gain the mix went through (the bus compressor's,
   * fade's and limiter's per-sample gain, which is stereo-linked): dry × gain is the mastered stem,
   * so the mix minus their sum is the effect returns through that gain (StemsZip applies the gain
   * as it writes the 16-bit stems: one pass over the buffers instead of two). Null otherwise.
   */
  stems: MasteredStems | null;
  /** Samples of the first span handed out before the rest was rendered (the whole take for loops). */
  firstSpan: number;
  /** Gives the stem buffers back to the thread's pool (call once done reading them). */
  release: () => void;
}

function stemOfRole(role: string): Exclude<StemName, 'drums' | 'effects'> {
  if (role === 'bass') return 'bass';
  if (role === 'chords' || role === 'pad') return 'chords';
  return 'lead';
}

/** Multiplies [from, to) of both channels by g. */
function scaleSpan(L: Float32Array, R: Float32Array, from: number, to: number, g: number): void {
  for (let i = from; i < to; i++) {
    L[i] = (L[i] as number) * g;
    R[i] = (R[i] as number) * g;
  }
}

const DRUM_PAN: Record<DrumKind, number> = {
  kick: 0, snare: 0.02, clap: -0.03, hat: 0.25, openhat: 0.28, ride: -0.3, crash: -0.2, rim: 0.15, tom: 0.3, lowtom: -0.25, shaker: -0.35,
};
const DRUM_REVERB: Record<DrumKind, number> = {
  kick: 0.02, snare: 0.22, clap: 0.25, hat: 0.05, openhat: 0.08, ride: 0.12, crash: 0.2, rim: 0.2, tom: 0.2, lowtom: 0.3, shaker: 0.05,
};
const DRUM_GAIN: Record<DrumKind, number> = {
  kick: 1, snare: 0.75, clap: 0.7, hat: 0.5, openhat: 0.45, ride: 0.5, crash: 0.5, rim: 0.6, tom: 0.6, lowtom: 0.8, shaker: 0.5,
};

function patchFor(plan: SongPlan, role: string, id: keyof typeof PATCHES): Patch {
  const base = PATCHES[id];
  // Dubstep wobble: a beat-synced filter LFO on the bass (8th notes), loop-safe (whole cycles per bar).
  if (plan.style === 'dubstep' && role === 'bass') return { ...base, lfoPerBeat: 2, lfoDepth: 3, cutoff: 200 };
  return base;
}

/** Union of [start, end) intervals as a flat sorted list [lo0, hi0, lo1, hi1, …] (empty ones dropped). */
function noteSpans(iv: [number, number][]): number[] {
  const sorted = iv.filter(([a, b]) => a < b).sort((x, y) => x[0] - y[0]);
  const out: number[] = [];
  for (const [a, b] of sorted) {
    const last = out.length - 1;
    if (last > 0 && a <= (out[last] as number)) out[last] = Math.max(out[last] as number, b);
    else out.push(a, b);
  }
  return out;
}

// The per-sample mixing loops live in small functions of their own: inside renderMix (large, with
// closures) V8 optimises them poorly. Arithmetic and its order are unchanged (the duck gain is 1
// when there is no ducking, so those loops just skip the multiply).

/** Adds a chord/pad part (two mono buffers, panned apart) into the bus and its sends. */
function mixPair(
  a: Float32Array, b: Float32Array, d: Float32Array | null, lo: number, hi: number,
  al: number, ar: number, bl: number, br: number, sv: number, sd: number,
  L: Float32Array, R: Float32Array, rev: Float32Array, dly: Float32Array,
): void {
  // Parts without a delay send (bass, pad) skip that buffer: adding 0·x changes nothing.
  const withDelay = sd !== 0;
  if (d) {
    for (let i = lo; i < hi; i++) {
      const g = d[i] as number;
      const xa = (a[i] as number) * g;
      const xb = (b[i] as number) * g;
      L[i] = (L[i] as number) + al * xa + bl * xb;
      R[i] = (R[i] as number) + ar * xa + br * xb;
      const m = xa + xb;
      rev[i] = (rev[i] as number) + sv * m;
      if (withDelay) dly[i] = (dly[i] as number) + sd * m;
    }
    return;
  }
  for (let i = lo; i < hi; i++) {
    const xa = a[i] as number;
    const xb = b[i] as number;
    L[i] = (L[i] as number) + al * xa + bl * xb;
    R[i] = (R[i] as number) + ar * xa + br * xb;
    const m = xa + xb;
    rev[i] = (rev[i] as number) + sv * m;
    if (withDelay) dly[i] = (dly[i] as number) + sd * m;
  }
}

/** Adds a mono part into the bus and its sends. */
function mixMono(
  a: Float32Array, d: Float32Array | null, lo: number, hi: number, al: number, ar: number, sv: number, sd: number,
  L: Float32Array, R: Float32Array, rev: Float32Array, dly: Float32Array,
): void {
  const withDelay = sd !== 0;
  if (d) {
    for (let i = lo; i < hi; i++) {
      const x = (a[i] as number) * (d[i] as number);
      L[i] = (L[i] as number) + al * x;
      R[i] = (R[i] as number) + ar * x;
      rev[i] = (rev[i] as number) + sv * x;
      if (withDelay) dly[i] = (dly[i] as number) + sd * x;
    }
    return;
  }
  for (let i = lo; i < hi; i++) {
    const x = a[i] as number;
    L[i] = (L[i] as number) + al * x;
    R[i] = (R[i] as number) + ar * x;
    rev[i] = (rev[i] as number) + sv * x;
    if (withDelay) dly[i] = (dly[i] as number) + sd * x;
  }
}

/**
 * mixPair that also adds the part, as it goes into the bus (no sends: the effects stem carries
 * them), into its stem: one pass over the part buffer for both.
 */
function mixPairStem(
  a: Float32Array, b: Float32Array, d: Float32Array | null, lo: number, hi: number,
  al: number, ar: number, bl: number, br: number, sv: number, sd: number,
  L: Float32Array, R: Float32Array, rev: Float32Array, dly: Float32Array, SL: Float32Array, SR: Float32Array,
): void {
  const withDelay = sd !== 0;
  for (let i = lo; i < hi; i++) {
    const g = d ? (d[i] as number) : 1;
    const xa = (a[i] as number) * g;
    const xb = (b[i] as number) * g;
    const l = al * xa + bl * xb;
    const r = ar * xa + br * xb;
    L[i] = (L[i] as number) + l;
    R[i] = (R[i] as number) + r;
    SL[i] = (SL[i] as number) + l;
    SR[i] = (SR[i] as number) + r;
    const m = xa + xb;
    rev[i] = (rev[i] as number) + sv * m;
    if (withDelay) dly[i] = (dly[i] as number) + sd * m;
  }
}

/** mixMono that also adds the part into its stem (see mixPairStem). */
function mixMonoStem(
  a: Float32Array, d: Float32Array | null, lo: number, hi: number, al: number, ar: number, sv: number, sd: number,
  L: Float32Array, R: Float32Array, rev: Float32Array, dly: Float32Array, SL: Float32Array, SR: Float32Array,
): void {
  const withDelay = sd !== 0;
  for (let i = lo; i < hi; i++) {
    const x = (a[i] as number) * (d ? (d[i] as number) : 1);
    const l = al * x;
    const r = ar * x;
    L[i] = (L[i] as number) + l;
    R[i] = (R[i] as number) + r;
    SL[i] = (SL[i] as number) + l;
    SR[i] = (SR[i] as number) + r;
    rev[i] = (rev[i] as number) + sv * x;
    if (withDelay) dly[i] = (dly[i] as number) + sd * x;
  }
}

/** addDrum that also adds the hit into the drums stem. */
function addDrumStem(
  smp: Float32Array, start: number, end: number, gl: number, gr: number, sv: number,
  L: Float32Array, R: Float32Array, rev: Float32Array, SL: Float32Array, SR: Float32Array,
): void {
  for (let i = start; i < end; i++) {
    const x = smp[i - start] as number;
    const l = gl * x;
    const r = gr * x;
    L[i] = (L[i] as number) + l;
    R[i] = (R[i] as number) + r;
    SL[i] = (SL[i] as number) + l;
    SR[i] = (SR[i] as number) + r;
    rev[i] = (rev[i] as number) + sv * x;
  }
}

/** Adds one drum hit (samples [start, end) of the bus) with its pan gains and reverb send. */
function addDrum(smp: Float32Array, start: number, end: number, gl: number, gr: number, sv: number, L: Float32Array, R: Float32Array, rev: Float32Array): void {
  for (let i = start; i < end; i++) {
    const x = smp[i - start] as number;
    L[i] = (L[i] as number) + gl * x;
    R[i] = (R[i] as number) + gr * x;
    rev[i] = (rev[i] as number) + sv * x;
  }
}

/** Receives final (mastered) samples [from, to) of the take as soon as they are final, in order. */
export type FinalSpanSink = (L: Float32Array, R: Float32Array, from: number, to: number) => void | Promise<void>;

export interface ProgressiveMixOptions extends MixOptions {
  /** Called once per final span, in order (songs: the first section, then the rest; loops: once). */
  onFinal?: FinalSpanSink;
}

/** Everything the render stages share (one take). */
interface MixContext {
  plan: SongPlan;
  score: Score;
  len: number;
  L: Float32Array;
  R: Float32Array;
  rev: Float32Array;
  dly: Float32Array;
  duck: DuckCurve | null;
  partA: Float32Array;
  partB: Float32Array;
  stems: Record<DryStemName, StereoBuffer> | null;
  seedBase: number;
  timings: Record<string, number>;
  clock: () => number;
  onProgress: ((f: number) => void) | undefined;
  /** Notes rendered so far (progress) and each part's first note index (voice seeds). */
  rendered: number;
  totalNotes: number;
  partBase: number[];
  /** Stem and gain buffers (this thread's, reused): see BufferPool. */
  pool: BufferPool;
}

/**
 * Pool slots: 0–7 the dry stems; then the master and limiter gains; then the mix's own buffers
 * (every render, with or without stems: allocating them fresh cost ≈ 0.5 s of page faults per
 * 120 s take and a major GC, the latter often right before the first MP3 byte).
 */
const POOL_MASTER_GAIN = 8;
const POOL_LIMITER_GAIN = 9;
const POOL_BUS = 10; // L, R, reverb send (later final L), delay send (later final R): 10–13
const POOL_PART = 14; // partA, partB: 14–15
const POOL_DUCK = 16; // duck curve, later the limiter's peak detector
const POOL_LIM = 17; // limiter scratch pre, suf: 17–18
const POOL_LIM_FIRST = 19; // the first span's limiter scratch a, pre, suf: 19–21

/**
 * Renders the notes of every part whose onset `pick` accepts, into the bus, its sends and the
 * bass/lead stems. Voices are seeded by their note's index in the score, so splitting the notes
 * over several calls renders the same voices.
 */
function renderNotes(c: MixContext, pick: (start: number) => boolean): void {
  const { plan, score, len, partA, partB, L, R, rev, dly, duck, stems } = c;
  const sr = plan.sampleRate;
  score.parts.forEach((part, pi) => {
    if (part.notes.length === 0) return;
    const patch = patchFor(plan, part.role, part.instrument);
    const spread = part.role === 'chords' || part.role === 'pad' ? 0.35 : 0;
    const chosen: number[] = [];
    part.notes.forEach((note, k) => {
      if (pick(note.start)) chosen.push(k);
    });
    if (chosen.length === 0) return;
    // Spans the chosen notes sound in (union of [start, end of release)): only these are
    // cleared and mixed, so sections where the part rests cost nothing (the buffer is 0 there).
    const spans = noteSpans(chosen.map((k) => {
      const note = part.notes[k]!;
      return [note.start, Math.min(len, note.start + voiceLength(patch, note, sr))];
    }));
    if (spans.length === 0) return;
    const tPart = c.clock();
    for (let k = 0; k < spans.length; k += 2) {
      partA.fill(0, spans[k] as number, spans[k + 1] as number);
      if (spread > 0) partB.fill(0, spans[k] as number, spans[k + 1] as number);
    }
    const base = c.partBase[pi] as number;
    for (const k of chosen) {
      const note = part.notes[k]!;
      const target = spread > 0 && note.pitch % 2 === 1 ? partB : partA;
      const ctx = { sampleRate: sr, samplesPerBeat: score.samplesPerBeat, seed: (c.seedBase ^ Math.imul(base + k + 1, 0x9e3779b1)) | 0 };
      renderVoice(patch, note, ctx, target, note.start, note.vel);
      c.rendered++;
      if ((c.rendered & 127) === 0) c.onProgress?.(0.05 + 0.5 * (c.rendered / Math.max(1, c.totalNotes)));
    }
    const key = `part:${part.role}:${part.instrument}`;
    c.timings[key] = (c.timings[key] ?? 0) + c.clock() - tPart;
    const amp = part.gain * patch.level;
    const panGains = (pan: number): [number, number] => {
      const a = ((Math.max(-1, Math.min(1, pan)) + 1) * Math.PI) / 4;
      return [amp * Math.cos(a) * Math.SQRT2, amp * Math.sin(a) * Math.SQRT2];
    };
    const [al, ar] = panGains(part.pan - spread);
    const [bl, br] = panGains(part.pan + spread);
    const sv = amp * part.reverb;
    const sd = amp * part.delay;
    const d = part.duck && duck !== null ? duck.g : null;
    const group = stemOfRole(part.role);
    for (let k = 0; k < spans.length; k += 2) {
      const lo = spans[k] as number;
      const hi = spans[k + 1] as number;
      if (d) duck!.ensure(lo, hi);
      const st = stems ? stems[group] : null;
      if (spread > 0) {
        if (st) mixPairStem(partA, partB, d, lo, hi, al, ar, bl, br, sv, sd, L, R, rev, dly, st.L, st.R);
        else mixPair(partA, partB, d, lo, hi, al, ar, bl, br, sv, sd, L, R, rev, dly);
      } else if (st) mixMonoStem(partA, d, lo, hi, al, ar, sv, sd, L, R, rev, dly, st.L, st.R);
      else mixMono(partA, d, lo, hi, al, ar, sv, sd, L, R, rev, dly);
    }
  });
}

/** Adds the drum hits whose onset `pick` accepts (and, with stems, the drums stem). */
function renderDrums(c: MixContext, kit: Record<DrumKind, Float32Array> | null, pick: (start: number) => boolean): void {
  if (!kit) return;
  for (const h of c.score.drums) {
    if (!pick(h.start)) continue;
    const smp = kit[h.kind];
    const a = ((DRUM_PAN[h.kind] + 1) * Math.PI) / 4;
    const amp = h.vel * DRUM_GAIN[h.kind] * 0.9;
    const gl = amp * Math.cos(a) * Math.SQRT2;
    const gr = amp * Math.sin(a) * Math.SQRT2;
    const sv = amp * DRUM_REVERB[h.kind];
    const end = Math.min(c.len, h.start + smp.length);
    if (c.stems) addDrumStem(smp, h.start, end, gl, gr, sv, c.L, c.R, c.rev, c.stems.drums.L, c.stems.drums.R);
    else addDrum(smp, h.start, end, gl, gr, sv, c.L, c.R, c.rev);
  }
}

function effectOptions(plan: SongPlan, score: Score): { reverb: ReverbOptions; delay: DelayOptions } {
  const sr = plan.sampleRate;
  const roomy = plan.style === 'ambient' ? 5 : plan.style === 'cinematic' ? 3.5 : plan.style === 'lofi' || plan.style === 'jazz' ? 1.6 : 2.3;
  return {
    reverb: { rt60: roomy, damping: plan.style === 'lofi' ? 3500 : 6000, preDelay: Math.round(0.02 * sr), wet: 0.9 },
    delay: { time: Math.round(score.samplesPerBeat * 0.75), feedback: plan.style === 'reggae' ? 0.55 : 0.38, tone: 3500, wet: 0.8 },
  };
}

/**
 * Progressive mastering constants (songs, not loops; docs/songs.md § Audio while it renders).
 * The first section is mastered before the rest is rendered, at a gain estimated from the
 * loudest planned section rendered first (its dry bus, up to REF_BARS bars); the rest gets the
 * exact gain that brings the whole take to TARGET_LUFS, reached from the first section's gain
 * over RAMP_SECONDS. The bus compressor's threshold is set from the same reference.
 */
const FIRST_SPAN_MIN_SECONDS = 2;
const FIRST_SPAN_MAX_SECONDS = 8;
const REF_BARS = 2;
/** The lead-in: the first piece of the first span, LEAD_IN_BARS bars within 1.5–3 s (split off only when ≥ 0.5 s of the span is left). */
const LEAD_IN_BARS = 1;
const LEAD_IN_MIN_SECONDS = 1.5;
const LEAD_IN_MAX_SECONDS = 3;
const LEAD_IN_MIN_REST_SECONDS = 0.5;
const RAMP_SECONDS = 1;
/** Samples past the first span that are mixed with it: the limiter's look-ahead and true-peak taps (48 + 6) fit. */
const FIRST_SPAN_GUARD = 128;
/**
 * dB from the reference's dry-bus loudness to the whole mastered-chain loudness before the gain,
 * and from its dry RMS to the RMS the compressor's threshold used to be relative to (the whole
 * mix with effects): measured over ten genres (docs/songs.md § Audio while it renders).
 */
const REF_LOUDNESS_OFFSET_DB = -1.5;
const REF_RMS_OFFSET_DB = -1.2;

export async function renderMix(plan: SongPlan, n: 1 | 2, onProgress?: (f: number) => void, options: ProgressiveMixOptions = {}): Promise<MixResult> {
  // Stage timings are wall clock; REVERIE_CPU_TIMINGS=1 switches to process CPU time (profiling on a busy machine).
  const clock = () => (process.env.REVERIE_CPU_TIMINGS ? process.cpuUsage().user / 1000 : performance.now());
  const timings: Record<string, number> = {};
  let tMark = clock();
  const mark = (name: string) => {
    const now = clock();
    timings[name] = (timings[name] ?? 0) + now - tMark;
    tMark = now;
  };
  const sr = plan.sampleRate;
  const total = plan.totalSamples;
  const score = compose(plan, n);
  mark('compose');
  const tail = plan.loop ? Math.round(LOOP_TAIL_SECONDS * sr) : 0;
  const len = total + tail;
  const pool = BufferPool.lease();
  let pooledK = 0;
  // Every stem accumulates its parts (zeroed).
  const stereo = (zero: boolean): StereoBuffer => ({ L: pool.get(pooledK++, len, zero), R: pool.get(pooledK++, len, zero) });
  const partBase: number[] = [];
  let totalNotes = 0;
  for (const p of score.parts) {
    partBase.push(totalNotes);
    totalNotes += p.notes.length;
  }
  const c: MixContext = {
    plan, score, len,
    // The bus and sends accumulate (zeroed: 4 × 23 MB at 120 s, ≈ 10 ms); the part buffers are
    // cleared span by span in renderNotes, the duck curve block by block.
    L: pool.get(POOL_BUS, len, true), R: pool.get(POOL_BUS + 1, len, true), rev: pool.get(POOL_BUS + 2, len, true), dly: pool.get(POOL_BUS + 3, len, true),
    duck: score.parts.some((p) => p.duck) ? new DuckCurve(score, len, plan.loop ? total : null, pool.get(POOL_DUCK, len, false)) : null,
    partA: pool.get(POOL_PART, len, false), partB: pool.get(POOL_PART + 1, len, false), pool,
    stems: options.stems ? { drums: stereo(true), bass: stereo(true), chords: stereo(true), lead: stereo(true) } : null,
    seedBase: takeSeed(plan, n), timings, clock, onProgress, rendered: 0, totalNotes, partBase,
  };
  mark('setup');
  const kit = score.drums.length > 0 ? buildKit(plan.drums, sr, c.seedBase) : null;
  const fx = effectOptions(plan, score);
  mark('kit');
  try {
    return plan.loop ? await masterLoop(c, kit, fx, mark, options.onFinal) : await masterSong(c, kit, fx, mark, options.onFinal);
  } catch (e) {
    pool.release();
    throw e;
  }
}

type Mark = (name: string) => void;

/**
 * Songs: progressive. Renders the first section (plus the loudest section, for the estimates)
 * and masters, dithers and hands out the first section before the rest is rendered; the rest is
 * normalised so that the whole take is at TARGET_LUFS.
 */
async function masterSong(
  c: MixContext, kit: Record<DrumKind, Float32Array> | null, fx: { reverb: ReverbOptions; delay: DelayOptions }, mark: Mark, onFinal?: FinalSpanSink,
): Promise<MixResult> {
  const { plan, score, L, R, rev, dly, stems } = c;
  const sr = plan.sampleRate;
  const total = plan.totalSamples;
  const barSamples = score.samplesPerBeat * plan.beatsPerBar;
  const first = plan.sections[0];
  // First span: the first section, 2–8 s, at most half the take, ending on a 32-sample block.
  let t1 = Math.round((first ? first.bars : 1) * barSamples);
  t1 = Math.max(Math.min(FIRST_SPAN_MIN_SECONDS * sr, Math.floor(total / 4)), Math.min(t1, FIRST_SPAN_MAX_SECONDS * sr, Math.floor(total / 2)));
  t1 = Math.floor(t1 / 32) * 32;
  const t1e = t1 + FIRST_SPAN_GUARD;
  // Reference: the first section of the highest planned energy, its first REF_BARS bars.
  let ref = plan.sections[0];
  for (const s of plan.sections) if (ref === undefined || s.energy > ref.energy) ref = s;
  const r0 = ref ? Math.round(ref.startBar * barSamples) : 0;
  const r1 = Math.min(total, ref ? Math.round((ref.startBar + Math.min(ref.bars, REF_BARS)) * barSamples) : total);
  const inRef = (start: number) => start >= r0 && start < r1;
  const inA = (start: number) => start < t1e || inRef(start);
  // Lead-in: the first span is handed out in two pieces, the first LEAD_IN_BARS bars (1.5–3 s)
  // and then the rest of it, both at the first span's gain: the first MP3 bytes wait only for the
  // lead-in (and the reference), while the player still gets the whole first section before the
  // rest of the take is rendered.
  let t0 = Math.round(LEAD_IN_BARS * barSamples);
  t0 = Math.floor(Math.max(LEAD_IN_MIN_SECONDS * sr, Math.min(t0, LEAD_IN_MAX_SECONDS * sr)) / 32) * 32;
  if (t0 + LEAD_IN_MIN_REST_SECONDS * sr >= t1) t0 = t1;
  const pieces: [number, number][] = t0 < t1 ? [[0, t0], [t0, t1]] : [[0, t1]];

  // ---- first span (and the reference) ----
  const reverb = new Reverb(sr, fx.reverb);
  const delay = new Delay(sr, fx.delay);
  // With stems, `masterGain` collects the per-sample gain of every master stage (all stereo-linked).
  const masterGain = stems ? c.pool.get(POOL_MASTER_GAIN, total, false) : undefined; // written in full by the compressor
  const limGain = stems ? c.pool.get(POOL_LIMITER_GAIN, total, false) : undefined; // written in full by the limiter
  const fadeN = Math.min(total, Math.round(plan.fadeSeconds * sr));
  const finalL = rev.subarray(0, total);
  const finalR = dly.subarray(0, total);
  const ceiling = fromDb(LIMITER_CEILING_DB);
  const lim = { ceiling, lookahead: 48, release: Math.round(0.08 * sr), circular: false };
  // The duck curve's buffer is free where the first span's detector writes: later parts mix only
  // after each piece's guard, and the rest's detector is computed after every part is mixed.
  const peaks = c.duck ? c.duck.g.subarray(0, total) : c.pool.get(POOL_DUCK, total, false);
  const limiter = new LimiterRun(lim);
  const small = { a: c.pool.get(POOL_LIM_FIRST, t1 + 256, false), b: new Float32Array(0), pre: c.pool.get(POOL_LIM_FIRST + 1, t1 + 256, false), suf: c.pool.get(POOL_LIM_FIRST + 2, t1 + 256, false) };
  const maxTp = fromDb(LIMITER_CEILING_DB + 0.05);
  let g0 = 1;
  let comp: CompressorRun | null = null;
  /** [from, to, true-peak trim] of each piece handed out so far (the stems' gain takes the trims). */
  const trims: [number, number, number][] = [];
  let tpFirst = 0;
  for (let k = 0; k < pieces.length; k++) {
    const [a, b] = pieces[k] as [number, number];
    // Mixed and processed range of this piece: its guard reaches past b (limiter look-ahead, true-peak taps).
    const ae = a === 0 ? 0 : a + FIRST_SPAN_GUARD;
    const be = b + FIRST_SPAN_GUARD;
    const pick = k === 0 ? (start: number) => start < be || inRef(start) : (start: number) => start >= ae && start < be && !inRef(start);
    renderNotes(c, pick);
    mark('voices');
    renderDrums(c, kit, pick);
    mark('drums');
    if (k === 0) {
      const refLoud = integratedLoudness(L.subarray(r0, r1), R.subarray(r0, r1), r1 - r0, sr);
      const refRms = rmsOf(L, R, r0, r1);
      g0 = Number.isFinite(refLoud) ? fromDb(TARGET_LUFS - refLoud - REF_LOUDNESS_OFFSET_DB) : 1;
      // A silent reference (a sparse custom section) leaves the compressor off (threshold over full scale).
      const thrDb = refRms > 0 ? 20 * Math.log10(refRms) + REF_RMS_OFFSET_DB + 6 : 6;
      comp = new CompressorRun(thrDb, sr, { ratio: 2.5, attackMs: 10, releaseMs: 150 });
      mark('reference');
    }
    reverb.process(rev, L, R, ae, be, total);
    mark('reverb');
    delay.process(dly, L, R, ae, be);
    mark('delay');
    comp!.process(L, R, ae, be, masterGain);
    applyFade(L, R, masterGain, total, fadeN, ae, be);
    mark('bus');
    peakEnvelope(L, R, total, (ceiling / g0) * 0.85, false, peaks, a, Math.min(total, b + 64));
    limiter.process(L, R, g0, null, 0, peaks, a, b, total, finalL, finalR, small, limGain);
    const tp = truePeak(finalL.subarray(a, b), finalR.subarray(a, b), b - a, false);
    const trimK = tp > maxTp ? maxTp / tp : 1;
    if (trimK !== 1) scaleSpan(finalL, finalR, a, b, trimK);
    trims.push([a, b, trimK]);
    tpFirst = Math.max(tpFirst, tp * trimK);
    mark('loudness');
    await onFinal?.(finalL, finalR, a, b);
    mark(k === 0 ? 'firstSpan' : 'secondSpan');
  }
  const afterFirst = limiter.save();
  c.onProgress?.(0.1);

  // ---- the rest ----
  const inB = (start: number) => !inA(start);
  renderNotes(c, inB);
  mark('voices');
  renderDrums(c, kit, inB);
  mark('drums');
  c.onProgress?.(0.6);
  reverb.process(rev, L, R, t1e, total, total);
  mark('reverb');
  delay.process(dly, L, R, t1e, total);
  mark('delay');
  comp!.process(L, R, t1e, total, masterGain);
  applyFade(L, R, masterGain, total, fadeN, t1e, total);
  mark('bus');
  c.onProgress?.(0.75);
  // Loudness: the rest's gain brings the whole take (first span as sent) to the target; measure,
  // limit, re-measure, correct (2–3 passes).
  const pre = integratedLoudness(L, R, total, sr);
  let gain = Number.isFinite(pre) ? fromDb(TARGET_LUFS - pre) : 1;
  const rest = total - t1;
  const scratch: LimiterScratch = { a: c.partA, b: c.partB, pre: c.pool.get(POOL_LIM, rest + 256, false), suf: c.pool.get(POOL_LIM + 1, rest + 256, false) };
  peakEnvelope(L, R, total, (ceiling / gain) * 0.85, false, peaks, t1, total);
  const rampN = Math.min(rest, Math.round(RAMP_SECONDS * sr));
  const ramp = new Float32Array(rampN);
  let loud = pre;
  for (let pass = 0; pass < 3; pass++) {
    // Gain ramp from the first span's gain to the rest's, linear in dB.
    const ratio = g0 / gain;
    for (let k = 0; k < rampN; k++) ramp[k] = Math.pow(ratio, 1 - (k + 1) / rampN);
    limiter.restore(afterFirst);
    limiter.process(L, R, gain, ramp, t1, peaks, t1, total, total, finalL, finalR, scratch, limGain);
    loud = integratedLoudness(finalL, finalR, total, sr);
    if (!Number.isFinite(loud) || Math.abs(loud - TARGET_LUFS) < 0.2) break;
    gain *= fromDb(TARGET_LUFS - loud);
  }
  mark('loudness');
  // Guard: the limiter's detection and the meter share one interpolator; trim any residue.
  let tp = truePeak(finalL.subarray(t1), finalR.subarray(t1), rest, false);
  let trim = 1;
  if (tp > maxTp) {
    trim = maxTp / tp;
    scaleSpan(finalL, finalR, t1, total, trim);
    tp *= trim;
    loud += toDb(trim);
  }
  mark('truepeak');
  const stemsOut = stems && masterGain && limGain ? masterStems(stems, masterGain, limGain, total, [...trims, [t1, total, trim]]) : null;
  if (stemsOut) mark('stems');
  c.onProgress?.(0.8);
  await onFinal?.(finalL, finalR, t1, total);
  return { L: finalL, R: finalR, n: total, loudness: loud, truePeakDb: toDb(Math.max(tp, tpFirst)), timings: c.timings, score, stems: stemsOut, firstSpan: t1, release: () => c.pool.release() };
}

function rmsOf(L: Float32Array, R: Float32Array, from: number, to: number): number {
  let ss = 0;
  for (let i = from; i < to; i++) {
    const a = L[i] as number;
    const b = R[i] as number;
    ss += a * a + b * b;
  }
  return Math.sqrt(ss / Math.max(1, 2 * (to - from)));
}

/** Raised-cosine fade over the last `f` samples (ending at exactly 0 on the final bar line), applied to [from, to). */
function applyFade(L: Float32Array, R: Float32Array, gain: Float32Array | undefined, total: number, f: number, from: number, to: number): void {
  if (f <= 0) return;
  for (let idx = Math.max(from, total - f); idx < to; idx++) {
    const i = idx - (total - f);
    const x = (f - i) / f;
    const g = 0.5 - 0.5 * Math.cos(Math.PI * x);
    L[idx] = (L[idx] as number) * g;
    R[idx] = (R[idx] as number) * g;
    if (gain) gain[idx] = (gain[idx] as number) * g;
  }
}

/** The stems and their master gain: compressor × fade (in masterGain) × limiter × each span's trim. */
function masterStems(
  stems: Record<DryStemName, StereoBuffer>, masterGain: Float32Array, limGain: Float32Array, total: number, trims: [number, number, number][],
): MasteredStems {
  for (const [from, to, t] of trims) {
    for (let i = from; i < to; i++) masterGain[i] = (masterGain[i] as number) * (limGain[i] as number) * t;
  }
  const dry = {} as Record<DryStemName, StereoBuffer>;
  for (const name of DRY_STEMS) dry[name] = { L: stems[name].L.subarray(0, total), R: stems[name].R.subarray(0, total) };
  return { dry, gain: masterGain.subarray(0, total) };
}

/**
 * Loops: the whole take at once (its tail is folded onto its start, and the compressor and
 * limiter wrap around, so nothing is final before everything is rendered).
 */
async function masterLoop(
  c: MixContext, kit: Record<DrumKind, Float32Array> | null, fx: { reverb: ReverbOptions; delay: DelayOptions }, mark: Mark, onFinal?: FinalSpanSink,
): Promise<MixResult> {
  const { plan, score, len, L, R, rev, dly, stems, partA, partB, duck } = c;
  const sr = plan.sampleRate;
  const total = plan.totalSamples;
  const all = () => true;
  renderNotes(c, all);
  mark('voices');
  renderDrums(c, kit, all);
  mark('drums');
  c.onProgress?.(0.6);

  // ---- effects ----
  // The effects stem is not accumulated here: it is the mix minus the dry stems (StemsZip.ts),
  // which is exactly these returns through the master gain.
  applyReverb(rev, L, R, len, sr, fx.reverb);
  mark('reverb');
  applyDelay(dly, L, R, len, sr, fx.delay);
  mark('delay');
  c.onProgress?.(0.7);
  // ---- loop: fold the tail onto the start (circular overlap-add) ----
  {
    const fold = (A: Float32Array, B: Float32Array) => {
      for (let i = total; i < len; i++) {
        const j = (i - total) % total;
        A[j] = (A[j] as number) + (A[i] as number);
        B[j] = (B[j] as number) + (B[i] as number);
      }
    };
    fold(L, R);
    if (stems) for (const name of DRY_STEMS) fold(stems[name].L, stems[name].R);
  }
  const outL = L.subarray(0, total);
  const outR = R.subarray(0, total);

  // ---- master ----
  // With stems, `masterGain` collects the per-sample gain of every master stage (all stereo-linked).
  const masterGain = stems ? c.pool.get(POOL_MASTER_GAIN, total, false) : undefined; // written in full by the compressor
  applyCompressor(outL, outR, total, sr, { thresholdOverRms: 6, ratio: 2.5, attackMs: 10, releaseMs: 150, circular: plan.loop }, masterGain);
  if (plan.fadeSeconds > 0) {
    const f = Math.min(total, Math.round(plan.fadeSeconds * sr));
    for (let i = 0; i < f; i++) {
      // Raised-cosine fade ending at exactly 0 on the final bar line.
      const x = (f - i) / f;
      const g = 0.5 - 0.5 * Math.cos(Math.PI * x);
      const idx = total - f + i;
      outL[idx] = (outL[idx] as number) * g;
      outR[idx] = (outR[idx] as number) * g;
      if (masterGain) masterGain[idx] = (masterGain[idx] as number) * g;
    }
  }
  mark('bus');
  c.onProgress?.(0.75);

  // Loudness: measure, normalise, limit, re-measure, correct (converges in 2–3 passes).
  const pre = integratedLoudness(outL, outR, total, sr);
  const finalL = rev.subarray(0, total);
  const finalR = dly.subarray(0, total);
  let gain = Number.isFinite(pre) ? fromDb(TARGET_LUFS - pre) : 1;
  const lim = { ceiling: fromDb(LIMITER_CEILING_DB), lookahead: 48, release: Math.round(0.08 * sr), circular: plan.loop };
  // The part buffers are free now: reuse them as limiter scratch (saves 2 × 4 bytes per sample).
  const scratchLim: LimiterScratch = { a: partA.subarray(0, total), b: partB.subarray(0, total), pre: c.pool.get(POOL_LIM, total + 256, false), suf: c.pool.get(POOL_LIM + 1, total + 256, false) };
  // Detector computed once; blocks more than 6 dB under the first ceiling are bounded, not measured.
  const peaks = duck ? duck.g.subarray(0, total) : c.pool.get(POOL_DUCK, total, false);
  peakEnvelope(outL, outR, total, (lim.ceiling / gain) * 0.85, plan.loop, peaks);
  let loud = pre;
  // With stems: the limiter's gain of the pass whose output is kept (each pass overwrites it).
  const limGain = masterGain ? c.pool.get(POOL_LIMITER_GAIN, total, false) : undefined; // written in full by the limiter
  for (let pass = 0; pass < 3; pass++) {
    applyLimiter(outL, outR, gain, finalL, finalR, total, lim, scratchLim, peaks, limGain);
    loud = integratedLoudness(finalL, finalR, total, sr);
    if (!Number.isFinite(loud) || Math.abs(loud - TARGET_LUFS) < 0.2) break;
    gain *= fromDb(TARGET_LUFS - loud);
  }
  mark('loudness');
  if (masterGain && limGain) {
    for (let i = 0; i < total; i++) masterGain[i] = (masterGain[i] as number) * (limGain[i] as number);
  }
  // Guard: the limiter's detection and the meter share one interpolator; trim any residue.
  let tp = truePeak(finalL, finalR, total, plan.loop);
  const maxTp = fromDb(LIMITER_CEILING_DB + 0.05);
  if (tp > maxTp) {
    const g = maxTp / tp;
    for (let i = 0; i < total; i++) {
      finalL[i] = (finalL[i] as number) * g;
      finalR[i] = (finalR[i] as number) * g;
    }
    tp *= g;
    loud += toDb(g);
    if (masterGain) for (let i = 0; i < total; i++) masterGain[i] = (masterGain[i] as number) * g;
  }
  mark('truepeak');
  let stemsOut: MasteredStems | null = null;
  if (stems && masterGain) {
    const dry = {} as Record<DryStemName, StereoBuffer>;
    for (const name of DRY_STEMS) dry[name] = { L: stems[name].L.subarray(0, total), R: stems[name].R.subarray(0, total) };
    stemsOut = { dry, gain: masterGain.subarray(0, total) };
    mark('stems');
  }
  c.onProgress?.(0.8);
  await onFinal?.(finalL, finalR, 0, total);
  return { L: finalL, R: finalR, n: total, loudness: loud, truePeakDb: toDb(tp), timings: c.timings, score, stems: stemsOut, firstSpan: total, release: () => c.pool.release() };
}
