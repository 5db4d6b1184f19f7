/**
 * Synthesised drum one-shots, rendered once per take (a few hundred ms of audio each) and then
 * mixed at every hit: kick (pitch-swept sine + click), snare (tone + noise), clap (noise bursts),
 * hats/ride/crash (high-passed noise with metallic partials), toms, rim, shaker.
 */
import type { DrumKind } from './Drums.ts';
import type { DrumFeel } from './Genres.ts';
import { Random } from './Random.ts';
import { sinCycles } from './Synth.ts';

export type DrumKit = Record<DrumKind, Float32Array>;

/** One-pole/SVF helpers over a whole buffer. */
function svf(buf: Float32Array, fc: number, sr: number, mode: 'lp' | 'hp' | 'bp', res = 0.2): void {
  const g = Math.tan((Math.PI * Math.min(fc, sr * 0.45)) / sr);
  const k = 2 - 2 * res;
  const a1 = 1 / (1 + g * (g + k));
  const a2 = g * a1;
  const a3 = g * a2;
  let ic1 = 0;
  let ic2 = 0;
  for (let i = 0; i < buf.length; i++) {
    const x = buf[i] as number;
    const v3 = x - ic2;
    const v1 = a1 * ic1 + a2 * v3;
    const v2 = ic2 + a2 * ic1 + a3 * v3;
    ic1 = 2 * v1 - ic1;
    ic2 = 2 * v2 - ic2;
    buf[i] = mode === 'lp' ? v2 : mode === 'bp' ? v1 : x - k * v1 - v2;
  }
}

function noise(n: number, rng: Random): Float32Array {
  const b = new Float32Array(n);
  for (let i = 0; i < n; i++) b[i] = rng.next() * 2 - 1;
  return b;
}

function kick(sr: number, f0: number, f1: number, pitchTau: number, decay: number, click: number, rng: Random): Float32Array {
  const n = Math.round(decay * 1.2 * sr);
  const b = new Float32Array(n);
  let ph = 0;
  const clk = noise(Math.round(0.004 * sr), rng);
  svf(clk, 3000, sr, 'bp');
  for (let i = 0; i < n; i++) {
    const t = i / sr;
    const f = f1 + (f0 - f1) * Math.exp(-t / pitchTau);
    ph += f / sr;
    const amp = Math.min(1, i / (0.001 * sr)) * Math.exp(-t / (decay * 0.3));
    let x = sinCycles(ph) * amp;
    x = Math.tanh(x * 1.5) / Math.tanh(1.5);
    if (i < clk.length) x += click * (clk[i] as number) * (1 - i / clk.length);
    b[i] = x;
  }
  return b;
}

function snare(sr: number, tone: number, decay: number, rng: Random, bright: number): Float32Array {
  const n = Math.round(decay * 1.5 * sr);
  const nz = noise(n, rng);
  svf(nz, 1800 * bright, sr, 'hp', 0.1);
  const b = new Float32Array(n);
  let p1 = 0;
  let p2 = 0;
  for (let i = 0; i < n; i++) {
    const t = i / sr;
    p1 += (tone * (1 + 0.5 * Math.exp(-t / 0.01))) / sr;
    p2 += (tone * 1.47) / sr;
    const body = (sinCycles(p1) + 0.5 * sinCycles(p2)) * Math.exp(-t / 0.045);
    b[i] = 0.6 * body + 0.8 * (nz[i] as number) * Math.exp(-t / (decay * 0.35));
  }
  return b;
}

function clap(sr: number, rng: Random): Float32Array {
  const n = Math.round(0.35 * sr);
  const b = noise(n, rng);
  svf(b, 1300, sr, 'bp', 0.4);
  for (let i = 0; i < n; i++) {
    const t = i / sr;
    // Three short bursts 10 ms apart, then the tail.
    const burst = t < 0.03 ? Math.exp(-((t % 0.01) / 0.0025)) : 0;
    b[i] = (b[i] as number) * 2.5 * (burst + Math.exp(-(Math.max(0, t - 0.02)) / 0.08) * (t >= 0.02 ? 1 : 0));
  }
  return b;
}

