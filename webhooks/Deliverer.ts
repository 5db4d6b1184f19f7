/**
 * Runs one attempt of one delivery (leased from the deliveries queue, Store DELIVERY_QUEUE: the
 * deliveries table itself) and moves the delivery record along (spec "Webhook delivery" states):
 * - `pending` → `succeeded` on a 2xx; the endpoint's failure count resets;
 * - `pending` → `pending` on a failure with retries left; the delivery is released for the next
 *   slot of the retry schedule (same delivery, same event id);
 * - `pending` → `failed` when the last attempt fails; the endpoint counts one failed delivery
 *   (and is disabled at 20 in a row).
 * The body is the frozen payload of the record; it is signed at send time with the endpoint's
 * CURRENT secret, so after rotate-secret no attempt, queued retries included, uses the old one.
 *
 * A delivery queued by resend or recover (`trigger` in its queue payload) makes ONE send: success →
 * `succeeded`, failure → `failed` again, with no retry schedule and no count toward the
 * endpoint's health (the delivery was counted when its schedule ran out). Every send is appended
 * to the delivery's attempts log, in the same store transaction as its outcome. Operational
 * events (a delivery exhausted, the endpoint disabled or recovered) go out through
 * OperationalNotifier.
 *
 * Before sending, two rules may hold a delivery back, unsent and without spending an attempt
 * (released uncounted), so the send slot goes to the next delivery at once; they hold for every send,
 * scheduled or manual:
 * - order: a delivery with `afterEventId` (a `stream.ended`) waits while that event's delivery
 *   to the same endpoint (its `stream.started`) is still pending;
 * - rate: an endpoint with `rateLimit` gets one send slot every 1/rateLimit s from the store
 *   (`rateLimits.reserve`, shared by every worker); a delivery whose slot is in the future
 *   waits for it, holding it (the queue payload records the slot for that lease).
 * Outcomes go to `settle` (DeliveryLoop.settle): every attempt finishing in the same turn of the
 * event loop shares one store transaction with the lease of the deliveries that follow.
 */
import type { Logger } from 'pino';
import type { AttemptTrigger, DeliverySettlement, LeasedDelivery, LeasedJob, Store, WebhookDeliveryRecord } from '../store/index.ts';
import { deliveryExhaustedEvent, endpointDisabledEvent, endpointRecoveredEvent } from './OperationalEvent.ts';
import type { OperationalNotifier } from './OperationalNotifier.ts';
import { nextRetryDelayMs } from './RetrySchedule.ts';
import { SafeHttpError } from '../outbound/index.ts';
import type { SafeHttpClient } from '../outbound/index.ts';
import { signedHeaders } from './Signature.ts';

/** Response body bytes kept on the delivery record (most recent attempt only). */
export const RESPONSE_BODY_LIMIT = 4096;
/** Consecutive failed deliveries that disable an endpoint (spec "Limits"). */
export const DISABLE_AFTER_FAILURES = 20;
/** Response body bytes kept per entry of the attempts log (the first 1 KiB). */
export const ATTEMPT_BODY_LIMIT = 1024;
/**
 * Sends kept in one delivery's attempts log, newest kept: the 8 of the schedule plus 12 resends
 * or recovers; older entries are dropped (the record's `attempts` still counts every send).
 */
export const ATTEMPTS_KEPT = 20;

export interface AttemptResult {
  ok: boolean;
  /** HTTP status, or null when no response came (timeout, connection, blocked address). */
  status: number | null;
  /** Up to 4 KiB of the response body as UTF-8, or null without a response. */
  body: string | null;
  /** Why the attempt failed (`http_status: 500`, `redirect: 308 not followed`, `timeout: …`), or null. */
  error: string | null;
  roundTripMs: number;
}

export interface SignedPost {
  url: string;
  secret: string;
  eventId: string;
  eventType: string;
  payload: string;
  nowMs: number;
  timeoutMs: number;
  maxResponseBytes?: number;
}

