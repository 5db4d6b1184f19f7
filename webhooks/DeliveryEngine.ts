/**
 * The webhook worker: three loops over durable store queues.
 * - `events`: the dispatcher turns each event into deliveries, atomically;
 * - the deliveries queue (the deliveries table itself, DeliveryLoop): the deliverer sends,
 *   retries on schedule, finishes each delivery, one store transaction per lease-and-settle cycle;
 * - `webhooks.maintenance`: one self-rescheduling job purges delivery records past retention.
 * Everything it owes lives in the store, so a kill -9 at any point loses nothing: unsettled
 * leases are taken again when they end, and delivery ids and event ids never change.
 * Several engines (processes) may run against one store; leases keep them apart.
 */
import type { Logger } from 'pino';
import type { LeasedJob, Store } from '../store/index.ts';
import { Deliverer, DISABLE_AFTER_FAILURES } from './Deliverer.ts';
import { Dispatcher } from './Dispatcher.ts';
import { OperationalNotifier } from './OperationalNotifier.ts';
import { DeliveryLoop } from './DeliveryLoop.ts';
import { JobLoop } from './JobLoop.ts';
import type { SafeHttpClient } from '../outbound/index.ts';
import { EVENTS_QUEUE, MAINTENANCE_QUEUE } from './WebhookEvent.ts';

export const DELIVERY_ENGINE_DEFAULTS = {
  /** Sends in flight at once. */
  concurrency: 16,
  /**
   * Events fanned out at once; their fan-outs share one store transaction (Dispatcher), so up
   * to this many events cost one commit. Equal to `leaseBatch`: one lease, one fan-out write.
   */
  dispatchConcurrency: 16,
  /** Request deadline, ms (spec "Webhook response time"). */
  timeoutMs: 10_000,
  /** Job lease, ms: three times the request deadline, so a live send never loses its lease. */
  leaseMs: 30_000,
  /** Longest idle sleep, ms; also the latency with which a retry that became due is picked up. */
  idleWaitMs: 1_000,
  /**
   * Event jobs leased per store round trip (capped at the dispatch concurrency; see JobLoop
   * `batch`): one lease transaction per batch instead of per event. (The deliveries loop leases
   * exactly the slots it has free, in the transaction that settles the sends that freed them.)
   */
  leaseBatch: 16,
  /**
   * How long a `stream.ended` waiting for its `stream.started` (to be fanned out, or delivered
   * to the same endpoint) waits before looking again, ms. Only paid in that rare race.
   */
  orderRecheckMs: 250,
  /** Delivery records are kept 14 days (spec "Limits"). */
  retentionMs: 14 * 24 * 3_600_000,
  /** How often the purge job runs, ms. */
  purgeIntervalMs: 3_600_000,
} as const;

export const PURGE_JOB_ID = 'purge-deliveries';

export interface DeliveryEngineOptions {
  store: Store;
  client: SafeHttpClient;
  logger: Logger;
  /** Must be the store's clock (ms since the epoch); default Date.now. */
  now?: () => number;
  concurrency?: number;
  dispatchConcurrency?: number;
  timeoutMs?: number;
  leaseMs?: number;
  idleWaitMs?: number;
  leaseBatch?: number;
  orderRecheckMs?: number;
  retentionMs?: number;
  purgeIntervalMs?: number;
  /** Overrides RETRY_DELAYS_MS (tests). */
  retryDelaysMs?: readonly number[];
  retryJitter?: number;
  random?: () => number;
  disableAfter?: number;
  /** Entries kept in each delivery's attempts log (Deliverer ATTEMPTS_KEPT). */
  attemptsKept?: number;
  /** Operational events one endpoint may cause per type in any rolling hour (OperationalNotifier). */
  operationalEventsPerHour?: number;
}

export class DeliveryEngine {
  readonly dispatcher: Dispatcher;
  readonly deliverer: Deliverer;
  readonly #o: DeliveryEngineOptions;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #loops: JobLoop[];
  readonly #deliveries: DeliveryLoop;
  #started = false;
  #closing: Promise<void> | null = null;

