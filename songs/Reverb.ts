/**
 * Stereo reverb: an 8-line feedback delay network (Householder feedback matrix, one-pole damping per
 * line) after two input all-pass diffusers. Linear and time-invariant (no modulation), so a loop's
 * tail can be folded onto its start exactly (reference songs.md §4.6).
 */

/** Line lengths in samples at 48 kHz (mutually prime, 23–37 ms). */
/** Eight lines: runFdn's loop is unrolled for exactly this many. */
const LINES = [1117, 1187, 1277, 1361, 1429, 1493, 1559, 1621] as const;
const DIFFUSERS = [
  [142, 0.6],
  [379, 0.6],
] as const;

export interface ReverbOptions {
  /** Time to decay by 60 dB, seconds. */
  rt60: number;
  /** Damping cutoff in Hz (one-pole in each line). */
  damping: number;
  /** Pre-delay in samples. */
  preDelay: number;
  /** Wet gain. */
  wet: number;
}

/**
 * Processes `send[0..n)` and adds the stereo result to `outL`/`outR`. The network runs at half the
 * sample rate (the tail is damped well below 12 kHz anyway): the send is averaged in pairs, and the
 * output is linearly interpolated back up and smoothed by a one-pole low-pass against images.
 */
export function applyReverb(send: Float32Array, outL: Float32Array, outR: Float32Array, n: number, sr: number, o: ReverbOptions): void {
  new Reverb(sr, o).process(send, outL, outR, 0, n, n);
}

/**
 * The same reverb run span by span (progressive mastering): state carries over, so processing
 * [0, a) then [a, n) gives exactly what one call over [0, n) gives, as long as `a` is even.
 */
export class Reverb {
  readonly #sr: number;
  readonly #fdn: FdnState;
  /** Upsampler state: previous low-rate outputs and the anti-image low-pass. */
  #pl = 0;
  #pr = 0;
  #sl = 0;
  #sr2 = 0;

  constructor(sr: number, o: ReverbOptions) {
    this.#sr = sr;
    this.#fdn = fdnState(sr / 2, o);
  }

