/**
 * Renders one note of a patch into a mono scratch buffer. Hot loop rules: Float32Array/Float64Array
 * state, no allocation or closures per sample, coefficients updated per 32-sample block. Each
 * per-sample loop is a small function of its own, specialised by model and envelope stage (V8
 * compiles small monomorphic loops far better than one large function with per-sample branches);
 * the arithmetic and its order are those of the single-loop version, so renders are unchanged.
 * Band-limiting: saw/square use PolyBLEP; additive partials above 20 kHz are skipped; FM indices
 * stay small at high pitches; drive is a cubic (3rd harmonic only) after a pre-filter.
 */
import type { Note } from './Composer.ts';
import type { Patch } from './Instruments.ts';
import { midiToHz } from './Keys.ts';

const BLOCK = 32;
const TABLE_SIZE = 4096;
/** One sine cycle plus a guard point for linear interpolation. */
const SINE = new Float32Array(TABLE_SIZE + 1);
for (let i = 0; i <= TABLE_SIZE; i++) SINE[i] = Math.sin((2 * Math.PI * i) / TABLE_SIZE);

/** Table sine of a phase in cycles (any real; wraps). */
export function sinCycles(phase: number): number {
  const p = phase - Math.floor(phase);
  const x = p * TABLE_SIZE;
  const i = x | 0;
  const f = x - i;
  const a = SINE[i] as number;
  return a + ((SINE[i + 1] as number) - a) * f;
}

function polyBlep(t: number, dt: number): number {
  if (t < dt) {
    const x = t / dt;
    return x + x - x * x - 1;
  }
  if (t > 1 - dt) {
    const x = (t - 1) / dt;
    return x * x + x + x + 1;
  }
  return 0;
}

/** Block scratch (module scope: one render at a time per thread). */
const OSC = new Float32Array(BLOCK);

/** Saw (+ optional square) unison voice `u` added into OSC[0..nb); returns the new phase. */
function blepVoice(nb: number, t: number, dt: number, sawL: number, sqL: number): number {
  const osc = OSC;
  if (sqL === 0) {
    for (let j = 0; j < nb; j++) {
      t += dt;
      if (t >= 1) t -= 1;
      osc[j] = (osc[j] as number) + (0 + sawL * (2 * t - 1 - polyBlep(t, dt)));
    }
    return t;
  }
  for (let j = 0; j < nb; j++) {
    t += dt;
    if (t >= 1) t -= 1;
    let v = 0;
    if (sawL !== 0) v += sawL * (2 * t - 1 - polyBlep(t, dt));
    let t2 = t + 0.5;
    if (t2 >= 1) t2 -= 1;
    v += sqL * ((t < 0.5 ? 1 : -1) + polyBlep(t, dt) - polyBlep(t2, dt));
    osc[j] = (osc[j] as number) + v;
  }
  return t;
}

/**
 * Two or three saw unison voices in one pass, written to OSC[0..nb) (replaces its content): the
 * phase recursions are independent, so the CPU overlaps them instead of waiting on one at a time.
 * Each voice's value is added in voice order with float32 rounding after each add, exactly as
 * separate passes over the Float32Array would. Phases are read from and written back to `ph`.
 */
function sawUnison2(nb: number, ph: Float64Array, dtA: number, dtB: number, sawL: number): void {
  const osc = OSC;
  let ta = ph[0] as number;
  let tb = ph[1] as number;
  for (let j = 0; j < nb; j++) {
    ta += dtA;
    if (ta >= 1) ta -= 1;
    tb += dtB;
    if (tb >= 1) tb -= 1;
    const o = Math.fround(0 + (0 + sawL * (2 * ta - 1 - polyBlep(ta, dtA))));
    osc[j] = o + (0 + sawL * (2 * tb - 1 - polyBlep(tb, dtB)));
  }
  ph[0] = ta;
  ph[1] = tb;
}

