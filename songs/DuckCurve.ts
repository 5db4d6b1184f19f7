/**
 * Side-chain gain curve from kick positions: at each kick a dip of `depth` recovering over
 * `rel` samples (the lowest dip wins where they overlap). Computed block by block on demand, so
 * a progressive render only pays for (and touches the memory of) the spans it mixes so far.
 */
import type { Score } from './Composer.ts';

/** Samples per lazily computed block. */
const BLOCK = 8192;
/** Dip at the kick, as a fraction of full gain. */
const DEPTH = 0.55;

export class DuckCurve {
  /** The gain per sample; final over every span passed to ensure(). */
  readonly g: Float32Array;
  readonly #done: Uint8Array;
  readonly #starts: number[];
  readonly #rel: number;
  readonly #len: number;

  /**
   * `loopLen`: a loop's length (its kicks also duck the folded tail), else null. `buffer`: where
   * to keep g (≥ len samples, any content: every block is written before it is read), else fresh.
   */
  constructor(score: Score, len: number, loopLen: number | null, buffer?: Float32Array) {
    this.g = buffer ? buffer.subarray(0, len) : new Float32Array(len);
    this.#len = len;
    this.#done = new Uint8Array(Math.ceil(len / BLOCK));
    this.#rel = Math.round(score.samplesPerBeat * 0.6);
    const starts = loopLen === null ? [...score.kicks] : [...score.kicks, ...score.kicks.map((k) => k + loopLen)];
    this.#starts = starts.sort((a, b) => a - b);
  }

  /** Makes g final over [lo, hi). */
  ensure(lo: number, hi: number): void {
    if (hi <= lo) return;
    const last = Math.min(this.#done.length - 1, Math.floor((hi - 1) / BLOCK));
    for (let b = Math.floor(lo / BLOCK); b <= last; b++) {
      if (this.#done[b] === 1) continue;
      this.#block(b * BLOCK, Math.min(this.#len, (b + 1) * BLOCK));
      this.#done[b] = 1;
    }
  }

  #block(b0: number, b1: number): void {
    const g = this.g;
    const rel = this.#rel;
    const starts = this.#starts;
    g.fill(1, b0, b1);
    // First kick whose dip reaches b0 (binary search on the sorted starts).
    let lo = 0;
    let hi = starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((starts[mid] as number) + rel <= b0) lo = mid + 1;
      else hi = mid;
    }
    for (let j = lo; j < starts.length; j++) {
      const k = starts[j] as number;
      if (k >= b1) break;
      dip(g, k, Math.max(b0, k), Math.min(b1, k + rel), rel);
    }
  }
}

/** Same values as the whole-curve loop: v = 1 − depth·(1 − x)², x = (idx − k) / rel, keeping the lowest. */
function dip(g: Float32Array, k: number, from: number, to: number, rel: number): void {
  for (let idx = from; idx < to; idx++) {
    const x = (idx - k) / rel;
    const v = 1 - DEPTH * (1 - x) * (1 - x);
    if (v < (g[idx] as number)) g[idx] = v;
  }
}
