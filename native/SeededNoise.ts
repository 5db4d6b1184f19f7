/**
 * Deterministic Gaussian noise per seed: xoshiro128** seeded through splitmix32, Box–Muller.
 * Not bit-compatible with torch's generator (nothing in TS can be): the same seed gives the same
 * noise across runs and machines of *this* engine only.
 */

/** A uniform [0,1) generator with 2^128−1 period. */
export class SeededRandom {
  #s0: number;
  #s1: number;
  #s2: number;
  #s3: number;

  constructor(seed: number) {
    // splitmix32 spreads any integer seed (negatives and >2^32 folded) over the 128-bit state.
    let x = (Math.floor(seed) ^ Math.floor(seed / 2 ** 32)) >>> 0;
    const next = () => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#s0 = next();
    this.#s1 = next();
    this.#s2 = next();
    this.#s3 = next();
    if ((this.#s0 | this.#s1 | this.#s2 | this.#s3) === 0) this.#s0 = 1;
  }

  /** Next uint32. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.#s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.#s1 << 9) >>> 0;
    this.#s2 = (this.#s2 ^ this.#s0) >>> 0;
    this.#s3 = (this.#s3 ^ this.#s1) >>> 0;
    this.#s1 = (this.#s1 ^ this.#s2) >>> 0;
    this.#s0 = (this.#s0 ^ this.#s3) >>> 0;
    this.#s2 = (this.#s2 ^ t) >>> 0;
    this.#s3 = rotl(this.#s3, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** `length` standard-normal samples for `seed`; the same (seed, length) always gives the same array. */
export function gaussianNoise(seed: number, length: number): Float32Array {
  const rng = new SeededRandom(seed);
  const out = new Float32Array(length);
  for (let i = 0; i < length; i += 2) {
    // 1 − u keeps the log argument in (0, 1].
    const u1 = 1 - rng.next();
    const u2 = rng.next();
    const r = Math.sqrt(-2 * Math.log(u1));
    out[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < length) out[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
  return out;
}
