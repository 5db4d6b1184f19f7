/**
 * Synth patches: every instrument is one voice recipe for Synth.ts (oscillator model, filter,
 * envelopes, vibrato, drive). Times in seconds, cutoff in Hz, detune in cents.
 */
import type { InstrumentId } from './Genres.ts';

/**
 * Oscillator models: 'blep' PolyBLEP saw/square mix with unison (band-limited, no aliasing);
 * 'additive' sine partials with their own decays (piano, organ, mallets); 'fm' two-operator FM
 * (electric piano, bells); 'ks' Karplus–Strong plucked string (guitar).
 */
export type OscModel = 'blep' | 'additive' | 'fm' | 'ks';

export interface Patch {
  model: OscModel;
  /** blep: saw and square levels, unison voices (1–5), spread in cents, sub-octave square level. */
  saw: number;
  square: number;
  unison: number;
  detune: number;
  sub: number;
  /** additive: partial ratios, levels and decay times (s). */
  partials: readonly number[];
  levels: readonly number[];
  decays: readonly number[];
  /** fm: modulator ratio, peak index, index decay (s), sustained index. */
  fmRatio: number;
  fmIndex: number;
  fmDecay: number;
  fmSustain: number;
  /** ks: string damping 0–1 (higher = darker, shorter). */
  damping: number;
  /** Breath/attack noise level. */
  noise: number;
  /** Low-pass filter: base cutoff, key tracking 0–1, envelope amount (octaves), envelope decay, resonance 0–0.95. */
  cutoff: number;
  keytrack: number;
  envAmount: number;
  envDecay: number;
  resonance: number;
  /** Amplitude ADSR. */
  attack: number;
  decay: number;
  sustain: number;
  release: number;
  /** Vibrato rate (Hz), depth (cents), delay (s). */
  vibRate: number;
  vibDepth: number;
  vibDelay: number;
  /** Filter LFO synced to the beat: cycles per beat (0 = off) and depth in octaves (wobble bass). */
  lfoPerBeat: number;
  lfoDepth: number;
  /** Soft saturation 0–1 (cubic, after a pre-filter so it stays band-limited). */
  drive: number;
  /** Output level. */
  level: number;
}

const BASE: Patch = {
  model: 'blep', saw: 1, square: 0, unison: 1, detune: 0, sub: 0,
  partials: [], levels: [], decays: [],
  fmRatio: 1, fmIndex: 0, fmDecay: 0.5, fmSustain: 0,
  damping: 0.5, noise: 0,
  cutoff: 2000, keytrack: 0.5, envAmount: 0, envDecay: 0.3, resonance: 0.1,
  attack: 0.005, decay: 0.3, sustain: 0.7, release: 0.15,
  vibRate: 0, vibDepth: 0, vibDelay: 0, lfoPerBeat: 0, lfoDepth: 0,
  drive: 0, level: 1,
};
const p = (o: Partial<Patch>): Patch => ({ ...BASE, ...o });

