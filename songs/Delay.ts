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
  new Delay(sr, o).process(send, outL, outR, 0, n);
}

/** The same delay run span by span (progressive mastering): its lines and filters carry over. */
export class Delay {
  readonly #bl: Float32Array;
  readonly #br: Float32Array;
  readonly #a: number;
  readonly #fb: number;
  readonly #wet: number;
  #p = 0;
  #lpL = 0;
  #lpR = 0;

  constructor(sr: number, o: DelayOptions) {
    const T = Math.max(1, Math.round(o.time));
    this.#bl = new Float32Array(T);
    this.#br = new Float32Array(T);
    this.#a = Math.exp((-2 * Math.PI * o.tone) / sr);
    this.#fb = o.feedback;
    this.#wet = o.wet;
  }

  /** Adds the repeats of send[from..to) into outL/outR. */
  process(send: Float32Array, outL: Float32Array, outR: Float32Array, from: number, to: number): void {
    const bl = this.#bl;
    const br = this.#br;
    const T = bl.length;
    const a = this.#a;
    const fb = this.#fb;
    const wet = this.#wet;
    let p = this.#p;
    let lpL = this.#lpL;
    let lpR = this.#lpR;
    for (let i = from; i < to; i++) {
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
    this.#p = p;
    this.#lpL = lpL;
    this.#lpR = lpR;
  }
}
