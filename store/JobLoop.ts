/**
 * Consumes one store queue with at most `concurrency` jobs in flight. Leases until the queue is
 * empty, then sleeps in `queue.waitForWork` (woken by enqueues and retries, or after
 * `idleWaitMs`, which is also how delayed jobs that just became due are noticed). A handler
 * that throws leaves its job leased; the lease runs out and the job is leased again (at least
 * once), so handlers must be idempotent.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { LeasedJob, Store } from './Store.ts';

export interface JobLoopOptions {
  store: Store;
  queue: string;
  logger: Logger;
  handler: (job: LeasedJob) => Promise<unknown>;
  /** Jobs handled at once. */
  concurrency: number;
  /** Lease per job, ms; must outlast the slowest handler (a send is cut at 10 s). */
  leaseMs: number;
  /** Longest sleep when the queue looks empty, ms. */
  idleWaitMs: number;
  /**
   * Jobs leased per store round trip (default 1). Above 1 the loop leases up to `batch` due jobs
   * at once with `queue.leaseMany` and starts them as handler slots free up, so a busy queue
   * costs one lease transaction per batch, not per job. A job may then wait, leased, for one
   * round of handlers before it starts: keep `leaseMs` above twice the slowest handler (`batch`
   * is capped at `concurrency`). Jobs still waiting at `close()` are given back uncounted.
   */
  batch?: number;
}

export class JobLoop {
  readonly #o: JobLoopOptions;
  readonly #inflight = new Set<Promise<void>>();
  readonly #abort = new AbortController();
  #running: Promise<void> | null = null;
  #closing: Promise<void> | null = null;
  /** Leased in the last batch, not started yet (at most `batch`; see JobLoopOptions.batch). */
  readonly #ready: LeasedJob[] = [];
  /** performance.now() by which the idle loop must look again (see `wakeIn`); Infinity: none. */
  #wakeAt = Number.POSITIVE_INFINITY;

  constructor(options: JobLoopOptions) {
    this.#o = options;
  }

  get inflight(): number {
    return this.#inflight.size;
  }

  /**
   * Makes the idle loop look for due jobs again within `delayMs` (a handler deferred a job to
   * then), instead of after up to `idleWaitMs`: delayed jobs carry no notification when they
   * become due. The deferral's own notify wakes a sleeping loop, which then sleeps only this long.
   */
  wakeIn(delayMs: number): void {
    this.#wakeAt = Math.min(this.#wakeAt, performance.now() + Math.max(0, delayMs));
  }

  start(): void {
    if (this.#running || this.#closing) return;
    this.#running = this.#run();
  }

  /** Idempotent: stops leasing, waits for the jobs in flight to finish. */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#abort.abort();
    this.#closing = (async () => {
      await this.#running;
      await Promise.allSettled([...this.#inflight]);
    })();
    return this.#closing;
  }

  async #run(): Promise<void> {
    const { store, queue, logger, concurrency, leaseMs, idleWaitMs } = this.#o;
    const batch = Math.max(1, Math.min(this.#o.batch ?? 1, concurrency));
    const signal = this.#abort.signal;
    while (!signal.aborted) {
      if (this.#inflight.size >= concurrency) {
        await Promise.race(this.#inflight);
        continue;
      }
      const next = this.#ready.shift();
      if (next) {
        this.#start(next);
        continue;
      }
      let jobs: LeasedJob[];
      try {
        if (batch > 1) jobs = await store.queue.leaseMany(queue, batch, leaseMs);
        else {
          const job = await store.queue.lease(queue, leaseMs);
          jobs = job ? [job] : [];
        }
      } catch (err) {
        logger.error({ err, queue }, `run() | lease failed [queue:${queue}]`);
        await sleep(idleWaitMs, undefined, { signal }).catch(() => undefined);
        continue;
      }
      if (jobs.length === 0) {
        const now = performance.now();
        if (this.#wakeAt <= now) this.#wakeAt = Number.POSITIVE_INFINITY;
        const waitMs = Math.min(idleWaitMs, this.#wakeAt - now);
        try {
          await store.queue.waitForWork(queue, waitMs, signal);
        } catch (err) {
          if (!signal.aborted) {
            logger.error({ err, queue }, `run() | waitForWork failed [queue:${queue}]`);
            await sleep(idleWaitMs, undefined, { signal }).catch(() => undefined);
          }
        }
        continue;
      }
      this.#ready.push(...jobs);
    }
    // Leased but never started: give them back at once, uncounted, rather than leave them to
    // their leases.
    const left = this.#ready.splice(0);
    await Promise.allSettled(left.map((job) => store.queue.defer(job, 0)));
  }

  #start(leased: LeasedJob): void {
    const { queue, logger } = this.#o;
    const p: Promise<void> = this.#o
      .handler(leased)
      .then(
        () => undefined,
        (err: unknown) => {
          logger.error({ err, queue, jobId: leased.id }, `run() | handler failed, job left to its lease [jobId:${leased.id}]`);
        },
      )
      .finally(() => this.#inflight.delete(p));
    this.#inflight.add(p);
  }
}
