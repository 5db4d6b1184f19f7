/**
 * Look-ahead true-peak limiter: detection uses the 4× oversampled peak (Loudness.ts) wherever the
 * signal could reach the ceiling; the gain reaches its floor before the peak (1 ms look-ahead,
 * moving-average attack) and recovers exponentially. Circular mode (loops) wraps every window so
 * the gain at the seam matches on both sides.
 */
import { TP_BOUND, TP_TAPS, truePeakSpan } from './Loudness.ts';

export interface LimiterOptions {
  /** Ceiling, linear (e.g. fromDb(−1.3)). */
  ceiling: number;
  /** Look-ahead and attack, samples. */
  lookahead: number;
  /** Release time constant, samples. */
  release: number;
  circular: boolean;
}

/** Scratch buffers reused across passes (each n long). */
export interface LimiterScratch {
  a: Float32Array;
  b: Float32Array;
  pre: Float32Array;
  suf: Float32Array;
}

export function limiterScratch(n: number): LimiterScratch {
  return { a: new Float32Array(n), b: new Float32Array(n), pre: new Float32Array(n + 256), suf: new Float32Array(n + 256) };
}

/**
 * Peak envelope for the limiter's detector, independent of gain so it is computed once per render:
 * the 4× true peak around each sample in blocks whose window could exceed `threshold`, elsewhere
 * the block's upper bound (window max × TP_BOUND, always ≤ threshold).
 */
export function peakEnvelope(inL: Float32Array, inR: Float32Array, n: number, threshold: number, circular: boolean, out: Float32Array, from = 0, to = n): void {
  const B = 16;
  const half = TP_TAPS / 2;
  const tl = new Float64Array(B);
  const tr = new Float64Array(B);
  // Spans (progressive mastering) start on a block boundary, so blocks fall where one call's would.
  if (from % B !== 0) throw new RangeError(`peak envelope spans start on a 16-sample boundary [from:${from}]`);
  for (let b0 = from; b0 < to; b0 += B) {
    const end = Math.min(to, b0 + B);
    const lo = Math.max(0, b0 - half);
    const hi = Math.min(n, end + half);
    let wmax = 0;
    for (let i = lo; i < hi; i++) {
      const a = Math.abs(inL[i] as number);
      const r = Math.abs(inR[i] as number);
      if (a > wmax) wmax = a;
      if (r > wmax) wmax = r;
    }
    const bound = wmax * TP_BOUND;
    if (bound <= threshold && !(circular && (b0 < half || end > n - half))) {
      out.fill(bound, b0, end);
      continue;
    }
    truePeakSpan(inL, n, b0, end, circular, tl, 0);
    truePeakSpan(inR, n, b0, end, circular, tr, 0);
    for (let i = b0; i < end; i++) out[i] = Math.max(tl[i - b0] as number, tr[i - b0] as number);
  }
}

/**
 * Writes x·inGain·g into outL/outR, where g keeps the true peak under the ceiling. `peaks` comes
 * from peakEnvelope() on the same input.
 */