  /** Adds the returns of send[from..to) into outL/outR; `from` must be even; `n` is the signal's length. */
  process(send: Float32Array, outL: Float32Array, outR: Float32Array, from: number, to: number, n: number): void {
    if (from % 2 !== 0) throw new RangeError(`reverb spans start on even samples [from:${from}]`);
    const h0 = from / 2;
    const h1 = Math.ceil(to / 2);
    const half = h1 - h0;
    const dsend = new Float32Array(half);
    for (let k = 0; k < half; k++) {
      const i = 2 * (h0 + k);
      dsend[k] = 0.5 * ((send[i] as number) + (i + 1 < n ? (send[i + 1] as number) : 0));
    }
    const wl = new Float32Array(half);
    const wr = new Float32Array(half);
    runFdn(this.#fdn, dsend, wl, wr, half);
    let pl = this.#pl;
    let pr = this.#pr;
    let sl = this.#sl;
    let sr2 = this.#sr2;
    const a = Math.exp((-2 * Math.PI * 9000) / this.#sr);
    for (let k = 0; k < half; k++) {
      const i = 2 * (h0 + k);
      const l = wl[k] as number;
      const r = wr[k] as number;
      // Sample 2i sits half-way between the previous and the current low-rate output.
      sl = (1 - a) * (0.5 * (pl + l)) + a * sl;
      sr2 = (1 - a) * (0.5 * (pr + r)) + a * sr2;
      outL[i] = (outL[i] as number) + sl;
      outR[i] = (outR[i] as number) + sr2;
      if (i + 1 < n) {
        sl = (1 - a) * l + a * sl;
        sr2 = (1 - a) * r + a * sr2;
        outL[i + 1] = (outL[i + 1] as number) + sl;
        outR[i + 1] = (outR[i + 1] as number) + sr2;
      }
      pl = l;
      pr = r;
    }
    this.#pl = pl;
    this.#pr = pr;
    this.#sl = sl;
    this.#sr2 = sr2;
  }
}

/** The network's delay lines, positions and damping states, carried between spans. */
interface FdnState {
  len: number[];
  gain: number[];
  damp: number;
  wet: number;
  d0: Float32Array;
  d1: Float32Array;
  pre: Float32Array;
  b: Float32Array[];
  /** Line positions q0..q7, damping states f0..f7, diffuser and pre-delay positions. */
  q: Int32Array;
  f: Float64Array;
  dp: Int32Array;
}

function fdnState(sr: number, o: ReverbOptions): FdnState {
  const scale = sr / 48000;
  const len = LINES.map((l) => Math.max(8, Math.round(l * scale)));
  return {
    len,
    gain: len.map((l) => Math.pow(10, (-3 * l) / (sr * o.rt60))),
    damp: Math.exp((-2 * Math.PI * o.damping) / sr),
    wet: o.wet,
    d0: new Float32Array(Math.round(DIFFUSERS[0][0] * scale)),
    d1: new Float32Array(Math.round(DIFFUSERS[1][0] * scale)),
    pre: new Float32Array(Math.max(1, Math.round((o.preDelay * sr) / 48000))),
    b: len.map((l) => new Float32Array(l)),
    q: new Int32Array(8),
    f: new Float64Array(8),
    dp: new Int32Array(3),
  };
}

function runFdn(st: FdnState, send: Float32Array, outL: Float32Array, outR: Float32Array, n: number): void {
  const N = LINES.length;
  const damp = st.damp;
  const undamp = 1 - damp;
  const wet = st.wet;
  const hN = 2 / N;
  const g0 = DIFFUSERS[0][1], g1 = DIFFUSERS[1][1];
  const d0 = st.d0;
  const d1 = st.d1;
  const pre = st.pre;
  const len = st.len;
  const gain = st.gain;
  // Hot loop: the eight lines are unrolled into locals (buffer, position, length, gain, damping
  // state), so no per-sample array indirection; arithmetic and its order are the same per line.
  const L0 = len[0] as number, L1 = len[1] as number, L2 = len[2] as number, L3 = len[3] as number;
  const L4 = len[4] as number, L5 = len[5] as number, L6 = len[6] as number, L7 = len[7] as number;
  const G0 = gain[0] as number, G1 = gain[1] as number, G2 = gain[2] as number, G3 = gain[3] as number;
  const G4 = gain[4] as number, G5 = gain[5] as number, G6 = gain[6] as number, G7 = gain[7] as number;
  const b0 = st.b[0] as Float32Array, b1 = st.b[1] as Float32Array, b2 = st.b[2] as Float32Array, b3 = st.b[3] as Float32Array;
  const b4 = st.b[4] as Float32Array, b5 = st.b[5] as Float32Array, b6 = st.b[6] as Float32Array, b7 = st.b[7] as Float32Array;
  const q = st.q;
  const f = st.f;
  let q0 = q[0] as number, q1 = q[1] as number, q2 = q[2] as number, q3 = q[3] as number;
  let q4 = q[4] as number, q5 = q[5] as number, q6 = q[6] as number, q7 = q[7] as number;
  let f0 = f[0] as number, f1 = f[1] as number, f2 = f[2] as number, f3 = f[3] as number;
  let f4 = f[4] as number, f5 = f[5] as number, f6 = f[6] as number, f7 = f[7] as number;
  const dn0 = d0.length, dn1 = d1.length, pn = pre.length;
  let dp0 = st.dp[0] as number, dp1 = st.dp[1] as number, pp = st.dp[2] as number;
  for (let i = 0; i < n; i++) {
    // Pre-delay.
    let x = pre[pp] as number;
    pre[pp] = send[i] as number;
    pp = pp + 1 < pn ? pp + 1 : 0;
    // Two Schroeder all-passes.
    let v = d0[dp0] as number;
    let w = x + g0 * v;
    d0[dp0] = w;
    x = v - g0 * w;
    dp0 = dp0 + 1 < dn0 ? dp0 + 1 : 0;
    v = d1[dp1] as number;
    w = x + g1 * v;
    d1[dp1] = w;
    x = v - g1 * w;
    dp1 = dp1 + 1 < dn1 ? dp1 + 1 : 0;
    // Read lines, damp (one-pole low-pass per line).
    f0 = undamp * ((b0[q0] as number) * G0) + damp * f0;
    f1 = undamp * ((b1[q1] as number) * G1) + damp * f1;
    f2 = undamp * ((b2[q2] as number) * G2) + damp * f2;
    f3 = undamp * ((b3[q3] as number) * G3) + damp * f3;
    f4 = undamp * ((b4[q4] as number) * G4) + damp * f4;
    f5 = undamp * ((b5[q5] as number) * G5) + damp * f5;
    f6 = undamp * ((b6[q6] as number) * G6) + damp * f6;
    f7 = undamp * ((b7[q7] as number) * G7) + damp * f7;
    const h = hN * (0 + f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7);
    outL[i] = (outL[i] as number) + wet * (f0 - f2 + f4 - f6);
    outR[i] = (outR[i] as number) + wet * (f1 - f3 + f5 - f7);
    // Householder feedback plus input.
    const inp = x * 0.35;
    b0[q0] = f0 - h + inp;
    b1[q1] = f1 - h + inp;
    b2[q2] = f2 - h - inp;
    b3[q3] = f3 - h - inp;
    b4[q4] = f4 - h + inp;
    b5[q5] = f5 - h - inp;
    b6[q6] = f6 - h + inp;
    b7[q7] = f7 - h - inp;
    q0 = q0 + 1 < L0 ? q0 + 1 : 0;
    q1 = q1 + 1 < L1 ? q1 + 1 : 0;
    q2 = q2 + 1 < L2 ? q2 + 1 : 0;
    q3 = q3 + 1 < L3 ? q3 + 1 : 0;
    q4 = q4 + 1 < L4 ? q4 + 1 : 0;
    q5 = q5 + 1 < L5 ? q5 + 1 : 0;
    q6 = q6 + 1 < L6 ? q6 + 1 : 0;
    q7 = q7 + 1 < L7 ? q7 + 1 : 0;
  }
  q[0] = q0; q[1] = q1; q[2] = q2; q[3] = q3; q[4] = q4; q[5] = q5; q[6] = q6; q[7] = q7;
  f[0] = f0; f[1] = f1; f[2] = f2; f[3] = f3; f[4] = f4; f[5] = f5; f[6] = f6; f[7] = f7;
  st.dp[0] = dp0;
  st.dp[1] = dp1;
  st.dp[2] = pp;
}
