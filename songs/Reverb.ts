/**
 * Stereo reverb: an 8-line feedback delay network (Householder feedback matrix, one-pole damping per
 * line) after two input all-pass diffusers. Linear and time-invariant (no modulation), so a loop's
 * tail can be folded onto its start exactly (reference songs.md §4.6).
 */

/** Line lengths in samples at 48 kHz (mutually prime, 23–37 ms). */
const LINES = [1117, 1187, 1277, 1361, 1429, 1493, 1559, 1621];
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
  const bufs = len.map((l) => new Float32Array(l));
  const pos = new Int32Array(N);
  const gain = new Float64Array(N);
  for (let j = 0; j < N; j++) gain[j] = Math.pow(10, (-3 * (len[j] as number)) / (sr * o.rt60));
  const damp = Math.exp((-2 * Math.PI * o.damping) / sr);
  const lp = new Float64Array(N);
  const dl = DIFFUSERS.map(([d]) => new Float32Array(Math.round(d * scale)));
  const dp = [0, 0];
  const pre = new Float32Array(Math.max(1, Math.round((o.preDelay * sr) / 48000)));
  let pp = 0;
  const s = new Float64Array(N);
  const wet = o.wet;
  const b0 = bufs[0] as Float32Array, b1 = bufs[1] as Float32Array, b2 = bufs[2] as Float32Array, b3 = bufs[3] as Float32Array;
  const b4 = bufs[4] as Float32Array, b5 = bufs[5] as Float32Array, b6 = bufs[6] as Float32Array, b7 = bufs[7] as Float32Array;
  const d0 = dl[0] as Float32Array, d1 = dl[1] as Float32Array;
  const g0 = DIFFUSERS[0][1], g1 = DIFFUSERS[1][1];
  for (let i = 0; i < n; i++) {
    // Pre-delay.
    let x = pre[pp] as number;
    pre[pp] = send[i] as number;
    pp = pp + 1 < pre.length ? pp + 1 : 0;
    // Two Schroeder all-passes.
    let v = d0[dp[0] as number] as number;
    let w = x + g0 * v;
    d0[dp[0] as number] = w;
    x = v - g0 * w;
    dp[0] = (dp[0] as number) + 1 < d0.length ? (dp[0] as number) + 1 : 0;
    v = d1[dp[1] as number] as number;
    w = x + g1 * v;
    d1[dp[1] as number] = w;
    x = v - g1 * w;
    dp[1] = (dp[1] as number) + 1 < d1.length ? (dp[1] as number) + 1 : 0;
    // Read lines, damp.
    let sum = 0;
    for (let j = 0; j < N; j++) {
      const b = bufs[j] as Float32Array;
      const y = (b[pos[j] as number] as number) * (gain[j] as number);
      const f = (1 - damp) * y + damp * (lp[j] as number);
      lp[j] = f;
      s[j] = f;
      sum += f;
    }
    const h = (2 / N) * sum;
    outL[i] = (outL[i] as number) + wet * ((s[0] as number) - (s[2] as number) + (s[4] as number) - (s[6] as number));
    outR[i] = (outR[i] as number) + wet * ((s[1] as number) - (s[3] as number) + (s[5] as number) - (s[7] as number));
    // Householder feedback plus input.
    const inp = x * 0.35;
    b0[pos[0] as number] = (s[0] as number) - h + inp;
    b1[pos[1] as number] = (s[1] as number) - h + inp;
    b2[pos[2] as number] = (s[2] as number) - h - inp;
    b3[pos[3] as number] = (s[3] as number) - h - inp;
    b4[pos[4] as number] = (s[4] as number) - h + inp;
    b5[pos[5] as number] = (s[5] as number) - h - inp;
    b6[pos[6] as number] = (s[6] as number) - h + inp;
    b7[pos[7] as number] = (s[7] as number) - h - inp;
    for (let j = 0; j < N; j++) pos[j] = (pos[j] as number) + 1 < (len[j] as number) ? (pos[j] as number) + 1 : 0;
  }
}