/** POSTs a signed payload through the safe client; never throws. */
export async function postSigned(client: SafeHttpClient, post: SignedPost): Promise<AttemptResult> {
  const started = performance.now();
  const headers = signedHeaders(post);
  try {
    const res = await client.request(post.url, {
      method: 'POST',
      headers,
      body: post.payload,
      timeoutMs: post.timeoutMs,
      maxResponseBytes: post.maxResponseBytes ?? RESPONSE_BODY_LIMIT,
    });
    const ok = res.status >= 200 && res.status < 300;
    // Spec rule 3: redirects are not followed; a 3xx is a failure like any non-2xx.
    const error = ok
      ? null
      : res.status >= 300 && res.status < 400
        ? `redirect: ${res.status} not followed`
        : `http_status: ${res.status}`;
    return { ok, status: res.status, body: res.body.toString('utf8'), error, roundTripMs: res.roundTripMs };
  } catch (err) {
    const error = err instanceof SafeHttpError ? `${err.kind}: ${err.message}` : `internal: ${(err as Error).message}`;
    return { ok: false, status: null, body: null, error, roundTripMs: performance.now() - started };
  }
}

export interface DelivererOptions {
  store: Store;
  client: SafeHttpClient;
  logger: Logger;
  /** Same clock as the store's (ms since the epoch). */
  now: () => number;
  /** Per attempt, ms; default 10 000 (spec). */
  timeoutMs?: number;
  retryDelaysMs?: readonly number[];
  retryJitter?: number;
  random?: () => number;
  /** Default 20. */
  disableAfter?: number;
  /** How long a delivery waiting for its predecessor waits before looking again, ms; default 250. */
  orderRecheckMs?: number;
  /** Asks the loop to look again when a held-back delivery is due (DeliveryLoop.wakeIn). */
  wakeIn?: (delayMs: number) => void;
  /** Entries kept in each delivery's attempts log; default ATTEMPTS_KEPT (20). */
  attemptsKept?: number;
  /** Where operational events go; none are sent without it. */
  notifier?: OperationalNotifier;
  /** Writes an outcome (DeliveryLoop.settle); default: `webhooks.settleDeliveries` alone. */
  settle?: (item: DeliverySettlement) => Promise<void>;
}

/**
 * The queue payload of a delivery (null when fresh from the fan-out); never the secret or body.
 * `slotLease`: set when the delivery was held back to a rate-limit slot it reserved; the lease
 * number (`LeasedJob.attempts`, which holding back does not count) that may use it.
 */
export interface DeliverJobPayload {
  deliveryId: string;
  slotLease?: number;
  /** Absent on scheduled sends; `resend` or `recover` for a manual one-send job. */
  trigger?: Exclude<AttemptTrigger, 'scheduled'>;
}

/** The first `limit` bytes of `body` as UTF-8 (a character cut in two becomes U+FFFD). */
function headBytes(body: string | null, limit: number): string | null {
  if (body === null) return null;
  const bytes = Buffer.from(body, 'utf8');
  return bytes.length <= limit ? body : bytes.subarray(0, limit).toString('utf8');
}

/** The store key of an endpoint's send schedule (`rateLimits.reserve`). */
export function rateKey(endpointId: string): string {
  return `webhooks.endpoint:${endpointId}`;
}

type DeliveryPatch = DeliverySettlement['patch'];

export class Deliverer {
  readonly #o: DelivererOptions;
  readonly #log: Logger;

  constructor(options: DelivererOptions) {
    this.#o = options;
    this.#log = options.logger;
  }

