/**
 * Runs one attempt of one delivery (a leased job in queue `webhooks.deliver`) and moves the
 * delivery record along (spec "Webhook delivery" states):
 * - `pending` → `succeeded` on a 2xx; the endpoint's failure count resets;
 * - `pending` → `pending` on a failure with retries left; the job is released for the next
 *   slot of the retry schedule (same job, same delivery, same event id);
 * - `pending` → `failed` when the last attempt fails; the endpoint counts one failed delivery
 *   (and is disabled at 20 in a row).
 * The body is the frozen payload of the record; it is signed at send time with the endpoint's
 * CURRENT secret, so after rotate-secret no attempt, queued retries included, uses the old one.
 *
 * A job queued by resend or recover (`trigger` in its payload) makes ONE send: success →
 * `succeeded`, failure → `failed` again, with no retry schedule and no count toward the
 * endpoint's health (the delivery was counted when its schedule ran out). Every send is appended
 * to the delivery's attempts log. Operational events (a delivery exhausted, the endpoint
 * disabled or recovered) go out through OperationalNotifier.
 */
import type { Logger } from 'pino';
import type { AttemptTrigger, LeasedJob, Store, WebhookAttemptRecord, WebhookDeliveryRecord } from '../store/index.ts';
import { deliveryExhaustedEvent, endpointDisabledEvent, endpointRecoveredEvent } from './OperationalEvent.ts';
import type { OperationalNotifier } from './OperationalNotifier.ts';
import { nextRetryDelayMs } from './RetrySchedule.ts';
import { SafeHttpError } from './SafeHttpClient.ts';
import type { SafeHttpClient } from './SafeHttpClient.ts';
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
  /** Entries kept in each delivery's attempts log; default ATTEMPTS_KEPT (20). */
  attemptsKept?: number;
  /** Where operational events go; none are sent without it. */
  notifier?: OperationalNotifier;
}

/** Payload of a job in queue `webhooks.deliver`: only the id, never the secret or the body. */
export interface DeliverJobPayload {
  deliveryId: string;
  /** Absent on scheduled sends; `resend` or `recover` for a manual one-send job. */
  trigger?: Exclude<AttemptTrigger, 'scheduled'>;
}

/** The first `limit` bytes of `body` as UTF-8 (a character cut in two becomes U+FFFD). */
function headBytes(body: string | null, limit: number): string | null {
  if (body === null) return null;
  const bytes = Buffer.from(body, 'utf8');
  return bytes.length <= limit ? body : bytes.subarray(0, limit).toString('utf8');
}

export class Deliverer {
  readonly #o: DelivererOptions;
  readonly #log: Logger;

  constructor(options: DelivererOptions) {
    this.#o = options;
    this.#log = options.logger;
  }

  async handle(job: LeasedJob): Promise<void> {
    const { store, now } = this.#o;
    const payload = job.payload as Partial<DeliverJobPayload> | null;
    const deliveryId = payload?.deliveryId;
    const trigger: AttemptTrigger = payload?.trigger === 'resend' || payload?.trigger === 'recover' ? payload.trigger : 'scheduled';
    if (typeof deliveryId !== 'string') {
      this.#log.error({ jobId: job.id }, `handle() | malformed deliver job, dropped [jobId:${job.id}]`);
      await store.queue.ack(job);
      return;
    }
    const delivery = await store.webhooks.getDelivery(deliveryId);
    // Missing: its endpoint was deleted with its log. Not pending: a crash came after the final
    // update but before the ack; never send again.
    if (!delivery || delivery.status !== 'pending') {
      await store.queue.ack(job);
      return;
    }
    const endpoint = await store.webhooks.getEndpoint(delivery.endpointId);
    if (!endpoint) {
      await store.queue.ack(job);
      return;
    }
    if (!endpoint.isActive) {
      // A disabled endpoint "stops receiving events": its queued retries end here, unsent.
      await this.#update(delivery, { status: 'failed', error: 'endpoint_disabled: not sent', nextAttemptAt: null });
      await store.queue.ack(job);
      return;
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
      await this.#update(delivery, { ...base, status: 'succeeded', nextAttemptAt: null }, log);
      // Resetting a count that is already 0 is a write we can skip (the common case).
      if (endpoint.consecutiveFailures !== 0) {
        await store.webhooks.recordOutcome(endpoint.id, true, this.#o.disableAfter ?? DISABLE_AFTER_FAILURES);
        await this.#o.notifier?.emit(endpoint.accountId, endpointRecoveredEvent(endpoint, deliveryId, attempt, doneMs));
      }
      await store.queue.ack(job);
      this.#log.debug({ deliveryId, attempt }, `handle() | delivered [deliveryId:${deliveryId}] [attempt:${attempt}]`);
      return;
    }

    if (trigger !== 'scheduled') {
      // A manual send has no schedule and was counted toward health already: it just ends.
      await this.#update(delivery, { ...base, status: 'failed', nextAttemptAt: null }, log);
      await store.queue.ack(job);
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
      await this.#update(delivery, { ...base, nextAttemptAt: new Date(runAtMs).toISOString() }, log);
      await store.queue.retry(job, runAtMs);
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
    await this.#update(delivery, { ...base, status: 'failed', nextAttemptAt: null }, log);
    const ep = await store.webhooks.recordOutcome(endpoint.id, false, disableAt);
    // Only the outcome that reached the threshold sees the count equal to it: one event per episode.
    if (ep && !ep.isActive && ep.consecutiveFailures === disableAt) {
      await this.#o.notifier?.emit(ep.accountId, endpointDisabledEvent(ep, deliveryId, doneMs));
    }
    await store.queue.ack(job);
    this.#log.warn(
      { deliveryId, endpointId: endpoint.id, error: result.error, disabled: ep !== null && !ep.isActive },
      `handle() | delivery failed for good [deliveryId:${deliveryId}] [endpointId:${endpoint.id}]`,
    );
  }

  async #update(
    delivery: WebhookDeliveryRecord,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId'>>,
    log?: { attempt: WebhookAttemptRecord; keep: number },
  ): Promise<void> {
    await this.#o.store.webhooks.updateDelivery(delivery.id, { ...patch, updatedAt: new Date(this.#o.now()).toISOString() }, log);
  }
}
