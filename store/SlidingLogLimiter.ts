import type { RateLimiter, RateLimitResult } from './Store.ts';

/**
 * Exact sliding-window limiter kept in memory, for the embedded store (one process, so memory
 * is the whole truth; limits restart empty after a restart, which only ever allows, never
 * blocks). A hit at time t counts while `now - t < windowMs`.
 */
export class SlidingLogLimiter implements RateLimiter {
  private readonly logs = new Map<string, { hits: number[]; windowMs: number }>();
  private hitsSinceSweep = 0;
  /** `reserve` keys → end of the last slot reserved (ms); dropped by the sweep once past. */
  private readonly slots = new Map<string, number>();

  constructor(private readonly now: () => number) {}

  async hit(key: string, max: number, windowMs: number): Promise<RateLimitResult> {
    const now = this.now();
    if (++this.hitsSinceSweep >= 10_000) this.sweep(now);
    let log = this.logs.get(key);
    if (!log) {
      log = { hits: [], windowMs };
      this.logs.set(key, log);
    }
    log.windowMs = windowMs;
    const hits = log.hits;
    let expired = 0;
    while (expired < hits.length && (hits[expired] as number) <= now - windowMs) expired++;
    if (expired > 0) hits.splice(0, expired);
    if (hits.length < max) {
      hits.push(now);
      return { allowed: true, remaining: max - hits.length, retryAfterMs: 0 };
    }
    // The (hits.length - max + 1)-th oldest hit must leave the window before one more fits.
    const blocker = hits[hits.length - max] ?? now;
    return { allowed: false, remaining: 0, retryAfterMs: Math.max(1, blocker + windowMs - now) };
  }

  async reserve(key: string, intervalMs: number): Promise<number> {
    const now = this.now();
    if (++this.hitsSinceSweep >= 10_000) this.sweep(now);
    const start = Math.max(now, this.slots.get(key) ?? 0);
    this.slots.set(key, start + intervalMs);
    return start;
  }

  /** Drops keys with no hit inside their window and slots already past, so idle keys do not pile up. */
  private sweep(now: number): void {
    this.hitsSinceSweep = 0;
    for (const [key, end] of this.slots) if (end <= now) this.slots.delete(key);
    for (const [key, log] of this.logs) {
      const last = log.hits[log.hits.length - 1];
      if (last === undefined || last <= now - log.windowMs) this.logs.delete(key);
    }
  }
}
