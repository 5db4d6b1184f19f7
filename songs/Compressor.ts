/**
 * Bus "glue" compressor: stereo-linked peak detector per 32-sample block, attack/release smoothing
 * in dB, gain interpolated per sample. Threshold is relative to the mix's own RMS so it works the
 * same before loudness normalisation. Circular mode primes the detector with the loop's end.
 */
export interface CompressorOptions {
  /** Threshold in dB above the signal's RMS. */
  thresholdOverRms: number;
  ratio: number;
  attackMs: number;
  releaseMs: number;
  circular: boolean;
}

const BLOCK = 32;

/**
 * Compresses L/R in place. With `gainOut`, also writes the gain applied to each sample (the same
 * for both channels): stems are mastered with it so that they add up to the mix.
 */
export function applyCompressor(L: Float32Array, R: Float32Array, n: number, sr: number, o: CompressorOptions, gainOut?: Float32Array): void {
  let ss = 0;
  for (let i = 0; i < n; i++) {
    const a = L[i] as number;
    const b = R[i] as number;
    ss += a * a + b * b;
  }
  const rms = Math.sqrt(ss / Math.max(1, 2 * n));
  if (rms === 0) {
    gainOut?.fill(1, 0, n);
    return;
  }
  const thrDb = 20 * Math.log10(rms) + o.thresholdOverRms;
  const blockSec = BLOCK / sr;
  const att = 1 - Math.exp(-blockSec / (o.attackMs / 1000));
  const rel = 1 - Math.exp(-blockSec / (o.releaseMs / 1000));
  const slope = 1 / o.ratio - 1;
  const nBlocks = Math.ceil(n / BLOCK);
  let envDb = thrDb - 20;
  // Detector: block peak in dB, smoothed with attack/release (top-level helper, no closures: V8
  // keeps envDb in a register instead of a context slot).
  if (o.circular) {
    const prime = Math.min(nBlocks, Math.ceil((0.5 * sr) / BLOCK));
    for (let b = nBlocks - prime; b < nBlocks; b++) {
      const lvl = blockPeakDb(L, R, b * BLOCK, Math.min(n, (b + 1) * BLOCK));
      envDb += (lvl > envDb ? att : rel) * (lvl - envDb);
    }
  }
  const gains = new Float32Array(nBlocks);
  for (let b = 0; b < nBlocks; b++) {
    const lvl = blockPeakDb(L, R, b * BLOCK, Math.min(n, (b + 1) * BLOCK));
    envDb += (lvl > envDb ? att : rel) * (lvl - envDb);
    const over = envDb - thrDb;
    gains[b] = over > 0 ? Math.pow(10, (over * slope) / 20) : 1;
  }
  // Per-sample interpolation between block gains (wrapping for loops).
  for (let b = 0; b < nBlocks; b++) {
    const g0 = b === 0 ? (o.circular ? (gains[nBlocks - 1] as number) : (gains[0] as number)) : (gains[b - 1] as number);
    const g1 = gains[b] as number;
    const start = b * BLOCK;
    const end = Math.min(n, start + BLOCK);
    const inv = 1 / BLOCK;
    for (let i = start; i < end; i++) {
      const g = g0 + (g1 - g0) * (i - start + 1) * inv;
      L[i] = (L[i] as number) * g;
      R[i] = (R[i] as number) * g;
    }
    if (gainOut) for (let i = start; i < end; i++) gainOut[i] = g0 + (g1 - g0) * (i - start + 1) * inv;
  }
}

/** Stereo-linked peak of samples [start, end) in dB (floor 1e-9). */
function blockPeakDb(L: Float32Array, R: Float32Array, start: number, end: number): number {
  let m = 1e-9;
  for (let i = start; i < end; i++) {
    const a = Math.abs(L[i] as number);
    const c = Math.abs(R[i] as number);
    if (a > m) m = a;
    if (c > m) m = c;
  }
  return 20 * Math.log10(m);
}

/**
 * The same compressor run span by span (progressive mastering, songs only: not circular) with a
 * threshold fixed up front instead of measured on the whole mix. Spans start on a 32-sample block
 * boundary; the detector and the last block gain carry over, so the result does not depend on
 * where the spans are cut.
 */
export class CompressorRun {
  readonly #thrDb: number;
  readonly #att: number;
  readonly #rel: number;
  readonly #slope: number;
  #envDb: number;
  /** Gain of the previous block (the first block interpolates from its own gain). */
  #prev = Number.NaN;

  /** `thresholdDb`: absolute threshold, dBFS of the block peak. */
  constructor(thresholdDb: number, sr: number, o: Omit<CompressorOptions, 'thresholdOverRms' | 'circular'>) {
    const blockSec = BLOCK / sr;
    this.#thrDb = thresholdDb;
    this.#att = 1 - Math.exp(-blockSec / (o.attackMs / 1000));
    this.#rel = 1 - Math.exp(-blockSec / (o.releaseMs / 1000));
    this.#slope = 1 / o.ratio - 1;
    this.#envDb = thresholdDb - 20;
  }

  /** Compresses L/R[from..to) in place (`from` a multiple of 32); `gainOut[i]` receives each sample's gain. */
  process(L: Float32Array, R: Float32Array, from: number, to: number, gainOut?: Float32Array): void {
    if (from % BLOCK !== 0) throw new RangeError(`compressor spans start on a block boundary [from:${from}]`);
    const inv = 1 / BLOCK;
    for (let start = from; start < to; start += BLOCK) {
      const end = Math.min(to, start + BLOCK);
      const lvl = blockPeakDb(L, R, start, end);
      this.#envDb += (lvl > this.#envDb ? this.#att : this.#rel) * (lvl - this.#envDb);
      const over = this.#envDb - this.#thrDb;
      // Rounded to float32 as applyCompressor's block gains are (so one span gives its exact output).
      const g1 = Math.fround(over > 0 ? Math.pow(10, (over * this.#slope) / 20) : 1);
      const g0 = Number.isNaN(this.#prev) ? g1 : this.#prev;
      this.#prev = g1;
      scaleBlock(L, R, start, end, g0, g1, inv, gainOut);
    }
  }
}

/** Per-sample interpolation from g0 to g1 across one block (as applyCompressor does). */
function scaleBlock(L: Float32Array, R: Float32Array, start: number, end: number, g0: number, g1: number, inv: number, gainOut?: Float32Array): void {
  for (let i = start; i < end; i++) {
    const g = g0 + (g1 - g0) * (i - start + 1) * inv;
    L[i] = (L[i] as number) * g;
    R[i] = (R[i] as number) * g;
    if (gainOut) gainOut[i] = g;
  }
}