export function applyLimiter(
  inL: Float32Array,
  inR: Float32Array,
  inGain: number,
  outL: Float32Array,
  outR: Float32Array,
  n: number,
  o: LimiterOptions,
  scratch: LimiterScratch,
  peaks: Float32Array,
  /** When given, receives inGain·g per sample (stems are mastered with the mix's own gain). */
  gainOut?: Float32Array,
): void {
  const req = scratch.a;
  const c = o.ceiling / inGain;
  // 1. Required gain per sample.
  for (let i = 0; i < n; i++) {
    const p = peaks[i] as number;
    req[i] = p > c ? c / p : 1;
  }
  // 2. Forward window minimum over lookahead+1 samples (running deque-free: block min).
  const W = o.lookahead + 1;
  const gmin = scratch.b;
  // van Herk/Gil-Werman: block prefix and suffix minima give any window's minimum in O(1).
  if (W > 256) throw new RangeError(`look-ahead too long [samples:${o.lookahead}]`);
  const pre = scratch.pre;
  const suf = scratch.suf;
  const m = n + W;
  // Wrapped (loops) or 1-padded (songs) view of req, written once so the scans below are plain loops.
  suf.set(req.subarray(0, n));
  if (o.circular) for (let i = n; i < m; i++) suf[i] = req[(i - n) % n] as number;
  else suf.fill(1, n, m);
  // Block boundaries every W samples (counters instead of i % W: integer division per sample is slow).
  for (let b0 = 0; b0 < m; b0 += W) {
    const end = Math.min(m, b0 + W);
    let v = suf[b0] as number;
    pre[b0] = v;
    for (let i = b0 + 1; i < end; i++) {
      v = Math.min(v, suf[i] as number);
      pre[i] = v;
    }
  }
  for (let b0 = Math.floor((m - 1) / W) * W; b0 >= 0; b0 -= W) {
    // Suffix minima within each block; the block's last sample (and the array's) stays as it is.
    const last = Math.min(m, b0 + W) - 1;
    let v = suf[last] as number;
    for (let i = last - 1; i >= b0; i--) {
      v = Math.min(v, suf[i] as number);
      suf[i] = v;
    }
  }
  for (let i = 0; i < n; i++) gmin[i] = Math.min(suf[i] as number, pre[i + W - 1] as number);
  // 3. Moving average over the previous W values of gmin (attack ramp), in place via a ring.
  const ring = new Float64Array(W);
  let sum = 0;
  if (o.circular) {
    for (let k = 0; k < W; k++) {
      const v = gmin[n - W + k] as number;
      ring[k] = v;
      sum += v;
    }
  } else {
    ring.fill(1);
    sum = W;
  }
  let rp = 0;
  for (let i = 0; i < n; i++) {
    const v = gmin[i] as number;
    sum += v - (ring[rp] as number);
    ring[rp] = v;
    rp = rp + 1 < W ? rp + 1 : 0;
    req[i] = sum / W;
  }
  // 4. Release (gain rises exponentially, never above the attack curve); loops run twice.
  const rel = 1 - Math.exp(-1 / Math.max(1, o.release));
  // A loop's gain enters its first sample where its last sample left it: one silent pass first.
  const warmUp = (): number => {
    let w = 1;
    if (!o.circular) return w;
    for (let i = 0; i < n; i++) {
      const target = req[i] as number;
      w = w + (1 - w) * rel;
      if (target < w) w = target;
    }
    return w;
  };
  let g = warmUp();
  for (let i = 0; i < n; i++) {
    const target = req[i] as number;
    g = g + (1 - g) * rel;
    if (target < g) g = target;
    const gg = g * inGain;
    outL[i] = (inL[i] as number) * gg;
    outR[i] = (inR[i] as number) * gg;
  }
  if (gainOut) {
    // Same recursion again, only for stem renders: keeps the loop above free of a store per sample.
    g = warmUp();
    for (let i = 0; i < n; i++) {
      const target = req[i] as number;
      g = g + (1 - g) * rel;
      if (target < g) g = target;
      gainOut[i] = g * inGain;
    }
  }
}

/** What LimiterRun carries from one span to the next (copied by save() for passes that start again). */
export interface LimiterState {
  ring: Float64Array;
  sum: number;
  rp: number;
  g: number;
}

/**
 * The song (not circular) limiter run span by span, for progressive mastering: the first span can
 * be limited, dithered and encoded while later ones are still being rendered. Over one span
 * [0, n) it computes exactly what applyLimiter computes; over consecutive spans, the same as one
 * call (the window minimum reads `W − 1` samples past the span, so `peaks` must be final that far).
 * A gain ramp (`ramp[k]` multiplies the gain of sample `rampAt + k`) joins spans mastered at
 * different gains without a step: the detector sees the ramped gain, so the ceiling holds.
 */
export class LimiterRun {
  readonly #o: LimiterOptions;
  #s: LimiterState;

  constructor(o: LimiterOptions) {
    if (o.circular) throw new RangeError('LimiterRun is for songs; loops use applyLimiter');
    if (o.lookahead + 1 > 256) throw new RangeError(`look-ahead too long [samples:${o.lookahead}]`);
    this.#o = o;
    const W = o.lookahead + 1;
    this.#s = { ring: new Float64Array(W).fill(1), sum: W, rp: 0, g: 1 };
  }

