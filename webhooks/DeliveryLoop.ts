/**
 * Consumes the deliveries queue (the store's deliveries table, Store DELIVERY_QUEUE) with at
 * most `concurrency` sends in flight, one store transaction per lease-and-settle cycle: the
 * outcomes handlers hand to `settle()` in one turn of the event loop are written together with
 * the lease of the deliveries that take their slots (`webhooks.leaseDeliveries`). A busy queue
 * thus costs one commit per cycle for both, instead of a lease commit and a settle commit.
 *
 * Idle, it sleeps in `queue.waitForWork(DELIVERY_QUEUE)` (woken by new, released and requeued
 * deliveries, or after `idleWaitMs`, which is also how a retry released by another process is
 * noticed when it becomes due); deliveries this process released wake it at their time (`wakeIn`).
 * A handler that throws, or whose settle fails, leaves its delivery leased; the lease runs out
 * and the delivery is leased again (at least once), so handlers must be idempotent.
 */
import type { Logger } from 'pino';
import { DELIVERY_QUEUE } from '../store/index.ts';
import type { DeliverySettlement, LeasedDelivery, Store } from '../store/index.ts';

export interface DeliveryLoopOptions {
  store: Store;
  logger: Logger;
  /** Sends one leased delivery; must end by calling `settle()` (or throw). */
  handler: (leased: LeasedDelivery) => Promise<unknown>;
  /** Sends in flight at once. */
  concurrency: number;
  /** Lease per delivery, ms; must outlast the slowest handler (a send is cut at 10 s). */
  leaseMs: number;
  /** Longest sleep when the queue looks empty, ms. */
  idleWaitMs: number;
}

interface PendingSettle {
  item: DeliverySettlement;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class DeliveryLoop {
  readonly #o: DeliveryLoopOptions;
  readonly #inflight = new Set<Promise<void>>();
  readonly #abort = new AbortController();
  /** Leased, not started yet: a cycle leases for the slots its settled handlers are about to free. */
  readonly #ready: LeasedDelivery[] = [];
  #settling: PendingSettle[] = [];
  /** The store cycle running now (one at a time), and whether another was asked for meanwhile. */
  #cycling: Promise<void> | null = null;
  #again = false;
  /** Whether the queue may hold due deliveries (the last lease came back full, or work was signalled). */
  #maybeDue = true;
  #running: Promise<void> | null = null;
  #closing: Promise<void> | null = null;
  /** Timers of `wakeIn`, by due time in 10 ms buckets (so a burst of deferrals shares a few). */
  readonly #wakeTimers = new Map<number, NodeJS.Timeout>();

  constructor(options: DeliveryLoopOptions) {
    this.#o = options;
  }

  get inflight(): number {
    return this.#inflight.size;
  }

  /**
   * Looks for due deliveries again in `delayMs` (a handler released one to then: a rate-limit
   * slot, an order recheck), instead of at the next signal or idle wake-up: a delivery that
   * becomes due carries no signal, and a slot sent late bunches with the ones after it.
   */
  wakeIn(delayMs: number): void {
    if (this.#abort.signal.aborted) return;
    const bucket = Math.ceil((performance.now() + Math.max(0, delayMs)) / 10) * 10;
    if (this.#wakeTimers.has(bucket)) return;
    const timer = setTimeout(() => {
      this.#wakeTimers.delete(bucket);
      this.#maybeDue = true;
      this.#cycle();
    }, bucket - performance.now());
    this.#wakeTimers.set(bucket, timer);
  }

  /**
   * Queues a handler's outcome for the next cycle (this turn's outcomes share it); resolves once
   * written, rejects when the cycle's store call fails (the delivery then stays leased).
   */
  settle(item: DeliverySettlement): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#settling.push({ item, resolve, reject });
      if (this.#settling.length === 1) setImmediate(() => this.#cycle());
    });
  }

  start(): void {
    if (this.#running || this.#closing) return;
    this.#running = this.#run();
  }

  /** Idempotent: stops leasing, waits for the sends in flight and their settles. */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#abort.abort();
    for (const timer of this.#wakeTimers.values()) clearTimeout(timer);
    this.#wakeTimers.clear();
    this.#closing = (async () => {
      await this.#running;
      await Promise.allSettled([...this.#inflight]);
      while (this.#cycling) await this.#cycling;
      // Leased but never started: give them back at once, uncounted, rather than leave them to their leases.
      const left = this.#ready.splice(0);
      if (left.length > 0) {
        const back = left.map((l) => ({ deliveryId: l.delivery.id, patch: {}, job: l.job, release: { atMs: 0, counted: false } }));
        await this.#o.store.webhooks.settleDeliveries(back).catch((err: unknown) => {
          this.#o.logger.error({ err }, 'close() | could not give leased deliveries back; their leases will run out');
        });
      }
    })();
    return this.#closing;
  }

  /** The idle loop: waits for work, then asks for a cycle that leases. */
  async #run(): Promise<void> {
    const { store, logger, idleWaitMs } = this.#o;
    const signal = this.#abort.signal;
    while (!signal.aborted) {
      // Waiting starts before the lease, so a delivery queued while the lease runs still wakes us.
      const waited = store.queue.waitForWork(DELIVERY_QUEUE, idleWaitMs, signal);
      this.#maybeDue = true;
      this.#cycle();
      try {
        await waited;
      } catch (err) {
        if (signal.aborted) break;
        logger.error({ err }, 'run() | waitForWork failed');
        await new Promise((resolve) => setTimeout(resolve, idleWaitMs));
      }
    }
  }

