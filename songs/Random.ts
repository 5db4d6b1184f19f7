/**
 * Seeded pseudo-random numbers for composition and synthesis. sfc32 (Chris Doty-Humphrey's
 * "small fast chaotic" generator, public domain) seeded through splitmix32, so that the same
 * seed gives the same song on every machine and Node version: only 32-bit integer arithmetic
 * is used, never Math.random().
 */

/** splitmix32 step: a well-mixed 32-bit hash of `x`, used to spread seeds and labels. */
function mix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** FNV-1a of a label, so streams can be named (`rng.fork('drums')`). */
function hashLabel(label: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) {
    h ^= label.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export class Random {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  /** The 32-bit seed this stream was built from (forks derive theirs from it). */
  readonly seed: number;

  constructor(seed: number) {
    this.seed = seed >>> 0;
    this.a = mix32(this.seed);
    this.b = mix32(this.a ^ 0x6a09e667);
    this.c = mix32(this.b ^ 0xbb67ae85);
    this.d = 1;
    // sfc32 needs a few rounds before its output is well mixed.
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** A 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.u32() / 4294967296;
  }

  /** Uniform in [lo, hi). */
  range(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick() | empty list');
    return items[this.int(items.length)] as T;
  }

  /** Picks by non-negative weights (same length as items). */
  weighted<T>(items: readonly T[], weights: readonly number[]): T {
    let total = 0;
    for (const w of weights) total += w;
    let r = this.next() * total;
    for (let i = 0; i < items.length; i++) {
      r -= weights[i] ?? 0;
      if (r < 0) return items[i] as T;
    }
    return items[items.length - 1] as T;
  }

  /**
   * An independent stream named by `label`: the parts of a song (drums, bass, melody…) each fork
   * their own, so adding a random call in one part never changes another part.
   */
  fork(label: string | number): Random {
    const h = typeof label === 'number' ? mix32(label >>> 0) : hashLabel(label);
    return new Random(mix32(this.seed ^ h) ^ Math.imul(h, 0x27d4eb2d));
  }
}