  save(): LimiterState {
    return { ...this.#s, ring: this.#s.ring.slice() };
  }

  restore(s: LimiterState): void {
    this.#s = { ...s, ring: s.ring.slice() };
  }

  /**
   * Writes x·inGain·(ramp)·g into outL/outR for [from, to) of a signal `n` long. `scratch.a`,
   * `scratch.pre` and `scratch.suf` need `to − from + W` samples. `gainOut[i]` receives the gain.
   */
  process(
    inL: Float32Array, inR: Float32Array, inGain: number, ramp: Float32Array | null, rampAt: number,
    peaks: Float32Array, from: number, to: number, n: number,
    outL: Float32Array, outR: Float32Array, scratch: LimiterScratch, gainOut?: Float32Array,
  ): void {
    const W = this.#o.lookahead + 1;
    const span = to - from;
    const m = span + W - 1;
    const req = scratch.a;
    const pre = scratch.pre;
    const suf = scratch.suf;
    if (req.length < m || pre.length < m || suf.length < m) throw new RangeError(`limiter scratch too short [need:${m}]`);
    // 1. Required gain per sample over the span and its look-ahead (1 past the signal's end).
    const c = this.#o.ceiling / inGain;
    const lim = Math.min(m, n - from);
    requiredGain(peaks, from, lim, c, req);
    if (lim < m) req.fill(1, Math.max(0, lim), m);
    if (ramp) {
      // Ramp samples: the ceiling over the ramped gain.
      const k0 = Math.max(0, rampAt - from);
      const k1 = Math.min(lim, rampAt + ramp.length - from);
      for (let k = k0; k < k1; k++) {
        const p = peaks[from + k] as number;
        const ck = c / (ramp[from + k - rampAt] as number);
        req[k] = p > ck ? ck / p : 1;
      }
    }
    // 2. Forward window minimum over W samples: van Herk/Gil-Werman blocks of W (exact for any
    // alignment, so spans give what one pass gives).
    suf.set(req.subarray(0, m));
    for (let b0 = 0; b0 < m; b0 += W) {
      const end = Math.min(m, b0 + W);
      let v = suf[b0] as number;
      pre[b0] = v;
      for (let i = b0 + 1; i < end; i++) {
        v = Math.min(v, suf[i] as number);
        pre[i] = v;
      }
    }
    for (let b0 = Math.floor((m - 1) / W) * W; b0 >= 0; b0 -= W) {
      const last = Math.min(m, b0 + W) - 1;
      let v = suf[last] as number;
      for (let i = last - 1; i >= b0; i--) {
        v = Math.min(v, suf[i] as number);
        suf[i] = v;
      }
    }
    // gmin into req[0..span) (req's look-ahead part is no longer needed).
    for (let k = 0; k < span; k++) req[k] = Math.min(suf[k] as number, pre[k + W - 1] as number);
    // 3. Moving average over the previous W values (attack ramp), 4. release, output.
    const st = this.#s;
    const rel = 1 - Math.exp(-1 / Math.max(1, this.#o.release));
    const ring = st.ring;
    let sum = st.sum;
    let rp = st.rp;
    let g = st.g;
    for (let k = 0; k < span; k++) {
      const v = req[k] as number;
      sum += v - (ring[rp] as number);
      ring[rp] = v;
      rp = rp + 1 < W ? rp + 1 : 0;
      req[k] = sum / W;
    }
    st.sum = sum;
    st.rp = rp;
    g = releaseAndApply(inL, inR, req, from, span, g, rel, inGain, outL, outR, gainOut);
    if (ramp) {
      // Ramp samples get their own gain (they were written at inGain above).
      const k0 = Math.max(0, rampAt - from);
      const k1 = Math.min(span, rampAt + ramp.length - from);
      for (let k = k0; k < k1; k++) {
        const i = from + k;
        const r = ramp[i - rampAt] as number;
        outL[i] = (outL[i] as number) * r;
        outR[i] = (outR[i] as number) * r;
        if (gainOut) gainOut[i] = (gainOut[i] as number) * r;
      }
    }
    st.g = g;
  }
}

function requiredGain(peaks: Float32Array, from: number, count: number, c: number, req: Float32Array): void {
  for (let k = 0; k < count; k++) {
    const p = peaks[from + k] as number;
    req[k] = p > c ? c / p : 1;
  }
}

/** Release recursion and output (as applyLimiter's step 4); returns the gain state. */
function releaseAndApply(
  inL: Float32Array, inR: Float32Array, att: Float32Array, from: number, span: number, g0: number, rel: number, inGain: number,
  outL: Float32Array, outR: Float32Array, gainOut?: Float32Array,
): number {
  let g = g0;
  for (let k = 0; k < span; k++) {
    const target = att[k] as number;
    g = g + (1 - g) * rel;
    if (target < g) g = target;
    const gg = g * inGain;
    const i = from + k;
    outL[i] = (inL[i] as number) * gg;
    outR[i] = (inR[i] as number) * gg;
  }
  if (gainOut) {
    // Same recursion again, only for stem renders: keeps the loop above free of a store per sample.
    g = g0;
    for (let k = 0; k < span; k++) {
      const target = att[k] as number;
      g = g + (1 - g) * rel;
      if (target < g) g = target;
      gainOut[from + k] = g * inGain;
    }
  }
  return g;
}
