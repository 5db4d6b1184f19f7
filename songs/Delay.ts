/**
 * Tempo-synced stereo ping-pong delay with a low-passed feedback path. Linear and time-invariant,
 * so loop tails fold exactly. Delay time is a whole number of samples.
 */
export interface DelayOptions {
  /** Delay time in samples (e.g. a dotted eighth). */
  time: number;
  feedback: number;
  /** Low-pass cutoff in the feedback path, Hz. */
  tone: number;
  wet: number;
}

export function applyDelay(send: Float32Array, outL: Float32Array, outR: Float32Array, n: number, sr: number, o: DelayOptions): void {
  const T = Math.max(1, Math.round(o.time));
  const bl = new Float32Array(T);
  const br = new Float32Array(T);
  let p = 0;
  const a = Math.exp((-2 * Math.PI * o.tone) / sr);
  let lpL = 0;
  let lpR = 0;
  const fb = o.feedback;
  const wet = o.wet;
  for (let i = 0; i < n; i++) {
    const yl = bl[p] as number;
    const yr = br[p] as number;
    outL[i] = (outL[i] as number) + wet * yl;
    outR[i] = (outR[i] as number) + wet * yr;
    lpL = (1 - a) * yl + a * lpL;
    lpR = (1 - a) * yr + a * lpR;
    // Ping-pong: input enters left, each repeat crosses sides.
    bl[p] = (send[i] as number) + fb * lpR;
    br[p] = fb * lpL;
    p = p + 1 < T ? p + 1 : 0;
  }
}
