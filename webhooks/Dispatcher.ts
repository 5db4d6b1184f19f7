/**
 * Fans one event (a leased job in queue `events`) out to every ACTIVE endpoint of its account
 * that subscribes to its type: one delivery record per endpoint, queued as it is written (the
 * deliveries table is the deliveries queue), in one atomic store call. `createDeliveries` is idempotent on
 * (event, endpoint), so an event leased again after a crash never makes a second delivery.
 * An event that follows another (`after`: a `stream.ended` its session's `stream.started`) is
 * fanned out only once that one has been, and its deliveries carry `afterEventId`.
 * Fan-outs are written in batches: every event handled in the same turn of the event loop (the
 * job loop starts up to its concurrency at once) shares one `createDeliveries` call, its
 * deliveries and the event jobs' acks in one store transaction, so a burst of events
 * costs one commit per batch instead of one per event.
 */
import type { Logger } from 'pino';
import { newTimeOrderedId } from '../store/index.ts';
import type { LeasedJob, Store, WebhookDeliveryRecord } from '../store/index.ts';
import { EVENTS_QUEUE, parseEventJob } from './WebhookEvent.ts';

/** `dlv_` + 24 hex characters, ordered by creation time (see store `newTimeOrderedId`). */
export function newDeliveryId(): string {
  return newTimeOrderedId('dlv');
}

export interface DispatcherOptions {
  store: Store;
  logger: Logger;
  now: () => number;
  /** How long an event whose predecessor is not fanned out yet waits before looking again, ms. */
  orderRecheckMs: number;
  /** Asks the loop to look again when a deferred event is due. */
  wakeIn?: (delayMs: number) => void;
}

/** One event's fan-out waiting for the batch's store call. */
interface PendingFanOut {
  records: WebhookDeliveryRecord[];
  job: LeasedJob;
  resolve: (created: WebhookDeliveryRecord[]) => void;
  reject: (err: unknown) => void;
}

export class Dispatcher {
  readonly #o: DispatcherOptions;
  #batch: PendingFanOut[] = [];

  constructor(options: DispatcherOptions) {
    this.#o = options;
  }

  /** Returns the deliveries created (empty when none subscribe or all existed already). */
  async handle(job: LeasedJob): Promise<WebhookDeliveryRecord[]> {
    const { store, logger, now } = this.#o;
    const parsed = parseEventJob(job.payload);
    if (!parsed) {
      logger.error({ jobId: job.id }, `handle() | not a webhook event, dropped [jobId:${job.id}]`);
      await store.queue.ack(job);
      return [];
    }
    const { accountId, event, after } = parsed;
    // Fan out only after the event this one follows: its deliveries (made atomically with its
    // ack) must exist for ours to wait on them. Not counted as an attempt.
    if (after !== undefined && (await store.queue.has(EVENTS_QUEUE, after))) {
      await store.queue.defer(job, now() + this.#o.orderRecheckMs);
      this.#o.wakeIn?.(this.#o.orderRecheckMs);
      logger.debug({ eventId: event.id, after }, `handle() | waits for the event it follows [eventId:${event.id}] [after:${after}]`);
      return [];
    }
    // An operational event is never sent to the endpoint it is about (no loops).
    const about = 'endpoint_id' in event.data ? event.data.endpoint_id : null;
    const endpoints = (await store.webhooks.listEndpoints(accountId)).filter(
      (e) => e.isActive && e.events.includes(event.type) && e.id !== about,
    );
    let records: WebhookDeliveryRecord[] = [];
    const nowMs = now();
    if (endpoints.length > 0) {
      const nowIso = new Date(nowMs).toISOString();
      // The exact bytes every endpoint receives, frozen now (the record keeps them).
      const payload = JSON.stringify(event);
      records = endpoints.map(
        (e): WebhookDeliveryRecord => ({
          id: newDeliveryId(),
          endpointId: e.id,
          accountId,
          eventId: event.id,
          eventType: event.type,
          streamId: 'stream_id' in event.data ? event.data.stream_id : null,
          payload,
          status: 'pending',
          attempts: 0,
          responseStatus: null,
          responseBody: null,
          error: null,
          createdAt: nowIso,
          updatedAt: nowIso,
          lastAttemptAt: null,
          nextAttemptAt: nowIso,
          ...(after !== undefined ? { afterEventId: after } : {}),
        }),
      );
    }
    // The event's job is acked in the same transaction as its deliveries (none: just the ack).
    const created = await this.#fanOut(records, job);
    logger.debug(
      { eventId: event.id, endpoints: endpoints.length, created: created.length },
      `handle() | dispatched [eventId:${event.id}] [deliveries:${created.length}]`,
    );
    return created;
  }

  /** Queues one event's fan-out for this turn's batch; resolves with the deliveries inserted. */
  #fanOut(records: WebhookDeliveryRecord[], job: LeasedJob): Promise<WebhookDeliveryRecord[]> {
    return new Promise((resolve, reject) => {
      this.#batch.push({ records, job, resolve, reject });
      if (this.#batch.length === 1) setImmediate(() => void this.#flush());
    });
  }

  /**
   * Writes the batch in one `createDeliveries` call. If it fails, every event of the batch keeps
   * its job leased (leased again when the lease runs out; the fan-out is idempotent).
   */
  async #flush(): Promise<void> {
    const batch = this.#batch;
    this.#batch = [];
    try {
      // Each delivery is queued due at its `nextAttemptAt` (now).
      const inserted = await this.#o.store.webhooks.createDeliveries(
        batch.flatMap((b) => b.records),
        { ack: batch.map((b) => b.job) },
      );
      const ids = new Set(inserted.map((d) => d.id));
      for (const b of batch) b.resolve(b.records.filter((r) => ids.has(r.id)));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }
}
