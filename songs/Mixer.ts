/**
 * Renders a Score to a mastered stereo float signal: voices and drums into a stereo bus plus reverb
 * and delay sends, side-chain ducking, effects, loop-tail folding, bus compression, fade-out,
 * loudness normalisation to −14 LUFS and a true-peak limiter at −1 dBTP.
 */
import { applyCompressor } from './Compressor.ts';
import { compose, takeSeed, type Score } from './Composer.ts';
import { applyDelay } from './Delay.ts';
import { buildKit } from './DrumKit.ts';
import type { DrumKind } from './Drums.ts';
import { PATCHES, type Patch } from './Instruments.ts';
import { applyLimiter, peakEnvelope, type LimiterScratch } from './Limiter.ts';
import { fromDb, integratedLoudness, toDb, truePeak } from './Loudness.ts';
import { applyReverb } from './Reverb.ts';
import type { SongPlan } from './SongPlanner.ts';
import { renderVoice, voiceLength } from './Synth.ts';

/** Loudness target, LUFS (streaming reference, songs.md §4.7). */
export const TARGET_LUFS = -14;
/** True-peak ceiling, dBTP (spec: ≤ −1). The limiter aims a little lower for int16 rounding. */
export const TRUE_PEAK_DBTP = -1;
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
   * With `stems`: each dry group through the same master gain as the mix (the bus compressor's,
   * fade's and limiter's per-sample gain, which is stereo-linked), so the mix minus their sum is
   * the effect returns through that gain. Null otherwise.
   */
  stems: Record<DryStemName, StereoBuffer> | null;
}

/**
 * Stem and gain buffers kept between stem renders in this thread (≈ 240 MB at 124 s): on our VMs
 * first-touching fresh memory costs ≈ 3.5 ms per MB, more than all the stem arithmetic, so they are
 * allocated once and zeroed per render. A render returns views into them, valid until the next
 * stem render in the same thread (renderTakeHere consumes them synchronously).
 */
const stemPool: Float32Array[] = [];
/** Buffer `k` of the pool, `len` long; zeroed only when `zero` (buffers written in full skip the memset). */
function pooled(k: number, len: number, zero: boolean): Float32Array {
  let b = stemPool[k];
  if (!b || b.length < len) {
    b = new Float32Array(len);
    stemPool[k] = b;
    return b;
  }
  if (zero) b.fill(0, 0, len);
  return b.subarray(0, len);
}

function stemOfRole(role: string): Exclude<StemName, 'drums' | 'effects'> {
  if (role === 'bass') return 'bass';
  if (role === 'chords' || role === 'pad') return 'chords';
  return 'lead';
}

/** Stem copy of mixPair's bus write (no sends: the effects stem carries them). */
function stemPair(
  a: Float32Array, b: Float32Array, d: Float32Array | null, lo: number, hi: number,
  al: number, ar: number, bl: number, br: number, L: Float32Array, R: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const g = d ? (d[i] as number) : 1;
    const xa = (a[i] as number) * g;
    const xb = (b[i] as number) * g;
    L[i] = (L[i] as number) + al * xa + bl * xb;
    R[i] = (R[i] as number) + ar * xa + br * xb;
  }
}

function stemMono(a: Float32Array, d: Float32Array | null, lo: number, hi: number, al: number, ar: number, L: Float32Array, R: Float32Array): void {
  for (let i = lo; i < hi; i++) {
    const x = (a[i] as number) * (d ? (d[i] as number) : 1);
    L[i] = (L[i] as number) + al * x;
    R[i] = (R[i] as number) + ar * x;
  }
}

/**
 * From the bus snapshot after the voices (in stems.chords) and the bus now (voices + drums):
 * drums = bus − snapshot, chords = snapshot − bass − lead. Float32 rounding of these differences
 * is ~1e-7 of full scale, far under one 16-bit step (3e-5).
 */
