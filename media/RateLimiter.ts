/**
 * Per-key request limits for the WHIP/WHEP endpoints (per client address, per playback id), in
 * memory on the node that receives the requests. A sliding-window counter: this window's count
 * plus the previous window's weighted by how much of it still overlaps — O(1) per hit and two
 * numbers per key, so a flood of distinct addresses costs bounded memory (`maxKeys`, oldest key
 * evicted first).
 */
export interface RateLimit {
  /** Requests allowed per window. */
  max: number;
  /** Window, ms. */
  windowMs: number;
}

export interface RateDecision {
  allowed: boolean;
  /** ms until a request would be allowed again (0 when allowed). */
  retryAfterMs: number;
}

interface Counter {
  window: number;
  current: number;
  previous: number;
}

export class RateLimiter {
  readonly #limit: RateLimit;
  readonly #maxKeys: number;
  readonly #now: () => number;
  readonly #keys = new Map<string, Counter>();

  constructor(limit: RateLimit, opts: { maxKeys?: number; now?: () => number } = {}) {
    this.#limit = limit;
    this.#maxKeys = opts.maxKeys ?? 10_000;
    this.#now = opts.now ?? Date.now;
  }

  /** Counts one request for `key` if it is allowed. */
  hit(key: string): RateDecision {
    const { max, windowMs } = this.#limit;
    const now = this.#now();
    const window = Math.floor(now / windowMs);
    let c = this.#keys.get(key);
    if (c) {
      this.#keys.delete(key); // re-inserted below: the map's order is least recently used first
      if (c.window !== window) c = { window, current: 0, previous: c.window === window - 1 ? c.current : 0 };
    } else {
      c = { window, current: 0, previous: 0 };
    }
    this.#keys.set(key, c);
    if (this.#keys.size > this.#maxKeys) this.#keys.delete(this.#keys.keys().next().value as string);
    const overlap = 1 - (now - window * windowMs) / windowMs;
    const estimate = c.previous * overlap + c.current;
    if (estimate + 1 > max) return { allowed: false, retryAfterMs: Math.max(1, this.#wait(c, now, window)) };
    c.current++;
    return { allowed: true, retryAfterMs: 0 };
  }

  /**
   * ms until one more request of a refused key is allowed: the first moment its estimate has
   * room, not merely the end of this window (a full window counts, weighted, into the next one).
   */
  #wait(c: Counter, now: number, window: number): number {
    const { max, windowMs } = this.#limit;
    const end = (window + 1) * windowMs;
    if (c.current + 1 <= max) {
      // Only the previous window's share is in the way; it decays linearly to 0 at `end`.
      const need = c.previous * (1 - (now - window * windowMs) / windowMs) + c.current + 1 - max;
      return Math.min(end - now, Math.ceil((need / c.previous) * windowMs));
    }
    // This window is full: from `end` it is the previous one, and room comes once its share is ≤ max - 1.
    return end - now + Math.ceil((Math.max(0, c.current - (max - 1)) * windowMs) / c.current);
  }

    get size(): number {
    return this.#keys.size;
  }
}