  async handle(leased: LeasedDelivery): Promise<void> {
    const { store, now } = this.#o;
    const { delivery, job } = leased;
    const payload = job.payload as Partial<DeliverJobPayload> | null;
    const deliveryId = delivery.id;
    const trigger: AttemptTrigger = payload?.trigger === 'resend' || payload?.trigger === 'recover' ? payload.trigger : 'scheduled';
    // Not pending: a crash came after the final update but before the queue let go of it; never
    // send again (an empty settle takes it out of the queue).
    if (delivery.status !== 'pending') {
      await this.#settle(delivery, job, {});
      return;
    }
    const endpoint = await store.webhooks.getEndpoint(delivery.endpointId);
    if (!endpoint) {
      await this.#settle(delivery, job, {});
      return;
    }
    if (!endpoint.isActive) {
      // A disabled endpoint "stops receiving events": its queued retries end here, unsent.
      await this.#settle(delivery, job, { status: 'failed', error: 'endpoint_disabled: not sent', nextAttemptAt: null });
      return;
    }

    // A deferred job keeps its trigger: a manual send stays one send when its turn comes.
    const manual = trigger === 'scheduled' ? {} : { trigger };
    // Order: wait while the event this one follows is still being delivered to this endpoint
    // (none: that endpoint never got it, or its record is gone; then nothing to wait for).
    if (delivery.afterEventId) {
      const first = await store.webhooks.findDelivery(delivery.afterEventId, endpoint.id);
      if (first && first.status === 'pending') {
        const due = first.nextAttemptAt === null ? 0 : Date.parse(first.nextAttemptAt);
        const atMs = Math.max(now(), due) + (this.#o.orderRecheckMs ?? 250);
        this.#log.debug({ deliveryId, after: first.id }, `handle() | waits for [deliveryId:${first.id}] [deliveryId:${deliveryId}]`);
        await this.#defer(delivery, job, atMs, { deliveryId, ...manual });
        return;
      }
    }

    // Rate: one send per slot; a slot in the future is held by deferring to it.
    const rate = endpoint.rateLimit ?? null;
    if (rate !== null && rate > 0 && payload?.slotLease !== job.attempts) {
      const slotMs = await store.rateLimits.reserve(rateKey(endpoint.id), 1000 / rate);
      if (slotMs > now()) {
        await this.#defer(delivery, job, slotMs, { deliveryId, ...manual, slotLease: job.attempts });
        return;
      }
    }

    // The job is leased once per send and keeps its lease count across retries, so a send cut
    // short by a crash is still counted (without a store write before every send).
    const attempt = Math.max(delivery.attempts + 1, job.attempts);
    const startedMs = now();
    const result = await postSigned(this.#o.client, {
      url: endpoint.url,
      secret: endpoint.secret,
      eventId: delivery.eventId,
      eventType: delivery.eventType,
      payload: delivery.payload,
      nowMs: startedMs,
      timeoutMs: this.#o.timeoutMs ?? 10_000,
    });
    const doneMs = now();
    // Written with the record update below, in the same store transaction.
    const log = {
      attempt: {
        deliveryId,
        attempt,
        trigger,
        startedAt: new Date(startedMs).toISOString(),
        durationMs: Math.round(result.roundTripMs * 10) / 10,
        responseStatus: result.status,
        responseBody: headBytes(result.body, ATTEMPT_BODY_LIMIT),
        error: result.error,
      },
      keep: this.#o.attemptsKept ?? ATTEMPTS_KEPT,
    };
    const base = {
      attempts: attempt,
      responseStatus: result.status,
      responseBody: result.body,
      error: result.error,
      lastAttemptAt: new Date(startedMs).toISOString(),
    };

    if (result.ok) {
      await this.#settle(delivery, job, { ...base, status: 'succeeded', nextAttemptAt: null }, undefined, log);
      // Resetting a count that is already 0 is a write we can skip (the common case).
      if (endpoint.consecutiveFailures !== 0) {
        await store.webhooks.recordOutcome(endpoint.id, true, this.#o.disableAfter ?? DISABLE_AFTER_FAILURES);
        await this.#o.notifier?.emit(endpoint.accountId, endpointRecoveredEvent(endpoint, deliveryId, attempt, doneMs));
      }
      this.#log.debug({ deliveryId, attempt }, `handle() | delivered [deliveryId:${deliveryId}] [attempt:${attempt}]`);
      return;
    }

    if (trigger !== 'scheduled') {
      // A manual send has no schedule and was counted toward health already: it just ends.
      await this.#settle(delivery, job, { ...base, status: 'failed', nextAttemptAt: null }, undefined, log);
      this.#log.info({ deliveryId, attempt, trigger, error: result.error }, `handle() | manual send failed [deliveryId:${deliveryId}] [trigger:${trigger}]`);
      return;
    }

    const delay = nextRetryDelayMs(attempt, {
      ...(this.#o.retryDelaysMs !== undefined ? { delaysMs: this.#o.retryDelaysMs } : {}),
      ...(this.#o.retryJitter !== undefined ? { jitter: this.#o.retryJitter } : {}),
      ...(this.#o.random !== undefined ? { random: this.#o.random } : {}),
    });
    if (delay !== null) {
      const runAtMs = doneMs + delay;
      await this.#settle(delivery, job, { ...base, nextAttemptAt: new Date(runAtMs).toISOString() }, { atMs: runAtMs, counted: true }, log);
      this.#log.info(
        { deliveryId, attempt, error: result.error, delayMs: delay },
        `handle() | attempt failed, retrying [deliveryId:${deliveryId}] [attempt:${attempt}]`,
      );
      return;
    }

    const disableAt = this.#o.disableAfter ?? DISABLE_AFTER_FAILURES;
    // Emitted before the record is final, so a worker killed in between emits again on the
    // next lease (same derived event id: dispatched once). Deliveries of operational events
    // never cause one: two failing endpoints must not feed each other.
    if (!delivery.eventType.startsWith('webhook.')) {
      const final: WebhookDeliveryRecord = { ...delivery, ...base, status: 'failed', nextAttemptAt: null };
      await this.#o.notifier?.emit(endpoint.accountId, deliveryExhaustedEvent(final, doneMs));
    }
    await this.#settle(delivery, job, { ...base, status: 'failed', nextAttemptAt: null }, undefined, log);
    const ep = await store.webhooks.recordOutcome(endpoint.id, false, disableAt);
    // Only the outcome that reached the threshold sees the count equal to it: one event per episode.
    if (ep && !ep.isActive && ep.consecutiveFailures === disableAt) {
      await this.#o.notifier?.emit(ep.accountId, endpointDisabledEvent(ep, deliveryId, doneMs));
    }
    this.#log.warn(
      { deliveryId, endpointId: endpoint.id, error: result.error, disabled: ep !== null && !ep.isActive },
      `handle() | delivery failed for good [deliveryId:${deliveryId}] [endpointId:${endpoint.id}]`,
    );
  }

  /** Holds the delivery back, unsent and uncounted, until `atMs` (shown as its next attempt). */
  async #defer(delivery: WebhookDeliveryRecord, job: LeasedJob, atMs: number, payload: DeliverJobPayload): Promise<void> {
    this.#o.wakeIn?.(atMs - this.#o.now());
    await this.#settle(delivery, job, { nextAttemptAt: new Date(atMs).toISOString() }, { atMs, counted: false, payload });
  }

  /**
   * Patches the record (appending `log`, a send's attempts-log entry, in the same transaction)
   * and acks (no `release`) or releases the job, batched with every other outcome of this turn
   * of the event loop into one `settleDeliveries` call. Rejects when that call fails (the job
   * then stays leased and is leased again when its lease runs out).
   */
  #settle(
    delivery: WebhookDeliveryRecord,
    job: LeasedJob,
    patch: DeliveryPatch,
    release?: DeliverySettlement['release'],
    log?: DeliverySettlement['log'],
  ): Promise<void> {
    const item: DeliverySettlement = {
      deliveryId: delivery.id,
      patch: Object.keys(patch).length === 0 ? {} : { ...patch, updatedAt: new Date(this.#o.now()).toISOString() },
      job,
      ...(release !== undefined ? { release } : {}),
      ...(log !== undefined ? { log } : {}),
    };
    return this.#o.settle ? this.#o.settle(item) : this.#o.store.webhooks.settleDeliveries([item]);
  }
}
