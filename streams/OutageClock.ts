/**
 * Tells silence from an outage. A sweep that decides something is dead because it has not been
 * heard from (a media node's heartbeat, a stream's `live` signal) must not count time during which
 * the store could not carry the signal. With Redis, an outage does not make reads fail: ioredis
 * holds commands in its offline queue and completes them after reconnecting, when every heartbeat
 * and signal looks old (and a node's queued beat carries the time it was issued, not when it
 * landed). So a read that took longer than `slowMs`, or one that failed, restarts the clock:
 * silence counts only from the end of the last outage.
 */
export class OutageClock {
  readonly #slowMs: number;
  readonly #now: () => number;
  /** Since when reads have been prompt without a gap. */
  #since: number;

  constructor(opts: { slowMs: number; now: () => number }) {
    this.#slowMs = opts.slowMs;
    this.#now = opts.now;
    this.#since = opts.now();
  }

  /** Runs a store read, restarting the clock when it fails or is slow. */
  async read<T>(read: () => Promise<T>): Promise<T> {
    const started = this.#now();
    try {
      const value = await read();
      const done = this.#now();
      if (done - started > this.#slowMs) this.#since = done;
      return value;
    } catch (err) {
      this.#since = this.#now();
      throw err;
    }
  }

  /** The clock restarts now (a process that just started knows nothing of the time before). */
  restart(): void {
    this.#since = this.#now();
  }

  /** ms since the end of the last outage (or since start). */
  healthyFor(): number {
    return this.#now() - this.#since;
  }

  /** When the last outage ended: silence before this does not count. */
  get since(): number {
    return this.#since;
  }
}