function metal(sr: number, decay: number, hp: number, rng: Random, partialsLevel: number): Float32Array {
  const n = Math.round(decay * 1.3 * sr);
  const b = noise(n, rng);
  // Inharmonic partials (ratios from the 808 hat's square cluster), as sines to stay band-limited.
  const freqs = [205.3, 304.4, 369.6, 522.7, 540, 800].map((f) => f * 8.1);
  const ph = new Float64Array(freqs.length);
  for (let i = 0; i < n; i++) {
    let m = 0;
    for (let j = 0; j < freqs.length; j++) {
      const f = freqs[j] as number;
      if (f > sr * 0.45) continue;
      ph[j] = (ph[j] as number) + f / sr;
      m += sinCycles(ph[j] as number);
    }
    b[i] = (b[i] as number) + partialsLevel * m * 0.25;
  }
  svf(b, hp, sr, 'hp', 0.3);
  for (let i = 0; i < n; i++) {
    const t = i / sr;
    b[i] = (b[i] as number) * Math.exp(-t / (decay * 0.3)) * Math.min(1, i / (0.0005 * sr));
  }
  return b;
}

function tom(sr: number, f: number, decay: number, rng: Random): Float32Array {
  const n = Math.round(decay * 1.3 * sr);
  const b = new Float32Array(n);
  const nz = noise(n, rng);
  svf(nz, 600, sr, 'lp');
  let ph = 0;
  for (let i = 0; i < n; i++) {
    const t = i / sr;
    ph += (f * (1 + 0.6 * Math.exp(-t / 0.03))) / sr;
    b[i] = (sinCycles(ph) + 0.3 * (nz[i] as number) * Math.exp(-t / 0.05)) * Math.exp(-t / (decay * 0.3));
  }
  return b;
}

function normalise(b: Float32Array, peak: number): Float32Array {
  let m = 0;
  for (let i = 0; i < b.length; i++) m = Math.max(m, Math.abs(b[i] as number));
  if (m > 0) for (let i = 0; i < b.length; i++) b[i] = ((b[i] as number) * peak) / m;
  // 2 ms fade at the end so a truncated tail never clicks.
  const f = Math.min(b.length, 96);
  for (let i = 0; i < f; i++) b[b.length - 1 - i] = (b[b.length - 1 - i] as number) * (i / f);
  return b;
}

/** Builds the kit for a drum feel; `seed` varies tuning slightly between takes. */
export function buildKit(feel: DrumFeel, sr: number, seed: number): DrumKit {
  const rng = new Random(seed).fork('kit');
  const tune = 1 + (rng.next() - 0.5) * 0.08;
  let k: Float32Array;
  switch (feel) {
    case 'trap':
    case 'halftime':
      k = kick(sr, 160 * tune, 48, 0.03, 0.6, 0.3, rng);
      break;
    case 'fourfloor':
    case 'techno':
    case 'disco':
      k = kick(sr, 190 * tune, 50, 0.025, 0.42, 0.35, rng);
      break;
    case 'backbeat':
    case 'breakbeat':
      k = kick(sr, 150 * tune, 58, 0.02, 0.32, 0.6, rng);
      break;
    case 'cinematic':
      k = tom(sr, 55 * tune, 1.2, rng);
      break;
    default:
      k = kick(sr, 120 * tune, 52, 0.02, 0.3, 0.25, rng);
  }
  const soft = feel === 'jazz' || feel === 'boombap';
  return {
    kick: normalise(k, 1),
    snare: normalise(snare(sr, 185 * tune, soft ? 0.22 : 0.3, rng, soft ? 0.7 : 1), 0.8),
    clap: normalise(clap(sr, rng), 0.7),
    hat: normalise(metal(sr, 0.06, 7000, rng, 0.6), 0.35),
    openhat: normalise(metal(sr, 0.35, 6500, rng, 0.6), 0.3),
    ride: normalise(metal(sr, 0.9, 4000, rng, 1.2), 0.25),
    crash: normalise(metal(sr, 1.6, 3000, rng, 0.8), 0.4),
    rim: normalise(tom(sr, 1700, 0.04, rng), 0.45),
    tom: normalise(tom(sr, 140 * tune, 0.35, rng), 0.7),
    lowtom: normalise(tom(sr, feel === 'cinematic' ? 62 : 95 * tune, feel === 'cinematic' ? 0.9 : 0.45, rng), 0.85),
    shaker: normalise(metal(sr, 0.05, 8000, rng, 0), 0.2),
  };
}