function sawUnison3(nb: number, ph: Float64Array, dtA: number, dtB: number, dtC: number, sawL: number): void {
  const osc = OSC;
  let ta = ph[0] as number;
  let tb = ph[1] as number;
  let tc = ph[2] as number;
  for (let j = 0; j < nb; j++) {
    ta += dtA;
    if (ta >= 1) ta -= 1;
    tb += dtB;
    if (tb >= 1) tb -= 1;
    tc += dtC;
    if (tc >= 1) tc -= 1;
    let o = Math.fround(0 + (0 + sawL * (2 * ta - 1 - polyBlep(ta, dtA))));
    o = Math.fround(o + (0 + sawL * (2 * tb - 1 - polyBlep(tb, dtB))));
    osc[j] = o + (0 + sawL * (2 * tc - 1 - polyBlep(tc, dtC)));
  }
  ph[0] = ta;
  ph[1] = tb;
  ph[2] = tc;
}

/** Sub-octave square added into OSC[0..nb); returns the new phase. */
function subVoice(nb: number, ph: number, dts: number, subL: number): number {
  const osc = OSC;
  for (let j = 0; j < nb; j++) {
    ph += dts;
    if (ph >= 1) ph -= 1;
    let t2 = ph + 0.5;
    if (t2 >= 1) t2 -= 1;
    osc[j] = (osc[j] as number) + subL * ((ph < 0.5 ? 1 : -1) + polyBlep(ph, dts) - polyBlep(t2, dts));
  }
  return ph;
}

/** One decaying sine partial added into OSC[0..nb); state [phase, amplitude] in st[q], st[q + 1]. */
function partialVoice(nb: number, st: Float64Array, q: number, dp: number, kq: number): void {
  const osc = OSC;
  let ph = st[q] as number;
  let a = st[q + 1] as number;
  for (let j = 0; j < nb; j++) {
    ph += dp;
    if (ph >= 1) ph -= 1;
    const xx = ph * TABLE_SIZE;
    const ii = xx | 0;
    const s0 = SINE[ii] as number;
    osc[j] = (osc[j] as number) + a * (s0 + ((SINE[ii + 1] as number) - s0) * (xx - ii));
    a *= kq;
  }
  st[q] = ph;
  st[q + 1] = a;
}

/** Two-operator FM into OSC[0..nb); state [modulator phase, carrier phase, index] in st. */
function fmVoice(nb: number, st: Float64Array, dt0: number, dm: number, fmSus: number, kFm: number): void {
  const osc = OSC;
  let fmPhaseM = st[0] as number;
  let fmPhaseC = st[1] as number;
  let fmIdx = st[2] as number;
  for (let j = 0; j < nb; j++) {
    fmPhaseM += dm;
    if (fmPhaseM >= 1) fmPhaseM -= 1;
    fmPhaseC += dt0;
    if (fmPhaseC >= 1) fmPhaseC -= 1;
    let xm = fmPhaseM * TABLE_SIZE;
    let im = xm | 0;
    let s0 = SINE[im] as number;
    const mod = s0 + ((SINE[im + 1] as number) - s0) * (xm - im);
    let pc = fmPhaseC + fmIdx * 0.15915494309 * mod;
    pc -= Math.floor(pc);
    xm = pc * TABLE_SIZE;
    im = xm | 0;
    s0 = SINE[im] as number;
    osc[j] = s0 + ((SINE[im + 1] as number) - s0) * (xm - im);
    fmIdx = fmSus + (fmIdx - fmSus) * kFm;
  }
  st[0] = fmPhaseM;
  st[1] = fmPhaseC;
  st[2] = fmIdx;
}

/** Karplus–Strong string into OSC[0..nb); state [pos, lp, ap, apPrev] in st. */
function ksVoice(nb: number, ks: Float32Array, st: Float64Array, ksDamp: number, ksApC: number, ksGain: number): void {
  const osc = OSC;
  const ksLen = ks.length;
  let ksPos = st[0] as number;
  let ksLp = st[1] as number;
  let ksAp = st[2] as number;
  let ksApPrev = st[3] as number;
  for (let j = 0; j < nb; j++) {
    const a = ks[ksPos] as number;
    const nxt = ks[ksPos + 1 < ksLen ? ksPos + 1 : 0] as number;
    const avg = (a + nxt) * 0.5;
    ksLp += (avg - ksLp) * (1 - ksDamp * 0.5);
    // First-order all-pass for the fractional part of the period.
    const y = ksApC * (ksLp - ksAp) + ksApPrev;
    ksApPrev = ksLp;
    ksAp = y;
    ks[ksPos] = y * ksGain;
    ksPos = ksPos + 1 < ksLen ? ksPos + 1 : 0;
    osc[j] = a;
  }
  st[0] = ksPos;
  st[1] = ksLp;
  st[2] = ksAp;
  st[3] = ksApPrev;
}