  constructor(options: DeliveryEngineOptions) {
    const d = DELIVERY_ENGINE_DEFAULTS;
    this.#o = options;
    this.#now = options.now ?? Date.now;
    this.#log = options.logger;
    const timeoutMs = options.timeoutMs ?? d.timeoutMs;
    const leaseMs = options.leaseMs ?? d.leaseMs;
    const idleWaitMs = options.idleWaitMs ?? d.idleWaitMs;
    if (leaseMs <= timeoutMs) {
      throw new Error(`leaseMs (${leaseMs}) must exceed timeoutMs (${timeoutMs}) or live sends would be leased twice`);
    }
    const orderRecheckMs = options.orderRecheckMs ?? d.orderRecheckMs;
    this.dispatcher = new Dispatcher({
      store: options.store,
      logger: this.#log,
      now: this.#now,
      orderRecheckMs,
      wakeIn: (ms) => this.#loops[0]?.wakeIn(ms),
    });
    this.deliverer = new Deliverer({
      store: options.store,
      client: options.client,
      logger: this.#log,
      now: this.#now,
      timeoutMs,
      retryDelaysMs: options.retryDelaysMs,
      retryJitter: options.retryJitter,
      random: options.random,
      disableAfter: options.disableAfter ?? DISABLE_AFTER_FAILURES,
      orderRecheckMs,
      wakeIn: (ms) => this.#deliveries.wakeIn(ms),
      settle: (item) => this.#deliveries.settle(item),
      attemptsKept: options.attemptsKept,
      notifier: new OperationalNotifier({ store: options.store, logger: this.#log, maxPerHour: options.operationalEventsPerHour }),
    });
    const common = { store: options.store, logger: this.#log, leaseMs, idleWaitMs };
    this.#loops = [
      new JobLoop({
        ...common,
        queue: EVENTS_QUEUE,
        concurrency: options.dispatchConcurrency ?? d.dispatchConcurrency,
        batch: options.leaseBatch ?? d.leaseBatch,
        handler: (job) => this.dispatcher.handle(job),
      }),
      new JobLoop({
        ...common,
        queue: MAINTENANCE_QUEUE,
        concurrency: 1,
        // Purging is not urgent: look at this queue at most every 10 idle periods.
        idleWaitMs: idleWaitMs * 10,
        handler: (job) => this.#maintain(job),
      }),
    ];
    this.#deliveries = new DeliveryLoop({
      store: options.store,
      logger: this.#log,
      leaseMs,
      idleWaitMs,
      concurrency: options.concurrency ?? d.concurrency,
      handler: (leased) => this.deliverer.handle(leased),
    });
  }

  /** Schedules the purge job (once across processes: its id is fixed) and starts the loops. */
  async start(): Promise<void> {
    if (this.#started || this.#closing) return;
    this.#started = true;
    await this.#o.store.queue.enqueue({ queue: MAINTENANCE_QUEUE, id: PURGE_JOB_ID, payload: { kind: 'purge' }, runAtMs: this.#now() });
    for (const loop of this.#loops) loop.start();
    this.#deliveries.start();
    this.#log.info(`start() | webhook delivery engine running`);
  }

  /** Deletes delivery records older than the retention; returns how many. */
  async purgeNow(): Promise<number> {
    const before = new Date(this.#now() - (this.#o.retentionMs ?? DELIVERY_ENGINE_DEFAULTS.retentionMs)).toISOString();
    const n = await this.#o.store.webhooks.purgeDeliveries(before);
    if (n > 0) this.#log.info({ purged: n }, `purgeNow() | purged old deliveries [count:${n}]`);
    return n;
  }

  async #maintain(job: LeasedJob): Promise<void> {
    if (job.id !== PURGE_JOB_ID) {
      await this.#o.store.queue.ack(job);
      return;
    }
    await this.purgeNow();
    await this.#o.store.queue.retry(job, this.#now() + (this.#o.purgeIntervalMs ?? DELIVERY_ENGINE_DEFAULTS.purgeIntervalMs));
  }

  /** Idempotent: stops leasing and waits for sends in flight (at most one request deadline). */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#closing = (async () => {
      const results = await Promise.allSettled([...this.#loops, this.#deliveries].map((l) => l.close()));
      for (const r of results) if (r.status === 'rejected') this.#log.error({ err: r.reason }, 'close() | loop close failed');
      this.#log.info('close() | webhook delivery engine stopped');
    })();
    return this.#closing;
  }
}
