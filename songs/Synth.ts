/**
 * Renders one note of a patch into a mono scratch buffer. Hot loop rules: Float32Array/Float64Array
 * state, no allocation or closures per sample, coefficients updated per 32-sample block.
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

  // Filter (TPT state-variable low-pass).
  let ic1 = 0;
  let ic2 = 0;
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
  const pAmp = new Float64Array(nPart);
  const pK = new Float64Array(nPart);
  const pPhase = new Float64Array(nPart);
  for (let j = 0; j < nPart; j++) {
    const r = patch.partials[j] as number;
    pAmp[j] = baseHz * r < 20000 ? (patch.levels[j] as number) : 0;
    pK[j] = Math.exp(Math.log(0.001) / Math.max(1, (patch.decays[j] as number) * sr));
  }
  let fmIdx = patch.fmIndex * (baseHz > 800 ? 800 / baseHz : 1);
  const fmSus = patch.fmSustain * fmIdx;
  const kFm = Math.exp(-1 / Math.max(1, patch.fmDecay * sr));
  let fmPhaseC = 0;
  let fmPhaseM = 0;

  // Karplus–Strong string.
  let ks: Float32Array | null = null;
  let ksLen = 0;
  let ksPos = 0;
  let ksAp = 0;
  let ksApPrev = 0;
  let ksApC = 0;
  let ksLp = 0;
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
  const osc = new Float32Array(BLOCK);
  // Static bright patches (piano, organ, bells) need no filter: saves a third of their cost.
  const useFilter = !(patch.envAmount === 0 && patch.lfoPerBeat === 0 && patch.cutoff * keyFactor >= 4000 && patch.drive === 0);

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
    // 1. Oscillator into the block buffer (one tight loop per model).
    if (model === 'blep') {
      osc.fill(0, 0, nb);
      for (let u = 0; u < uni; u++) {
        const dt = dt0 * (ratios[u] as number);
        let t = phases[u] as number;
        for (let j = 0; j < nb; j++) {
          t += dt;
          if (t >= 1) t -= 1;
          let v = 0;
          if (sawL !== 0) v += sawL * (2 * t - 1 - polyBlep(t, dt));
          if (sqL !== 0) {
            let t2 = t + 0.5;
            if (t2 >= 1) t2 -= 1;
            v += sqL * ((t < 0.5 ? 1 : -1) + polyBlep(t, dt) - polyBlep(t2, dt));
          }
          osc[j] = (osc[j] as number) + v;
        }
        phases[u] = t;
      }
      if (subL !== 0) {
        const dts = dt0 * 0.5;
        for (let j = 0; j < nb; j++) {
          subPhase += dts;
          if (subPhase >= 1) subPhase -= 1;
          let t2 = subPhase + 0.5;
          if (t2 >= 1) t2 -= 1;
          osc[j] = (osc[j] as number) + subL * ((subPhase < 0.5 ? 1 : -1) + polyBlep(subPhase, dts) - polyBlep(t2, dts));
        }
      }
    } else if (model === 'additive') {
      osc.fill(0, 0, nb);
      for (let q = 0; q < nPart; q++) {
        let a = pAmp[q] as number;
        if (a < 1e-5) continue;
        const kq = pK[q] as number;
        const dp = dt0 * (patch.partials[q] as number);
        let ph = pPhase[q] as number;
        for (let j = 0; j < nb; j++) {
          ph += dp;
          if (ph >= 1) ph -= 1;
          const xx = ph * TABLE_SIZE;
          const ii = xx | 0;
          const s0 = SINE[ii] as number;
          osc[j] = (osc[j] as number) + a * (s0 + ((SINE[ii + 1] as number) - s0) * (xx - ii));
          a *= kq;
        }
        pPhase[q] = ph;
        pAmp[q] = a;
      }
    } else if (model === 'fm') {
      const dm = dt0 * patch.fmRatio;
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
    } else if (ks) {
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
    }
    if (noiseLvl !== 0) {
      for (let j = 0; j < nb; j++) {
        rnd ^= rnd << 13;
        rnd ^= rnd >>> 17;
        rnd ^= rnd << 5;
        osc[j] = (osc[j] as number) + noiseLvl * ((rnd >>> 0) / 2147483648 - 1) * (b0 + j < 2400 ? 3 : 1);
      }
    }
    // 2. Filter (bypassed for open, static patches), drive, amplitude envelope.
    for (let j = 0; j < nb; j++) {
      let y = osc[j] as number;
      if (useFilter) {
        const v3 = y - ic2;
        const v1 = a1 * ic1 + a2 * v3;
        const v2 = ic2 + a2 * ic1 + a3 * v3;
        ic1 = 2 * v1 - ic1;
        ic2 = 2 * v2 - ic2;
        y = v2;
      }
      if (drive > 0) {
        y *= preGain;
        y = y > 1 ? 0.6667 : y < -1 ? -0.6667 : y - (y * y * y) / 3;
        y *= postGain;
      }
      const i = b0 + j;
      if (i < gate) {
        if (i < attackN) env = (i + 1) / attackN;
        else env = sus + (env - sus) * kDecay;
      } else env *= kRelease;
      out[offset + i] = (out[offset + i] as number) + y * env * gain;
    }
  }
  return total;
}