/** Noise burst added into OSC[0..nb) (×3 over the first 2400 samples); returns the PRNG state. */
function noiseVoice(nb: number, rnd: number, lvl: number, b0: number): number {
  const osc = OSC;
  for (let j = 0; j < nb; j++) {
    rnd ^= rnd << 13;
    rnd ^= rnd >>> 17;
    rnd ^= rnd << 5;
    osc[j] = (osc[j] as number) + lvl * ((rnd >>> 0) / 2147483648 - 1) * (b0 + j < 2400 ? 3 : 1);
  }
  return rnd;
}

/** Per-voice constants of the filter → drive → envelope stage. */
interface ToneStage {
  useFilter: boolean;
  drive: boolean;
  preGain: number;
  postGain: number;
  attackN: number;
  sus: number;
  kDecay: number;
  kRelease: number;
  gain: number;
}

/**
 * OSC[j0..j1) through the TPT state-variable low-pass (state [ic1, ic2] in st; bypassed for open
 * static patches), the cubic drive, then × envelope × gain added into out[at + j]. `stage` is the
 * envelope segment the whole range lies in: 0 attack ramp (value (i0 + j + 1) / attackN), 1 decay
 * toward sustain, 2 release. Filter and envelope recursions share one loop so they overlap.
 * Returns the envelope after the last sample.
 */
function toneBlock(out: Float32Array, at: number, j0: number, j1: number, stage: 0 | 1 | 2, env: number, i0: number, st: Float64Array, a1: number, a2: number, a3: number, c: ToneStage): number {
  const osc = OSC;
  const useFilter = c.useFilter;
  const drive = c.drive;
  const preGain = c.preGain;
  const postGain = c.postGain;
  const attackN = c.attackN;
  const sus = c.sus;
  const k = stage === 2 ? c.kRelease : c.kDecay;
  const gain = c.gain;
  let ic1 = st[0] as number;
  let ic2 = st[1] as number;
  for (let j = j0; j < j1; j++) {
    let y = osc[j] as number;
    if (useFilter) {
      const v3 = y - ic2;
      const v1 = a1 * ic1 + a2 * v3;
      const v2 = ic2 + a2 * ic1 + a3 * v3;
      ic1 = 2 * v1 - ic1;
      ic2 = 2 * v2 - ic2;
      y = v2;
    }
    if (drive) {
      y *= preGain;
      y = y > 1 ? 0.6667 : y < -1 ? -0.6667 : y - (y * y * y) / 3;
      y *= postGain;
    }
    if (stage === 0) env = (i0 + j + 1) / attackN;
    else if (stage === 1) env = sus + (env - sus) * k;
    else env *= k;
    out[at + j] = (out[at + j] as number) + y * env * gain;
  }
  st[0] = ic1;
  st[1] = ic2;
  return env;
}

export interface VoiceContext {
  sampleRate: number;
  samplesPerBeat: number;
  /** Seed for this note's noise and start phases. */
  seed: number;
}

/** Samples the note occupies including its release tail. */
export function voiceLength(patch: Patch, note: Note, sampleRate: number): number {
  return note.length + Math.ceil(patch.release * sampleRate) + BLOCK;
}

/**
 * Adds the note, times `gain`, into `out` from `out[offset]` (clipped at the buffer's end) and
 * returns the number of samples it spans.
 */
