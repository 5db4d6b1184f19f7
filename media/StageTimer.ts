/**
 * Rolling per-stage timings and rates for the status endpoint and /metrics: the last `size`
 * samples of a stage's latency (ms), and event times for an fps over the last second.
 */
export class StageTimer {
  readonly #samples: number[] = [];
  readonly #size: number;
  count = 0;

  constructor(size = 300) {
    this.#size = size;
  }

  add(ms: number): void {
    this.count++;
    this.#samples.push(ms);
    if (this.#samples.length > this.#size) this.#samples.shift();
  }

  /** p50/p95 over the window, ms; undefined before the first sample. */
  summary(): { p50: number; p95: number; last: number } | undefined {
    if (this.#samples.length === 0) return undefined;
    const sorted = [...this.#samples].sort((a, b) => a - b);
    const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * (sorted.length - 1)))] as number;
    return { p50: at(0.5), p95: at(0.95), last: this.#samples[this.#samples.length - 1] as number };
  }

  samples(): readonly number[] {
    return this.#samples;
  }
}

/** Events per second over the trailing second. */
export class RateMeter {
  readonly #times: number[] = [];
  count = 0;
  lastAtMs: number | undefined;

  mark(now = performance.now()): void {
    this.count++;
    this.lastAtMs = Date.now();
    this.#times.push(now);
    while (this.#times.length > 0 && (this.#times[0] as number) < now - 1000) this.#times.shift();
  }

  fps(now = performance.now()): number {
    while (this.#times.length > 0 && (this.#times[0] as number) < now - 1000) this.#times.shift();
    return this.#times.length;
  }
}
