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
  const half = Math.ceil(n / 2);
  const dsend = new Float32Array(half);
  for (let i = 0; i < half; i++) dsend[i] = 0.5 * ((send[2 * i] as number) + ((send[2 * i + 1] as number | undefined) ?? 0));
  const wl = new Float32Array(half);
  const wr = new Float32Array(half);
  runFdn(dsend, wl, wr, half, sr / 2, o);
  let pl = 0;
  let pr = 0;
  let sl = 0;
  let sr2 = 0;
  const a = Math.exp((-2 * Math.PI * 9000) / sr);
  for (let i = 0; i < half; i++) {
    const l = wl[i] as number;
    const r = wr[i] as number;
    // Sample 2i sits half-way between the previous and the current low-rate output.
    sl = (1 - a) * (0.5 * (pl + l)) + a * sl;
    sr2 = (1 - a) * (0.5 * (pr + r)) + a * sr2;
    outL[2 * i] = (outL[2 * i] as number) + sl;
    outR[2 * i] = (outR[2 * i] as number) + sr2;
    if (2 * i + 1 < n) {
      sl = (1 - a) * l + a * sl;
      sr2 = (1 - a) * r + a * sr2;
      outL[2 * i + 1] = (outL[2 * i + 1] as number) + sl;
      outR[2 * i + 1] = (outR[2 * i + 1] as number) + sr2;
    }
    pl = l;
    pr = r;
  }
}

function runFdn(send: Float32Array, outL: Float32Array, outR: Float32Array, n: number, sr: number, o: ReverbOptions): void {
  const N = LINES.length;
  const scale = sr / 48000;
  const len = LINES.map((l) => Math.max(8, Math.round(l * scale)));
  const gain = len.map((l) => Math.pow(10, (-3 * l) / (sr * o.rt60)));
  const damp = Math.exp((-2 * Math.PI * o.damping) / sr);
  const undamp = 1 - damp;
  const wet = o.wet;
  const hN = 2 / N;
  const g0 = DIFFUSERS[0][1], g1 = DIFFUSERS[1][1];
  const d0 = new Float32Array(Math.round(DIFFUSERS[0][0] * scale));
  const d1 = new Float32Array(Math.round(DIFFUSERS[1][0] * scale));
  const pre = new Float32Array(Math.max(1, Math.round((o.preDelay * sr) / 48000)));
  // Hot loop: the eight lines are unrolled into locals (buffer, position, length, gain, damping
  // state), so no per-sample array indirection; arithmetic and its order are the same per line.
  const L0 = len[0] as number, L1 = len[1] as number, L2 = len[2] as number, L3 = len[3] as number;
  const L4 = len[4] as number, L5 = len[5] as number, L6 = len[6] as number, L7 = len[7] as number;
  const G0 = gain[0] as number, G1 = gain[1] as number, G2 = gain[2] as number, G3 = gain[3] as number;
  const G4 = gain[4] as number, G5 = gain[5] as number, G6 = gain[6] as number, G7 = gain[7] as number;
  const b0 = new Float32Array(L0), b1 = new Float32Array(L1), b2 = new Float32Array(L2), b3 = new Float32Array(L3);
  const b4 = new Float32Array(L4), b5 = new Float32Array(L5), b6 = new Float32Array(L6), b7 = new Float32Array(L7);
  let q0 = 0, q1 = 0, q2 = 0, q3 = 0, q4 = 0, q5 = 0, q6 = 0, q7 = 0;
  let f0 = 0, f1 = 0, f2 = 0, f3 = 0, f4 = 0, f5 = 0, f6 = 0, f7 = 0;
  const dn0 = d0.length, dn1 = d1.length, pn = pre.length;
  let dp0 = 0, dp1 = 0, pp = 0;
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
}
