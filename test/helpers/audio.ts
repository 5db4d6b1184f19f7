/**
 * Small signal analysis for song tests, independent of the engine's code: WAV reading, an FFT
 * band-energy split, spectral flatness (noise-likeness) and an onset detector (energy flux).
 */

/** Interleaved int16 samples of a 44-byte-header WAV as written by our engine. */
export function pcmOf(wav: Buffer): Int16Array {
  const copy = wav.subarray(44);
  return new Int16Array(copy.buffer.slice(copy.byteOffset, copy.byteOffset + copy.byteLength));
}

/** Mono float (L+R)/2 of interleaved int16. */
export function monoOf(pcm: Int16Array): Float64Array {
  const n = pcm.length / 2;
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = ((pcm[2 * i] as number) + (pcm[2 * i + 1] as number)) / 65536;
  return out;
}

function fft(re: Float64Array, im: Float64Array): void {
  const n = re.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      [re[i], re[j]] = [re[j] as number, re[i] as number];
      [im[i], im[j]] = [im[j] as number, im[i] as number];
    }
  }
  for (let len = 2; len <= n; len <<= 1) {
    const ang = (-2 * Math.PI) / len;
    for (let i = 0; i < n; i += len) {
      for (let k = 0; k < len / 2; k++) {
        const wr = Math.cos(ang * k);
        const wi = Math.sin(ang * k);
        const a = i + k;
        const b = a + len / 2;
        const xr = (re[b] as number) * wr - (im[b] as number) * wi;
        const xi = (re[b] as number) * wi + (im[b] as number) * wr;
        re[b] = (re[a] as number) - xr;
        im[b] = (im[a] as number) - xi;
        re[a] = (re[a] as number) + xr;
        im[a] = (im[a] as number) + xi;
      }
    }
  }
}

/** Share of the signal's energy below `hz` (Hann-windowed 4096-point frames, hop 4096). */
export function energyBelow(x: Float64Array, hz: number, sampleRate = 48_000): number {
  const N = 4096;
  const cut = Math.round((hz / sampleRate) * N);
  let lo = 0;
  let all = 0;
  const re = new Float64Array(N);
  const im = new Float64Array(N);
  for (let s = 0; s + N <= x.length; s += N) {
    for (let i = 0; i < N; i++) {
      re[i] = (x[s + i] as number) * (0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N));
      im[i] = 0;
    }
    fft(re, im);
    for (let k = 1; k < N / 2; k++) {
      const e = (re[k] as number) ** 2 + (im[k] as number) ** 2;
      all += e;
      if (k <= cut) lo += e;
    }
  }
  return all > 0 ? lo / all : 0;
}

/**
 * Mean spectral flatness (geometric over arithmetic mean of the power spectrum, 1–16 kHz) of the
 * frames holding sound: near 1 for noise-like sounds (snares, hats, cymbals), near 0 for tones.
 */
export function spectralFlatness(x: Float64Array, sampleRate = 48_000): number {
  const N = 2048;
  const lo = Math.round((1000 / sampleRate) * N);
  const hi = Math.round((16000 / sampleRate) * N);
  const re = new Float64Array(N);
  const im = new Float64Array(N);
  let sum = 0;
  let frames = 0;
  for (let s = 0; s + N <= x.length; s += N) {
    let e = 0;
    for (let i = 0; i < N; i++) {
      re[i] = (x[s + i] as number) * (0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N));
      im[i] = 0;
      e += (x[s + i] as number) ** 2;
    }
    if (Math.sqrt(e / N) < 1e-3) continue;
    fft(re, im);
    let logSum = 0;
    let lin = 0;
    for (let k = lo; k < hi; k++) {
      const p = (re[k] as number) ** 2 + (im[k] as number) ** 2 + 1e-20;
      logSum += Math.log(p);
      lin += p;
    }
    const m = hi - lo;
    sum += Math.exp(logSum / m) / (lin / m);
    frames++;
  }
  return frames > 0 ? sum / frames : 0;
}

/** RMS per hop of `hop` samples. */
export function envelope(x: Float64Array, hop: number): Float64Array {
  const out = new Float64Array(Math.floor(x.length / hop));
  for (let h = 0; h < out.length; h++) {
    let s = 0;
    for (let i = h * hop; i < (h + 1) * hop; i++) s += (x[i] as number) ** 2;
    out[h] = Math.sqrt(s / hop);
  }
  return out;
}

