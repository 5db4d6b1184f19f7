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

/**
 * Per-sample true peak (as truePeakAt) of one channel for i in [from, to), written to
 * out[at + i − from]. Interior samples run an unrolled kernel with the 48 coefficients held in
 * locals (same products and summation order as truePeakAt, so the same values).
 */
export function truePeakSpan(x: Float32Array, n: number, from: number, to: number, circular: boolean, out: Float64Array, at: number): void {
  const half = TP_TAPS / 2;
  const a = Math.min(to, Math.max(from, half - 1));
  const b = Math.min(to, Math.max(a, n - half));
  for (let i = from; i < a; i++) out[at + i - from] = truePeakAt(x, n, i, circular);
  if (a < b) {
    const p0 = TP_PHASES[0] as Float64Array, p1 = TP_PHASES[1] as Float64Array, p2 = TP_PHASES[2] as Float64Array, p3 = TP_PHASES[3] as Float64Array;
    const h00 = p0[0] as number, h01 = p0[1] as number, h02 = p0[2] as number, h03 = p0[3] as number, h04 = p0[4] as number, h05 = p0[5] as number;
    const h06 = p0[6] as number, h07 = p0[7] as number, h08 = p0[8] as number, h09 = p0[9] as number, h010 = p0[10] as number, h011 = p0[11] as number;
    const h10 = p1[0] as number, h11 = p1[1] as number, h12 = p1[2] as number, h13 = p1[3] as number, h14 = p1[4] as number, h15 = p1[5] as number;
    const h16 = p1[6] as number, h17 = p1[7] as number, h18 = p1[8] as number, h19 = p1[9] as number, h110 = p1[10] as number, h111 = p1[11] as number;
    const h20 = p2[0] as number, h21 = p2[1] as number, h22 = p2[2] as number, h23 = p2[3] as number, h24 = p2[4] as number, h25 = p2[5] as number;
    const h26 = p2[6] as number, h27 = p2[7] as number, h28 = p2[8] as number, h29 = p2[9] as number, h210 = p2[10] as number, h211 = p2[11] as number;
    const h30 = p3[0] as number, h31 = p3[1] as number, h32 = p3[2] as number, h33 = p3[3] as number, h34 = p3[4] as number, h35 = p3[5] as number;
    const h36 = p3[6] as number, h37 = p3[7] as number, h38 = p3[8] as number, h39 = p3[9] as number, h310 = p3[10] as number, h311 = p3[11] as number;
    for (let i = a; i < b; i++) {
      const c = i + half;
      const x0 = x[c] as number, x1 = x[c - 1] as number, x2 = x[c - 2] as number, x3 = x[c - 3] as number;
      const x4 = x[c - 4] as number, x5 = x[c - 5] as number, x6 = x[c - 6] as number, x7 = x[c - 7] as number;
      const x8 = x[c - 8] as number, x9 = x[c - 9] as number, x10 = x[c - 10] as number, x11 = x[c - 11] as number;
      let m = x6 < 0 ? -x6 : x6;
      let q = 0 + h00 * x0 + h01 * x1 + h02 * x2 + h03 * x3 + h04 * x4 + h05 * x5 + h06 * x6 + h07 * x7 + h08 * x8 + h09 * x9 + h010 * x10 + h011 * x11;
      if (q < 0) q = -q;
      if (q > m) m = q;
      q = 0 + h10 * x0 + h11 * x1 + h12 * x2 + h13 * x3 + h14 * x4 + h15 * x5 + h16 * x6 + h17 * x7 + h18 * x8 + h19 * x9 + h110 * x10 + h111 * x11;
      if (q < 0) q = -q;
      if (q > m) m = q;
      q = 0 + h20 * x0 + h21 * x1 + h22 * x2 + h23 * x3 + h24 * x4 + h25 * x5 + h26 * x6 + h27 * x7 + h28 * x8 + h29 * x9 + h210 * x10 + h211 * x11;
      if (q < 0) q = -q;
      if (q > m) m = q;
      q = 0 + h30 * x0 + h31 * x1 + h32 * x2 + h33 * x3 + h34 * x4 + h35 * x5 + h36 * x6 + h37 * x7 + h38 * x8 + h39 * x9 + h310 * x10 + h311 * x11;
      if (q < 0) q = -q;
      if (q > m) m = q;
      out[at + i - from] = m;
    }
  }
  for (let i = b; i < to; i++) out[at + i - from] = truePeakAt(x, n, i, circular);
}

/** True peak (linear, 4× oversampled) of a stereo signal; skips blocks that cannot beat the max. */
export function truePeak(L: Float32Array, R: Float32Array, n: number, circular = false): number {
  let best = 0;
  const B = 16;
  const half = TP_TAPS / 2;
  const tl = new Float64Array(B);
  const tr = new Float64Array(B);
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
    truePeakSpan(L, n, b0, end, circular, tl, 0);
    truePeakSpan(R, n, b0, end, circular, tr, 0);
    for (let k = 0; k < end - b0; k++) {
      const a = tl[k] as number;
      const c = tr[k] as number;
      if (a > best) best = a;
      if (c > best) best = c;
    }
  }
  return best;
}

export const toDb = (x: number): number => 20 * Math.log10(x);
export const fromDb = (db: number): number => Math.pow(10, db / 20);
