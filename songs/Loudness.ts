/**
 * ITU-R BS.1770-4 loudness: K-weighting (high shelf + RLB high-pass, 48 kHz coefficients from the
 * standard), 400 ms blocks with 75 % overlap, absolute gate −70 LKFS, relative gate −10 LU.
 * True peak: 4× oversampling with a 48-tap windowed-sinc interpolator (BS.1770-4 Annex 2 method).
 */

/** Integrated loudness in LUFS of a 48 kHz stereo signal (−Infinity for silence). */
export function integratedLoudness(L: Float32Array, R: Float32Array, n: number, sr = 48000): number {
  if (sr !== 48000) throw new RangeError(`K-weighting coefficients are for 48 kHz [sampleRate:${sr}]`);
  const sub = sr / 10; // 100 ms
  const nSub = Math.floor(n / sub);
  const z = new Float64Array(nSub);
  // Stage 1 (shelf) and stage 2 (high-pass), direct form I per channel.
  const b10 = 1.53512485958697, b11 = -2.69169618940638, b12 = 1.19839281085285;
  const a11 = -1.69065929318241, a12 = 0.73248077421585;
  const a21 = -1.99004745483398, a22 = 0.99007225036621;
  for (let ch = 0; ch < 2; ch++) {
    const x = ch === 0 ? L : R;
    let x1 = 0, x2 = 0, y1 = 0, y2 = 0, u1 = 0, u2 = 0, w1 = 0, w2 = 0;
    for (let s = 0; s < nSub; s++) {
      let acc = 0;
      const end = (s + 1) * sub;
      for (let i = s * sub; i < end; i++) {
        const xi = x[i] as number;
        const y = b10 * xi + b11 * x1 + b12 * x2 - a11 * y1 - a12 * y2;
        x2 = x1;
        x1 = xi;
        y2 = y1;
        y1 = y;
        const w = y - 2 * u1 + u2 - a21 * w1 - a22 * w2;
        u2 = u1;
        u1 = y;
        w2 = w1;
        w1 = w;
        acc += w * w;
      }
      z[s] = (z[s] as number) + acc / sub;
    }
  }
  const nBlocks = nSub - 3;
  if (nBlocks <= 0) return -Infinity;
  const blocks = new Float64Array(nBlocks);
  for (let j = 0; j < nBlocks; j++) blocks[j] = ((z[j] as number) + (z[j + 1] as number) + (z[j + 2] as number) + (z[j + 3] as number)) / 4;
  const lufs = (e: number) => -0.691 + 10 * Math.log10(e);
  let sum = 0;
  let cnt = 0;
  for (let j = 0; j < nBlocks; j++) {
    const e = blocks[j] as number;
    if (e > 0 && lufs(e) > -70) {
      sum += e;
      cnt++;
    }
  }
  if (cnt === 0) return -Infinity;
  const rel = lufs(sum / cnt) - 10;
  sum = 0;
  cnt = 0;
  for (let j = 0; j < nBlocks; j++) {
    const e = blocks[j] as number;
    if (e > 0 && lufs(e) > -70 && lufs(e) > rel) {
      sum += e;
      cnt++;
    }
  }
  return cnt === 0 ? -Infinity : lufs(sum / cnt);
}

/** 4 phases × 12 taps of a Hann-windowed sinc (cutoff at the original Nyquist). */
export const TP_TAPS = 12;
export const TP_PHASES: Float64Array[] = (() => {
  const total = TP_TAPS * 4;
  const c = (total - 1) / 2;
  const h = new Float64Array(total);
  for (let m = 0; m < total; m++) {
    const t = (m - c) / 4;
    const sinc = t === 0 ? 1 : Math.sin(Math.PI * t) / (Math.PI * t);
    const w = 0.5 - 0.5 * Math.cos((2 * Math.PI * (m + 0.5)) / total);
    h[m] = sinc * w;
  }
  const phases: Float64Array[] = [];
  for (let p = 0; p < 4; p++) {
    const ph = new Float64Array(TP_TAPS);
    let s = 0;
    for (let k = 0; k < TP_TAPS; k++) {
      ph[k] = h[4 * k + p] as number;
      s += ph[k] as number;
    }
    // Unity DC gain per phase.
    for (let k = 0; k < TP_TAPS; k++) ph[k] = (ph[k] as number) / s;
    phases.push(ph);
  }
  return phases;
})();
/** Upper bound of |interpolated| / max|input in window|: Σ|h| of the worst phase. */
export const TP_BOUND = Math.max(...TP_PHASES.map((p) => p.reduce((s, v) => s + Math.abs(v), 0)));

/**
 * Largest interpolated magnitude around sample i (the four phases between i−6 and i+6, plus the
 * sample itself) of one channel. Indices outside [0, n) read as 0, or wrap when `circular`.
 */
export function truePeakAt(x: Float32Array, n: number, i: number, circular: boolean): number {
  let m = Math.abs(x[i] as number);
  const half = TP_TAPS / 2;
  if (i - half + 1 >= 0 && i + half < n) {
    // Fast path: no wrapping. Taps k read x[i + half − k].
    const base = i + half;
    for (let p = 0; p < 4; p++) {
      const h = TP_PHASES[p] as Float64Array;
      let acc = 0;
      for (let k = 0; k < TP_TAPS; k++) acc += (h[k] as number) * (x[base - k] as number);
      const a = acc < 0 ? -acc : acc;
      if (a > m) m = a;
    }
    return m;
  }
  for (let p = 0; p < 4; p++) {
    const h = TP_PHASES[p] as Float64Array;
    let acc = 0;
    for (let k = 0; k < TP_TAPS; k++) {
      let j = i + half - k;
      if (j < 0 || j >= n) {
        if (!circular) continue;
        j = ((j % n) + n) % n;
      }
      acc += (h[k] as number) * (x[j] as number);
    }
    const a = Math.abs(acc);
    if (a > m) m = a;
  }
  return m;
}

/** True peak (linear, 4× oversampled) of a stereo signal; skips blocks that cannot beat the max. */
export function truePeak(L: Float32Array, R: Float32Array, n: number, circular = false): number {
  let best = 0;
  const B = 16;
  const half = TP_TAPS / 2;
  for (let b0 = 0; b0 < n; b0 += B) {
    const lo = Math.max(0, b0 - half);
    const hi = Math.min(n, b0 + B + half);
    let wmax = 0;
    for (let i = lo; i < hi; i++) {
      const a = Math.abs(L[i] as number);
      const c = Math.abs(R[i] as number);
      if (a > wmax) wmax = a;
      if (c > wmax) wmax = c;
    }
    if (wmax * TP_BOUND <= best) continue;
    const end = Math.min(n, b0 + B);
    for (let i = b0; i < end; i++) {
      const a = truePeakAt(L, n, i, circular);
      const c = truePeakAt(R, n, i, circular);
      if (a > best) best = a;
      if (c > best) best = c;
    }
  }
  return best;
}

export const toDb = (x: number): number => 20 * Math.log10(x);
export const fromDb = (db: number): number => Math.pow(10, db / 20);