/**
 * Onset times (s): peaks of the positive log-energy flux over 2.5 ms hops that rise more than
 * `thresholdDb` within 10 ms and sit above a −60 dBFS floor, at least `minGapMs` apart.
 */
export function detectOnsets(x: Float64Array, opts: { thresholdDb?: number; minGapMs?: number; sampleRate?: number } = {}): number[] {
  const sr = opts.sampleRate ?? 48_000;
  const hop = Math.round(0.0025 * sr);
  // First difference (+6 dB/octave): attacks are broadband, decaying tones and beating are not.
  const d = new Float64Array(x.length);
  for (let i = 1; i < x.length; i++) d[i] = (x[i] as number) - (x[i - 1] as number);
  const env = envelope(d, hop);
  const db = Array.from(env, (v) => 20 * Math.log10(v + 1e-9));
  const rise = db.map((v, i) => (i >= 4 ? v - Math.min(...db.slice(i - 4, i)) : 0));
  const thr = opts.thresholdDb ?? 6;
  const gap = Math.round((opts.minGapMs ?? 40) / 2.5);
  const out: number[] = [];
  let last = -Infinity;
  for (let i = 1; i < rise.length - 1; i++) {
    const r = rise[i] as number;
    if (r < thr || (db[i] as number) < -60) continue;
    if (r < (rise[i - 1] as number) || r < (rise[i + 1] as number)) continue;
    if (i - last < gap) continue;
    // The onset is where the rise starts: the lowest hop of the 10 ms before the peak.
    let at = i - 4;
    for (let k = i - 4; k <= i; k++) if ((db[k] as number) < (db[at] as number)) at = k;
    out.push((at * hop) / sr);
    last = i;
  }
  return out;
}

/** For each of `found`, whether some `expected` time lies within `tol` s. */
export function matchRate(found: number[], expected: number[], tol: number): number {
  if (found.length === 0) return 0;
  const sorted = [...expected].sort((a, b) => a - b);
  let hit = 0;
  for (const f of found) {
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((sorted[mid] as number) < f) lo = mid + 1;
      else hi = mid;
    }
    const near = [sorted[lo - 1], sorted[lo]].filter((v): v is number => v !== undefined);
    if (near.some((v) => Math.abs(v - f) <= tol)) hit++;
  }
  return hit / found.length;
}

/** Normalised cross-correlation of y with the circular signal x at lag (y[i] against x[(lag + i) mod len]), every `step`-th sample. */
export function correlationAt(x: Float64Array, y: Float64Array, lag: number, step = 1): number {
  const n = x.length;
  let xy = 0;
  let xx = 0;
  let yy = 0;
  for (let i = 0; i < y.length; i += step) {
    const a = x[(((lag + i) % n) + n) % n] as number;
    const b = y[i] as number;
    xy += a * b;
    xx += a * a;
    yy += b * b;
  }
  return xx > 0 && yy > 0 ? xy / Math.sqrt(xx * yy) : 0;
}

/**
 * Where y (a stretch of output audio) lies in the looping signal x: the lag with the highest
 * normalised cross-correlation, searched on a 1/10-rate copy (every lag), then at full rate
 * around the best coarse lag. Both mono, same sample rate.
 */
export function loopLag(x: Float64Array, y: Float64Array): { lag: number; peak: number } {
  const D = 10;
  const decimate = (s: Float64Array) => {
    const out = new Float64Array(Math.floor(s.length / D));
    for (let i = 0; i < out.length; i++) {
      let v = 0;
      for (let k = 0; k < D; k++) v += s[i * D + k] as number;
      out[i] = v / D;
    }
    return out;
  };
  const xd = decimate(x);
  const yd = decimate(y);
  let coarse = 0;
  let best = -Infinity;
  for (let lag = 0; lag < xd.length; lag++) {
    const c = correlationAt(xd, yd, lag);
    if (c > best) [best, coarse] = [c, lag];
  }
  let lag = coarse * D;
  best = -Infinity;
  for (let l = coarse * D - 2 * D; l <= coarse * D + 2 * D; l++) {
    const c = correlationAt(x, y, l);
    if (c > best) [best, lag] = [c, l];
  }
  return { lag: ((lag % x.length) + x.length) % x.length, peak: best };
}

/** Largest step between neighbouring samples of x in [from, to). */
export function maxStep(x: Float64Array, from = 0, to = x.length): number {
  let m = 0;
  for (let i = Math.max(1, from); i < Math.min(to, x.length); i++) m = Math.max(m, Math.abs((x[i] as number) - (x[i - 1] as number)));
  return m;
}