  /** Runs a cycle now, or right after the one running. */
  #cycle(): void {
    if (this.#cycling) {
      this.#again = true;
      return;
    }
    this.#cycling = (async () => {
      try {
        do {
          this.#again = false;
          await this.#cycleOnce();
        } while (this.#again);
      } catch (err) {
        this.#o.logger.error({ err }, 'cycle() | failed');
      } finally {
        this.#cycling = null;
      }
    })();
  }

  async #cycleOnce(): Promise<void> {
    const { store, logger, concurrency, leaseMs } = this.#o;
    const batch = this.#settling;
    this.#settling = [];
    // The handlers settled here finish as soon as it commits: their slots are the free ones.
    const free = this.#abort.signal.aborted || !this.#maybeDue ? 0 : Math.max(0, concurrency - this.#inflight.size + batch.length - this.#ready.length);
    if (batch.length === 0 && free === 0) return;
    let leased: LeasedDelivery[];
    try {
      leased = await store.webhooks.leaseDeliveries(
        free,
        leaseMs,
        batch.map((b) => b.item),
      );
    } catch (err) {
      for (const b of batch) b.reject(err);
      logger.error({ err }, 'cycle() | lease-and-settle failed; leases run out and are taken again');
      // The idle loop tries again after its wait.
      this.#maybeDue = false;
      return;
    }
    for (const b of batch) b.resolve();
    if (free > 0) this.#maybeDue = leased.length === free;
    this.#ready.push(...leased);
    // Settled handlers free their slots in the next microtasks; start what fits now, the rest as they finish.
    queueMicrotask(() => this.#startReady());
  }

  #startReady(): void {
    while (this.#ready.length > 0 && this.#inflight.size < this.#o.concurrency) {
      this.#start(this.#ready.shift() as LeasedDelivery);
    }
  }

  #start(leased: LeasedDelivery): void {
    const { logger, handler } = this.#o;
    const p: Promise<void> = handler(leased)
      .then(
        () => undefined,
        (err: unknown) => {
          logger.error({ err, deliveryId: leased.delivery.id }, `run() | send failed, delivery left to its lease [deliveryId:${leased.delivery.id}]`);
        },
      )
      .finally(() => {
        this.#inflight.delete(p);
        this.#startReady();
        // A full lease means more may be due: fill this slot without waiting for a signal.
        if (this.#ready.length === 0 && this.#maybeDue && !this.#abort.signal.aborted) this.#cycle();
      });
    this.#inflight.add(p);
  }
}