function splitBus(L: Float32Array, R: Float32Array, stems: Record<DryStemName, StereoBuffer>, n: number): void {
  const cL = stems.chords.L;
  const cR = stems.chords.R;
  const dL = stems.drums.L;
  const dR = stems.drums.R;
  const bL = stems.bass.L;
  const bR = stems.bass.R;
  const lL = stems.lead.L;
  const lR = stems.lead.R;
  for (let i = 0; i < n; i++) {
    const vl = cL[i] as number;
    const vr = cR[i] as number;
    dL[i] = (L[i] as number) - vl;
    dR[i] = (R[i] as number) - vr;
    cL[i] = vl - (bL[i] as number) - (lL[i] as number);
    cR[i] = vr - (bR[i] as number) - (lR[i] as number);
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

/** Side-chain gain curve from kick positions: a dip of `depth` recovering over `rel` samples. */
function duckCurve(score: Score, len: number, loopLen: number | null): Float32Array {
  const g = new Float32Array(len).fill(1);
  const rel = Math.round(score.samplesPerBeat * 0.6);
  const depth = 0.55;
  const starts = loopLen === null ? score.kicks : [...score.kicks, ...score.kicks.map((k) => k + loopLen)];
  for (const k of starts) {
    for (let i = 0; i < rel; i++) {
      const idx = k + i;
      if (idx >= len) break;
      const x = i / rel;
      const v = 1 - depth * (1 - x) * (1 - x);
      if (v < (g[idx] as number)) g[idx] = v;
    }
  }
  return g;
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

/** Adds one drum hit (samples [start, end) of the bus) with its pan gains and reverb send. */
function addDrum(smp: Float32Array, start: number, end: number, gl: number, gr: number, sv: number, L: Float32Array, R: Float32Array, rev: Float32Array): void {
  for (let i = start; i < end; i++) {
    const x = smp[i - start] as number;
    L[i] = (L[i] as number) + gl * x;
    R[i] = (R[i] as number) + gr * x;
    rev[i] = (rev[i] as number) + sv * x;
  }
}

export function renderMix(plan: SongPlan, n: 1 | 2, onProgress?: (f: number) => void, options: MixOptions = {}): MixResult {
  // Stage timings are wall clock; REVERIE_CPU_TIMINGS=1 switches to process CPU time (profiling on a busy machine).
  const clock = () => (process.env.REVERIE_CPU_TIMINGS ? process.cpuUsage().user / 1000 : performance.now());
  const timings: Record<string, number> = {};
  let tMark = clock();
  const mark = (name: string) => {
    const now = clock();
    timings[name] = now - tMark;
    tMark = now;
  };
  const sr = plan.sampleRate;
  const total = plan.totalSamples;
  const score = compose(plan, n);
  mark('compose');
  const tail = plan.loop ? Math.round(LOOP_TAIL_SECONDS * sr) : 0;
  const len = total + tail;
  const L = new Float32Array(len);
  const R = new Float32Array(len);
  const rev = new Float32Array(len);
  const dly = new Float32Array(len);
  const duck = score.parts.some((p) => p.duck) ? duckCurve(score, len, plan.loop ? total : null) : null;
  let pooledK = 0;
  // Bass and lead accumulate (zeroed); chords and drums are written in full from bus snapshots.
  const stereo = (zero: boolean): StereoBuffer => ({ L: pooled(pooledK++, len, zero), R: pooled(pooledK++, len, zero) });
  // Only bass and lead (+ arp) are accumulated part by part; chords and drums come from snapshots
  // of the bus (after the voices, after the drums) by subtraction, which costs a copy, not a mix.
  const stems: Record<DryStemName, StereoBuffer> | null = options.stems ? { drums: stereo(false), bass: stereo(true), chords: stereo(false), lead: stereo(true) } : null;

  // ---- voices: each part renders into two mono buffers (chord/pad notes alternate sides for
  // width), then the part is panned, ducked and sent once ----
  const partA = new Float32Array(len);
  const partB = new Float32Array(len);
  const seedBase = takeSeed(plan, n);
  let noteIdx = 0;
  const totalNotes = score.parts.reduce((s, p) => s + p.notes.length, 0);
  for (const part of score.parts) {
    if (part.notes.length === 0) continue;
    const patch = patchFor(plan, part.role, part.instrument);
    const spread = part.role === 'chords' || part.role === 'pad' ? 0.35 : 0;
    // Spans the part sounds in (union of its notes' [start, end of release)): only these are
    // cleared and mixed, so sections where the part rests cost nothing (the buffer is 0 there).
    const spans = noteSpans(part.notes.map((note) => [note.start, Math.min(len, note.start + voiceLength(patch, note, sr))]));
    if (spans.length === 0) continue;
    const tPart = clock();
    for (let k = 0; k < spans.length; k += 2) {
      partA.fill(0, spans[k] as number, spans[k + 1] as number);
      if (spread > 0) partB.fill(0, spans[k] as number, spans[k + 1] as number);
    }
    for (const note of part.notes) {
      const target = spread > 0 && note.pitch % 2 === 1 ? partB : partA;
      const ctx = { sampleRate: sr, samplesPerBeat: score.samplesPerBeat, seed: (seedBase ^ Math.imul(noteIdx + 1, 0x9e3779b1)) | 0 };
      renderVoice(patch, note, ctx, target, note.start, note.vel);
      noteIdx++;
      if ((noteIdx & 127) === 0) onProgress?.(0.05 + 0.5 * (noteIdx / Math.max(1, totalNotes)));
    }
    timings[`part:${part.role}:${part.instrument}`] = clock() - tPart;
    const amp = part.gain * patch.level;
    const panGains = (pan: number): [number, number] => {
      const a = ((Math.max(-1, Math.min(1, pan)) + 1) * Math.PI) / 4;
      return [amp * Math.cos(a) * Math.SQRT2, amp * Math.sin(a) * Math.SQRT2];
    };
    const [al, ar] = panGains(part.pan - spread);
    const [bl, br] = panGains(part.pan + spread);
    const sv = amp * part.reverb;
    const sd = amp * part.delay;
    const d = part.duck && duck !== null ? duck : null;
    for (let k = 0; k < spans.length; k += 2) {
      const lo = spans[k] as number;
      const hi = spans[k + 1] as number;
      if (spread > 0) mixPair(partA, partB, d, lo, hi, al, ar, bl, br, sv, sd, L, R, rev, dly);
      else mixMono(partA, d, lo, hi, al, ar, sv, sd, L, R, rev, dly);
      const group = stemOfRole(part.role);
      if (stems && group !== 'chords') {
        const st = stems[group];
        if (spread > 0) stemPair(partA, partB, d, lo, hi, al, ar, bl, br, st.L, st.R);
        else stemMono(partA, d, lo, hi, al, ar, st.L, st.R);
      }
    }
  }
  if (stems) {
    // Bus after the voices: the chords stem once bass and lead are taken out (below).
    stems.chords.L.set(L);
    stems.chords.R.set(R);
  }
  mark('voices');

  // ---- drums ----
  if (score.drums.length > 0) {
    const kit = buildKit(plan.drums, sr, seedBase);
    for (const h of score.drums) {
      const smp = kit[h.kind];
      const a = ((DRUM_PAN[h.kind] + 1) * Math.PI) / 4;
      const amp = h.vel * DRUM_GAIN[h.kind] * 0.9;
      const gl = amp * Math.cos(a) * Math.SQRT2;
      const gr = amp * Math.sin(a) * Math.SQRT2;
      const sv = amp * DRUM_REVERB[h.kind];
      addDrum(smp, h.start, Math.min(len, h.start + smp.length), gl, gr, sv, L, R, rev);
    }
  }
  mark('drums');
  if (stems) {
    splitBus(L, R, stems, len);
    mark('stemSplit');
  }
  onProgress?.(0.6);

  // ---- effects ----
  const roomy = plan.style === 'ambient' ? 5 : plan.style === 'cinematic' ? 3.5 : plan.style === 'lofi' || plan.style === 'jazz' ? 1.6 : 2.3;
  const reverbOptions = { rt60: roomy, damping: plan.style === 'lofi' ? 3500 : 6000, preDelay: Math.round(0.02 * sr), wet: 0.9 };
  const delayOptions = { time: Math.round(score.samplesPerBeat * 0.75), feedback: plan.style === 'reggae' ? 0.55 : 0.38, tone: 3500, wet: 0.8 };
  // The effects stem is not accumulated here: it is the mix minus the dry stems (StemsZip.ts),
  // which is exactly these returns through the master gain.
  applyReverb(rev, L, R, len, sr, reverbOptions);
  mark('reverb');
  applyDelay(dly, L, R, len, sr, delayOptions);
  mark('delay');
  onProgress?.(0.7);

  // ---- loop: fold the tail onto the start (circular overlap-add) ----
  if (plan.loop) {
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
  const masterGain = stems ? pooled(8, total, false) : undefined; // written in full by the compressor
  applyCompressor(outL, outR, total, sr, { thresholdOverRms: 6, ratio: 2.5, attackMs: 10, releaseMs: 150, circular: plan.loop }, masterGain);
  if (!plan.loop && plan.fadeSeconds > 0) {
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
  onProgress?.(0.75);

  // Loudness: measure, normalise, limit, re-measure, correct (converges in 2–3 passes).
  const pre = integratedLoudness(outL, outR, total, sr);
  const finalL = rev.subarray(0, total);
  const finalR = dly.subarray(0, total);
  let gain = Number.isFinite(pre) ? fromDb(TARGET_LUFS - pre) : 1;
  const lim = { ceiling: fromDb(LIMITER_CEILING_DB), lookahead: 48, release: Math.round(0.08 * sr), circular: plan.loop };
  // The part buffers are free now: reuse them as limiter scratch (saves 2 × 4 bytes per sample).
  const scratchLim: LimiterScratch = { a: partA.subarray(0, total), b: partB.subarray(0, total), pre: new Float32Array(total + 256), suf: new Float32Array(total + 256) };
  // Detector computed once; blocks more than 6 dB under the first ceiling are bounded, not measured.
  const peaks = duck ? duck.subarray(0, total) : new Float32Array(total);
  peakEnvelope(outL, outR, total, (lim.ceiling / gain) * 0.85, plan.loop, peaks);
  let loud = pre;
  // With stems: the limiter's gain of the pass whose output is kept (each pass overwrites it).
  const limGain = masterGain ? pooled(9, total, false) : undefined; // written in full by the limiter
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
  let stemsOut: Record<DryStemName, StereoBuffer> | null = null;
  if (stems && masterGain) {
    stemsOut = {} as Record<DryStemName, StereoBuffer>;
    for (const name of DRY_STEMS) {
      const sL = stems[name].L.subarray(0, total);
      const sR = stems[name].R.subarray(0, total);
      for (let i = 0; i < total; i++) {
        const gm = masterGain[i] as number;
        sL[i] = (sL[i] as number) * gm;
        sR[i] = (sR[i] as number) * gm;
      }
      stemsOut[name] = { L: sL, R: sR };
    }
    mark('stems');
  }
  onProgress?.(0.8);
  return { L: finalL, R: finalR, n: total, loudness: loud, truePeakDb: toDb(tp), timings, score, stems: stemsOut };
}
