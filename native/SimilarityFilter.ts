/**
 * StreamDiffusion's stochastic similarity filter (`image_filter.py`): skip a frame with probability
 * max(0, 1 − (1−cos)/(1−threshold)) where cos is the cosine similarity to the last *processed*
 * frame, but never more than `maxSkipFrames` in a row.
 */

export interface SimilarityFilterOptions {
  /** Cosine similarity in [0,1]; ≥ 1 never skips. Daydream default 0.98. */
  threshold: number;
  /** Most consecutive skipped frames before one is forced through. Daydream default 10. */
  maxSkipFrames: number;
  /** Uniform [0,1) source; injectable for tests. Default Math.random. */
  random?: () => number;
}

/** a·b, |a|² and |b|² in one pass (the shared core of cosine similarity and slerp). */
export function dotAndNorms(a: ArrayLike<number>, b: ArrayLike<number>): { dot: number; na: number; nb: number } {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as number;
    const y = b[i] as number;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return { dot, na, nb };
}

export function cosineSimilarity(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const { dot, na, nb } = dotAndNorms(a, b);
  // torch's CosineSimilarity clamps each norm at eps 1e-8.
  return dot / (Math.max(Math.sqrt(na), 1e-8) * Math.max(Math.sqrt(nb), 1e-8));
}

export class SimilarityFilter {
  readonly threshold: number;
  readonly maxSkipFrames: number;
  readonly #random: () => number;
  #prev: Float32Array | null = null;
  /** shouldSkipRgb's conversion buffer (not the reference). */
  #spare: Float32Array | null = null;
  #skipCount = 0;
  /** Cosine similarity computed for the last frame (NaN before the second frame). */
  lastSimilarity = Number.NaN;

  constructor(o: SimilarityFilterOptions) {
    this.threshold = o.threshold;
    this.maxSkipFrames = o.maxSkipFrames;
    this.#random = o.random ?? Math.random;
  }

  /** Probability of skipping a frame with cosine similarity `cos` to the reference. */
  skipProbability(cos: number): number {
    if (this.threshold >= 1) return 0;
    return Math.max(0, 1 - (1 - cos) / (1 - this.threshold));
  }

  /**
   * Decides for one frame (the preprocessed [-1,1] image tensor). Returns true to skip. A processed
   * frame becomes the new reference; the caller must not mutate `x` afterwards.
   */
  shouldSkip(x: Float32Array): boolean {
    if (this.threshold >= 1 || !this.#prev || this.#prev.length !== x.length) {
      this.#prev = x;
      this.lastSimilarity = Number.NaN;
      return false;
    }
    const cos = cosineSimilarity(this.#prev, x);
    this.lastSimilarity = cos;
    const u = this.#random();
    if (this.skipProbability(cos) < u || this.#skipCount >= this.maxSkipFrames) {
      // We reset on every processed frame so `maxSkipFrames` bounds *consecutive* skips exactly
      // (upstream forces a frame only after max+1 skips and never resets on a normal one).
      this.#skipCount = 0;
      this.#prev = x;
      return false;
    }
    this.#skipCount++;
    return true;
  }

  /**
   * shouldSkip for an RGB24 frame: the same decision on its [-1,1] values (the VAE's input). Two
   * buffers take turns (3 MB each at 512²): the frame's values go into the spare one; a processed
   * frame's become the reference and the old reference becomes the spare.
   */
  shouldSkipRgb(rgb: Uint8Array): boolean {
    const x = this.#spare?.length === rgb.length ? this.#spare : new Float32Array(rgb.length);
    for (let i = 0; i < rgb.length; i++) x[i] = (rgb[i] as number) / 127.5 - 1;
    const reference = this.#prev;
    const skip = this.shouldSkip(x);
    this.#spare = skip ? x : reference;
    return skip;
  }

  reset(): void {
    this.#prev = null;
    this.#skipCount = 0;
    this.lastSimilarity = Number.NaN;
  }
}