export function renderVoice(patch: Patch, note: Note, ctx: VoiceContext, out: Float32Array, offset: number, gain: number): number {
  const sr = ctx.sampleRate;
  const total = Math.min(out.length - offset, voiceLength(patch, note, sr));
  if (total <= 0) return 0;
  const gate = note.length;
  const baseHz = midiToHz(note.pitch);
  const nyq = sr * 0.5;
  let rnd = (ctx.seed | 0) || 0x1234567;

  // Envelopes: linear attack, exponential decay to sustain, exponential release (−60 dB in `release`).
  const attackN = Math.max(1, Math.round(patch.attack * sr));
  const kDecay = Math.exp(Math.log(0.001) / Math.max(1, patch.decay * sr));
  const kRelease = Math.exp(Math.log(0.001) / Math.max(1, patch.release * sr));
  const sus = patch.sustain;
  let env = 0;
  let fenv = 1;
  const kFenv = Math.exp(-1 / Math.max(1, patch.envDecay * sr));
  const kFenvBlock = Math.pow(kFenv, BLOCK);
  let lastFc = -1;
  let a1 = 0;
  let a2 = 0;
  let a3 = 0;

  // Filter (TPT state-variable low-pass): [ic1, ic2].
  const filt = new Float64Array(2);
  const k = 2 - 2 * Math.min(0.95, patch.resonance);
  const keyFactor = Math.pow(baseHz / 261.63, patch.keytrack);
  const bright = 0.35 + 0.9 * note.bright;

  // Oscillator state.
  const uni = Math.max(1, Math.min(5, patch.unison));
  const phases = new Float64Array(uni + 1);
  const ratios = new Float64Array(uni);
  for (let u = 0; u < uni; u++) {
    const spread = uni === 1 ? 0 : (u / (uni - 1) - 0.5) * 2;
    ratios[u] = Math.pow(2, (spread * patch.detune) / 1200);
    rnd ^= rnd << 13;
    rnd ^= rnd >>> 17;
    rnd ^= rnd << 5;
    phases[u] = ((rnd >>> 0) / 4294967296) * (patch.model === 'blep' ? 1 : 0);
  }
  const nPart = patch.partials.length;
  // Partial q: phase in part[2q], amplitude in part[2q + 1].
  const part = new Float64Array(2 * nPart);
  const pK = new Float64Array(nPart);
  for (let j = 0; j < nPart; j++) {
    const r = patch.partials[j] as number;
    part[2 * j + 1] = baseHz * r < 20000 ? (patch.levels[j] as number) : 0;
    pK[j] = Math.exp(Math.log(0.001) / Math.max(1, (patch.decays[j] as number) * sr));
  }
  const fmIdx = patch.fmIndex * (baseHz > 800 ? 800 / baseHz : 1);
  const fmSus = patch.fmSustain * fmIdx;
  const kFm = Math.exp(-1 / Math.max(1, patch.fmDecay * sr));
  // FM: [modulator phase, carrier phase, index].
  const fm = new Float64Array(3);
  fm[2] = fmIdx;

  // Karplus–Strong string.
  let ks: Float32Array | null = null;
  let ksLen = 0;
  let ksApC = 0;
  // [pos, lp, ap, apPrev].
  const ksSt = new Float64Array(4);
  const ksDamp = patch.damping;
  if (patch.model === 'ks') {
    const period = sr / baseHz - 0.5; // the averaging filter adds half a sample
    ksLen = Math.max(2, Math.floor(period));
    const frac = period - ksLen;
    ksApC = (1 - frac) / (1 + frac);
    ks = new Float32Array(ksLen);
    let lp = 0;
    for (let i = 0; i < ksLen; i++) {
      rnd ^= rnd << 13;
      rnd ^= rnd >>> 17;
      rnd ^= rnd << 5;
      const w = (rnd >>> 0) / 2147483648 - 1;
      lp += (w - lp) * (0.25 + 0.7 * note.vel * (1 - ksDamp));
      ks[i] = lp;
    }
  }
  const ksGain = 0.996 - 0.01 * ksDamp;

  const vibDelayN = patch.vibDelay * sr;
  const slide = note.slideTo >= 0 ? midiToHz(note.slideTo) / baseHz : 1;
  const spb = ctx.samplesPerBeat;
  const drive = patch.drive;
  const preGain = 1 + 3 * drive;
  const postGain = drive > 0 ? 1 / (preGain * 0.67) : 1;
  const noiseLvl = patch.noise;
  const model = patch.model;
  const sawL = patch.saw / Math.sqrt(uni);
  const sqL = patch.square / Math.sqrt(uni);
  const subL = patch.sub;
  let subPhase = 0;
  const osc = OSC;
  // Static bright patches (piano, organ, bells) need no filter: saves a third of their cost.
  const useFilter = !(patch.envAmount === 0 && patch.lfoPerBeat === 0 && patch.cutoff * keyFactor >= 4000 && patch.drive === 0);
  const tone: ToneStage = { useFilter, drive: drive > 0, preGain, postGain, attackN, sus, kDecay, kRelease, gain };

  for (let b0 = 0; b0 < total; b0 += BLOCK) {
    const bEnd = Math.min(total, b0 + BLOCK);
    // Per-block pitch: vibrato and slide.
    let pitchMul = 1;
    if (patch.vibDepth > 0 && b0 > vibDelayN) {
      const depth = Math.min(1, (b0 - vibDelayN) / (0.3 * sr)) * patch.vibDepth;
      pitchMul *= Math.pow(2, (depth * sinCycles((b0 / sr) * patch.vibRate)) / 1200);
    }
    if (slide !== 1) {
      const t = Math.min(1, b0 / Math.max(1, gate * 0.6));
      pitchMul *= Math.pow(slide, t * t);
    }
    const hz = baseHz * pitchMul;
    // Per-block filter cutoff.
    let octaves = patch.envAmount * fenv;
    if (patch.lfoPerBeat > 0) octaves += patch.lfoDepth * (0.5 - 0.5 * sinCycles(((note.start + b0) / spb) * patch.lfoPerBeat));
    const fc = Math.min(nyq * 0.45, patch.cutoff * keyFactor * bright * (octaves === 0 ? 1 : Math.pow(2, octaves)));
    // Coefficients only when the cutoff moved by more than 0.2 % (static patches compute them once).
    if (useFilter && Math.abs(fc - lastFc) > lastFc * 0.002) {
      lastFc = fc;
      const g = Math.tan((Math.PI * fc) / sr);
      a1 = 1 / (1 + g * (g + k));
      a2 = g * a1;
      a3 = g * a2;
    }
    if (fenv > 1e-4) fenv *= bEnd - b0 === BLOCK ? kFenvBlock : Math.pow(kFenv, bEnd - b0);
    else fenv = 0;
    const dt0 = hz / sr;

    const nb = bEnd - b0;
    // 1. Oscillator into the block buffer.
    if (model === 'blep') {
      osc.fill(0, 0, nb);
      if (sqL === 0 && uni === 3) sawUnison3(nb, phases, dt0 * (ratios[0] as number), dt0 * (ratios[1] as number), dt0 * (ratios[2] as number), sawL);
      else if (sqL === 0 && uni === 2) sawUnison2(nb, phases, dt0 * (ratios[0] as number), dt0 * (ratios[1] as number), sawL);
      else for (let u = 0; u < uni; u++) phases[u] = blepVoice(nb, phases[u] as number, dt0 * (ratios[u] as number), sawL, sqL);
      if (subL !== 0) subPhase = subVoice(nb, subPhase, dt0 * 0.5, subL);
    } else if (model === 'additive') {
      osc.fill(0, 0, nb);
      for (let q = 0; q < nPart; q++) {
        if ((part[2 * q + 1] as number) < 1e-5) continue;
        partialVoice(nb, part, 2 * q, dt0 * (patch.partials[q] as number), pK[q] as number);
      }
    } else if (model === 'fm') {
      fmVoice(nb, fm, dt0, dt0 * patch.fmRatio, fmSus, kFm);
    } else if (ks) {
      ksVoice(nb, ks, ksSt, ksDamp, ksApC, ksGain);
    }
    if (noiseLvl !== 0) rnd = noiseVoice(nb, rnd, noiseLvl, b0);
    // 2. Filter (bypassed for open, static patches), drive and amplitude envelope, split at the
    // envelope's stage changes: attack ramp (i < attackN), decay to sustain, release after the gate.
    const at = offset + b0;
    let j = 0;
    if (b0 < gate) {
      const gEnd = Math.min(nb, gate - b0);
      if (b0 < attackN) {
        const aEnd = Math.min(gEnd, attackN - b0);
        env = toneBlock(out, at, 0, aEnd, 0, env, b0, filt, a1, a2, a3, tone);
        j = aEnd;
      }
      if (j < gEnd) env = toneBlock(out, at, j, gEnd, 1, env, b0, filt, a1, a2, a3, tone);
      j = gEnd;
    }
    if (j < nb) env = toneBlock(out, at, j, nb, 2, env, b0, filt, a1, a2, a3, tone);
  }
  return total;
}