export const PATCHES: Record<InstrumentId, Patch> = {
  subBass: p({ saw: 0, square: 0, model: 'additive', partials: [1, 2], levels: [1, 0.15], decays: [8, 3], cutoff: 400, attack: 0.004, sustain: 0.9, release: 0.08, drive: 0.3, level: 1.1 }),
  bass808: p({ model: 'additive', partials: [1, 2, 3], levels: [1, 0.2, 0.05], decays: [1.6, 0.6, 0.3], cutoff: 500, attack: 0.002, decay: 1.5, sustain: 0.35, release: 0.12, drive: 0.5, level: 1.2 }),
  synthBass: p({ saw: 0.7, square: 0.5, sub: 0.5, cutoff: 300, keytrack: 0.3, envAmount: 2.5, envDecay: 0.18, resonance: 0.2, sustain: 0.8, release: 0.05, level: 0.9 }),
  acidBass: p({ saw: 1, cutoff: 250, keytrack: 0.2, envAmount: 3.5, envDecay: 0.15, resonance: 0.8, sustain: 0.9, release: 0.03, drive: 0.4, level: 0.75 }),
  fingerBass: p({ model: 'additive', partials: [1, 2, 3, 4, 5], levels: [1, 0.5, 0.25, 0.12, 0.06], decays: [2.5, 1.2, 0.6, 0.35, 0.2], noise: 0.02, cutoff: 1200, attack: 0.003, decay: 1.2, sustain: 0.5, release: 0.06, level: 1 }),
  reeseBass: p({ saw: 1, unison: 2, detune: 14, sub: 0.6, cutoff: 380, keytrack: 0.2, envAmount: 0.8, envDecay: 0.4, resonance: 0.15, attack: 0.01, sustain: 0.95, release: 0.1, lfoPerBeat: 0, lfoDepth: 0, drive: 0.35, level: 0.8 }),
  warmPad: p({ saw: 1, unison: 2, detune: 10, cutoff: 900, keytrack: 0.3, envAmount: 0.5, envDecay: 1.5, attack: 0.6, decay: 1.5, sustain: 0.85, release: 0.9, level: 0.6 }),
  strings: p({ saw: 1, unison: 2, detune: 7, cutoff: 2200, keytrack: 0.4, attack: 0.35, decay: 1, sustain: 0.9, release: 0.8, vibRate: 5.2, vibDepth: 9, vibDelay: 0.3, level: 0.55 }),
  epiano: p({ model: 'fm', fmRatio: 1, fmIndex: 1.8, fmDecay: 0.35, fmSustain: 0.25, cutoff: 5000, keytrack: 0, attack: 0.002, decay: 2.5, sustain: 0.25, release: 0.3, level: 0.9 }),
  piano: p({ model: 'additive', partials: [1, 2.001, 3.004, 4.008, 5.015, 6.02], levels: [1, 0.55, 0.3, 0.18, 0.1, 0.06], decays: [3, 1.6, 1, 0.6, 0.4, 0.3], noise: 0.03, cutoff: 6000, keytrack: 0, attack: 0.002, decay: 3, sustain: 0, release: 0.25, level: 0.8 }),
  organ: p({ model: 'additive', partials: [0.5, 1, 2, 4], levels: [0.6, 1, 0.6, 0.3], decays: [99, 99, 99, 99], cutoff: 5000, keytrack: 0, attack: 0.008, sustain: 1, release: 0.06, vibRate: 6.5, vibDepth: 4, level: 0.45 }),
  pluck: p({ saw: 0.8, square: 0.3, cutoff: 500, keytrack: 0.5, envAmount: 3.5, envDecay: 0.12, resonance: 0.25, attack: 0.002, decay: 0.35, sustain: 0, release: 0.12, level: 0.7 }),
  stab: p({ saw: 1, square: 0.4, unison: 2, detune: 9, cutoff: 700, keytrack: 0.3, envAmount: 2.5, envDecay: 0.12, resonance: 0.3, attack: 0.002, decay: 0.25, sustain: 0.2, release: 0.1, level: 0.6 }),
  guitar: p({ model: 'ks', damping: 0.35, cutoff: 4500, keytrack: 0, attack: 0.001, decay: 3, sustain: 0.6, release: 0.08, level: 0.9 }),
  distGuitar: p({ saw: 0.8, square: 0.5, unison: 2, detune: 8, cutoff: 3000, keytrack: 0, envAmount: 0.5, envDecay: 0.3, attack: 0.004, decay: 1.5, sustain: 0.75, release: 0.1, drive: 0.9, level: 0.5 }),
  supersaw: p({ saw: 1, unison: 3, detune: 24, cutoff: 3500, keytrack: 0.3, envAmount: 0.6, envDecay: 0.4, attack: 0.01, decay: 0.5, sustain: 0.8, release: 0.3, level: 0.38 }),
  squareLead: p({ saw: 0.2, square: 1, cutoff: 3200, keytrack: 0.3, envAmount: 0.8, envDecay: 0.2, attack: 0.004, sustain: 0.8, release: 0.12, vibRate: 5.5, vibDepth: 12, vibDelay: 0.25, level: 0.5 }),
  sawLead: p({ saw: 1, unison: 2, detune: 6, cutoff: 2400, keytrack: 0.4, envAmount: 1.2, envDecay: 0.25, resonance: 0.2, attack: 0.004, sustain: 0.8, release: 0.15, vibRate: 5.5, vibDepth: 10, vibDelay: 0.3, level: 0.5 }),
  sax: p({ saw: 1, square: 0.3, noise: 0.05, cutoff: 1400, keytrack: 0.6, envAmount: 1, envDecay: 0.12, resonance: 0.3, attack: 0.03, decay: 0.4, sustain: 0.8, release: 0.12, vibRate: 5, vibDepth: 18, vibDelay: 0.2, drive: 0.2, level: 0.6 }),
  flute: p({ model: 'additive', partials: [1, 2, 3], levels: [1, 0.25, 0.08], decays: [99, 99, 99], noise: 0.07, cutoff: 4000, keytrack: 0, attack: 0.06, sustain: 0.9, release: 0.15, vibRate: 5, vibDepth: 14, vibDelay: 0.25, level: 0.7 }),
  bell: p({ model: 'fm', fmRatio: 3.5, fmIndex: 2.5, fmDecay: 0.5, fmSustain: 0.2, cutoff: 8000, keytrack: 0, attack: 0.001, decay: 2.5, sustain: 0, release: 0.8, level: 0.45 }),
  mallet: p({ model: 'additive', partials: [1, 3.9, 9.2], levels: [1, 0.3, 0.08], decays: [1.2, 0.25, 0.08], cutoff: 8000, keytrack: 0, attack: 0.001, decay: 1.2, sustain: 0, release: 0.3, level: 0.75 }),
  brass: p({ saw: 1, unison: 2, detune: 6, cutoff: 600, keytrack: 0.5, envAmount: 1.8, envDecay: 0.35, resonance: 0.1, attack: 0.05, decay: 0.4, sustain: 0.8, release: 0.15, vibRate: 5, vibDepth: 8, vibDelay: 0.35, level: 0.5 }),
};
