/**
 * Rolling per-stage timings and rates for the status endpoint and /metrics: the last `size`
 * samples of a stage's latency (ms), and event times for an fps over the last second. Every
 * sample also goes into a cumulative histogram (seconds) that /metrics exposes as a Prometheus
 * histogram: the window answers "how is it now", the histogram lets Prometheus compute any
 * quantile over any range and across streams.
 */

/** Upper bounds of the cumulative histogram, seconds: 0.5 ms … 1 s (33 ms is a frame at 30 fps). */
export const STAGE_BUCKETS_S: readonly number[] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.25, 0.5, 1];

/** A stage's histogram since the timer was made: per-bucket counts (the last is +Inf), sum in seconds. */
export interface StageTotals {
  /** Samples per bucket of STAGE_BUCKETS_S plus one for +Inf; not cumulative. */
  buckets: readonly number[];
  sumS: number;
  count: number;
}

/** A stage's latency over the rolling window, ms. */
export interface StageStats {
  p50: number;
  p95: number;
  last: number;
}

export class StageTimer {
  readonly #samples: number[] = [];
  readonly #size: number;
  readonly #buckets = new Array<number>(STAGE_BUCKETS_S.length + 1).fill(0);
  #sumS = 0;
  count = 0;

  constructor(size = 300) {
    this.#size = size;
  }

  add(ms: number): void {
    this.count++;
    const sec = ms / 1000;
    this.#sumS += sec;
    let i = 0;
    while (i < STAGE_BUCKETS_S.length && sec > (STAGE_BUCKETS_S[i] as number)) i++;
    this.#buckets[i] = (this.#buckets[i] as number) + 1;
    this.#samples.push(ms);
    if (this.#samples.length > this.#size) this.#samples.shift();
  }

  /** p50/p95 over the window, ms; undefined before the first sample. */
  summary(): StageStats | undefined {
    if (this.#samples.length === 0) return undefined;
    const sorted = [...this.#samples].sort((a, b) => a - b);
    const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * (sorted.length - 1)))] as number;
    return { p50: at(0.5), p95: at(0.95), last: this.#samples[this.#samples.length - 1] as number };
  }

  samples(): readonly number[] {
    return this.#samples;
  }

  totals(): StageTotals {
    return { buckets: [...this.#buckets], sumS: this.#sumS, count: this.count };
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
