/**
 * Webhook management for one account at a time (spec "Area B: webhook management"). Routes in
 * control/ validate the HTTP shape, call these methods with the authenticated account id, and
 * serialise what they return: the views below already use the wire field names. Failures are
 * `WebhookError`s (errors.ts) carrying a `code` for the Area B error envelope.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { AttemptTrigger, DeliveryStatus, Store, WebhookAttemptRecord, WebhookDeliveryRecord, WebhookEndpointRecord } from '../store/index.ts';
import { postSigned } from './Deliverer.ts';
import { validateEndpointUrl } from './EndpointUrl.ts';
import { WebhookError } from './errors.ts';
import { Redelivery } from './Redelivery.ts';
import type { SafeHttpClient } from '../outbound/index.ts';
import { generateSecret, secretPreview } from './Signature.ts';
import { EVENT_TYPES, isEventType, streamEndedEvent } from './WebhookEvent.ts';
import type { WebhookEventType } from './WebhookEvent.ts';

export const WEBHOOK_SERVICE_DEFAULTS = {
  /** Spec "Limits": 10 endpoints per account. */
  maxEndpointsPerAccount: 10,
  /** Characters in `name`. */
  maxNameLength: 200,
  /** Deliveries page size: 1–100, default 20. */
  defaultPageSize: 20,
  maxPageSize: 100,
  /**
   * Test sends per account in any 60 s: each one is a request to a third party's server, made on
   * the caller's word, so a key must not turn us into a request cannon. Ten is plenty for someone
   * debugging an endpoint by hand.
   */
  testsPerMinute: 10,
  /** The `test` send's deadline, ms (same as a delivery). */
  timeoutMs: 10_000,
  /**
   * `rate_limit` range, deliveries per second (whole numbers): 1 is the slowest schedule a
   * receiver is likely to want; 1000 is above what one deployment sends (docs/performance.md).
   */
  minRateLimit: 1,
  maxRateLimit: 1_000,
  /**
   * Resends per account in any 60 s. One resend is one request to the account's own endpoint;
   * 60 lets someone click through a page of deliveries by hand, and no script can turn the API
   * into a request cannon (recover is the tool for many).
   */
  resendsPerMinute: 60,
  /**
   * Recover calls per account in any 60 s. One call may queue up to 1000 sends (Redelivery
   * `maxPerRecover`), so five a minute is room to page through a large outage, not to loop.
   */
  recoversPerMinute: 5,
} as const;

/** Endpoint record as the API shows it. `secret` is present only on create and rotate-secret. */
export interface WebhookEndpointView {
  id: string;
  url: string;
  events: WebhookEventType[];
  name: string;
  secret?: string;
  secret_preview: string;
  is_active: boolean;
  consecutive_failures: number;
  /** Deliveries per second at most (all workers together), or null for no limit. */
  rate_limit: number | null;
  created_at: string;
}

/** Delivery record as the API shows it; response fields are of the most recent attempt. */
export interface WebhookDeliveryView {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  stream_id: string | null;
  status: DeliveryStatus;
  attempts: number;
  response_status: number | null;
  response_body: string | null;
  error: string | null;
  /** The exact JSON body sent (the signed bytes). */
  payload: string;
  created_at: string;
  updated_at: string;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
}

/** One send of a delivery as the attempts log shows it. */
export interface WebhookAttemptView {
  /** The delivery's send count after this send (1 for the first). */
  attempt: number;
  /** `scheduled` (first send and retries), `resend` or `recover`. */
  trigger: AttemptTrigger;
  started_at: string;
  duration_ms: number;
  /** HTTP status, or null when no response came. */
  response_status: number | null;
  /** The response body's first 1 KiB, or null. */
  response_body: string | null;
  /** null on a 2xx; otherwise why (`http_status: 500`, `timeout: …`, `tls: …`). */
  error: string | null;
}

/** What recover returns. */
export interface WebhookRecoverView {
  /** Deliveries queued for one more send each, oldest first. */
  requeued: number;
  delivery_ids: string[];
  /** More failed deliveries remain in the window: call again with the same window. */
  has_more: boolean;
}

export interface RecoverInput {
  /** ISO 8601; deliveries created at or after it. */
  since: string;
  /** ISO 8601; deliveries created before it; default now. */
  until?: string;
}

/** What `test` returns: the endpoint's answer, or `error` when there was none (or it was not 2xx). */
export interface WebhookTestResult {
  /** HTTP status, or null when no response came. */
  status: number | null;
  /** Up to 4 KiB of the response body, or null. */
  body: string | null;
  round_trip_ms: number;
  /** null on a 2xx; otherwise why (`http_status: 500`, `timeout: …`, `blocked_address: …`). */
  error: string | null;
  /** The synthetic event's id (also in the Reverie-Webhook-Id header). */
  event_id: string;
}

export interface CreateEndpointInput {
  url: string;
  events: readonly string[];
  name?: string;
  /** Deliveries per second at most; null or absent: no limit. */
  rate_limit?: number | null;
}

export interface UpdateEndpointInput {
  url?: string;
  events?: readonly string[];
  name?: string;
  is_active?: boolean;
  /** null removes the limit. */
  rate_limit?: number | null;
}

export interface DeliveryQuery {
  /** 1–100, default 20. */
  limit?: number;
  cursor?: string | null;
  status?: string;
  event_type?: string;
  stream_id?: string;
}

export interface DeliveryPageView {
  items: WebhookDeliveryView[];
  /** Opaque; pass back as `cursor`; null on the last page. */
  next_cursor: string | null;
}

export interface WebhookServiceOptions {
  store: Store;
  /** Sends `test` events; its policy (allowLoopback, resolver) also judges registered URLs. */
  client: SafeHttpClient;
  logger: Logger;
  /** ms since the epoch; default Date.now. */
  now?: () => number;
  maxEndpointsPerAccount?: number;
  timeoutMs?: number;
  /** Per account in any 60 s; defaults in WEBHOOK_SERVICE_DEFAULTS. */
  resendsPerMinute?: number;
  recoversPerMinute?: number;
  /** Deliveries one recover call requeues at most (Redelivery). */
  maxPerRecover?: number;
}

export function newEndpointId(): string {
  return `whk_${randomBytes(12).toString('hex')}`;
}

export function toEndpointView(e: WebhookEndpointRecord, revealSecret = false): WebhookEndpointView {
  return {
    id: e.id,
    url: e.url,
    events: e.events.filter(isEventType),
    name: e.name,
    ...(revealSecret ? { secret: e.secret } : {}),
    secret_preview: secretPreview(e.secret),
    is_active: e.isActive,
    consecutive_failures: e.consecutiveFailures,
    rate_limit: e.rateLimit ?? null,
    created_at: e.createdAt,
  };
}

export function toDeliveryView(d: WebhookDeliveryRecord): WebhookDeliveryView {
  return {
    id: d.id,
    endpoint_id: d.endpointId,
    event_id: d.eventId,
    event_type: d.eventType,
    stream_id: d.streamId,
    status: d.status,
    attempts: d.attempts,
    response_status: d.responseStatus,
    response_body: d.responseBody,
    error: d.error,
    payload: d.payload,
    created_at: d.createdAt,
    updated_at: d.updatedAt,
    last_attempt_at: d.lastAttemptAt,
    next_attempt_at: d.nextAttemptAt,
  };
}

export function toAttemptView(a: WebhookAttemptRecord): WebhookAttemptView {
  return {
    attempt: a.attempt,
    trigger: a.trigger,
    started_at: a.startedAt,
    duration_ms: a.durationMs,
    response_status: a.responseStatus,
    response_body: a.responseBody,
    error: a.error,
  };
}

/** Accepts an ISO 8601 date-time with a zone; returns it normalised to UTC `…Z`. */
function parseInstant(field: string, value: unknown): string {
  const ms = typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(value) ? Date.parse(value) : NaN;
  if (!Number.isFinite(ms)) throw invalid(field, `${field} must be an ISO 8601 date-time with a zone, e.g. 2026-03-01T12:00:00Z`);
  return new Date(ms).toISOString();
}

const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'succeeded', 'failed'];

function invalid(field: string, message: string): WebhookError {
  return new WebhookError('REQUEST/INVALID', message, { field });
}

function parseEvents(events: unknown): WebhookEventType[] {
  if (!Array.isArray(events) || events.length === 0) {
    throw invalid('events', `events must be a non-empty array of ${EVENT_TYPES.join(', ')}`);
  }
  const out: WebhookEventType[] = [];
  for (const e of events) {
    if (!isEventType(e)) throw invalid('events', `unknown event type ${JSON.stringify(e)}; allowed: ${EVENT_TYPES.join(', ')}`);
    if (!out.includes(e)) out.push(e);
  }
  return out;
}

function parseRateLimit(rate: unknown): number | null {
  if (rate === null) return null;
  const { minRateLimit: min, maxRateLimit: max } = WEBHOOK_SERVICE_DEFAULTS;
  if (typeof rate !== 'number' || !Number.isInteger(rate) || rate < min || rate > max) {
    throw invalid('rate_limit', `rate_limit must be null or an integer from ${min} to ${max} (deliveries per second)`);
  }
  return rate;
}

function parseName(name: unknown, max: number): string {
  if (typeof name !== 'string') throw invalid('name', 'name must be a string');
  if (name.length > max) throw invalid('name', `name must be at most ${max} characters`);
  return name;
}

export class WebhookService {
  readonly #store: Store;
  readonly #client: SafeHttpClient;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #max: number;
  readonly #timeoutMs: number;
  readonly #redelivery: Redelivery;
  readonly #resendsPerMinute: number;
  readonly #recoversPerMinute: number;

  constructor(options: WebhookServiceOptions) {
    this.#store = options.store;
    this.#client = options.client;
    this.#log = options.logger;
    this.#now = options.now ?? Date.now;
    this.#max = options.maxEndpointsPerAccount ?? WEBHOOK_SERVICE_DEFAULTS.maxEndpointsPerAccount;
    this.#timeoutMs = options.timeoutMs ?? WEBHOOK_SERVICE_DEFAULTS.timeoutMs;
    this.#resendsPerMinute = options.resendsPerMinute ?? WEBHOOK_SERVICE_DEFAULTS.resendsPerMinute;
    this.#recoversPerMinute = options.recoversPerMinute ?? WEBHOOK_SERVICE_DEFAULTS.recoversPerMinute;
    this.#redelivery = new Redelivery({
      store: this.#store,
      now: this.#now,
      ...(options.maxPerRecover !== undefined ? { maxPerRecover: options.maxPerRecover } : {}),
    });
  }

  /** Registers an endpoint; the view carries the full secret (the only time but rotate). */
  async create(accountId: string, input: CreateEndpointInput): Promise<WebhookEndpointView> {
    const events = parseEvents(input.events);
    const name = parseName(input.name ?? '', WEBHOOK_SERVICE_DEFAULTS.maxNameLength);
    const rateLimit = parseRateLimit(input.rate_limit ?? null);
    const url = await validateEndpointUrl(input.url, this.#client.policy);
    const now = new Date(this.#now()).toISOString();
    const record: WebhookEndpointRecord = {
      id: newEndpointId(),
      accountId,
      url,
      events,
      name,
      secret: generateSecret(),
      isActive: true,
      consecutiveFailures: 0,
      rateLimit,
      createdAt: now,
      updatedAt: now,
    };
    const ok = await this.#store.webhooks.createEndpoint(record, this.#max);
    if (!ok) {
      throw new WebhookError('WEBHOOKS/LIMIT_REACHED', `an account may have at most ${this.#max} webhook endpoints`, {
        limit: this.#max,
      });
    }
    this.#log.info({ accountId, endpointId: record.id }, `create() | endpoint registered [endpointId:${record.id}]`);
    return toEndpointView(record, true);
  }

  /** The account's endpoints with their health (no secrets). */
  async list(accountId: string): Promise<WebhookEndpointView[]> {
    const all = await this.#store.webhooks.listEndpoints(accountId);
    return all.map((e) => toEndpointView(e));
  }

  async get(accountId: string, id: string): Promise<WebhookEndpointView> {
    return toEndpointView(await this.#own(accountId, id));
  }

  /**
   * Changes url, events, name, is_active or rate_limit (a new limit applies to sends not yet
   * scheduled; a delivery already waiting for a slot keeps it). `is_active: true` re-enables and clears the failure
   * count (spec "Webhook endpoint"); a new url passes the registration rules again.
   */
  async update(accountId: string, id: string, input: UpdateEndpointInput): Promise<WebhookEndpointView> {
    await this.#own(accountId, id);
    const patch: Partial<Omit<WebhookEndpointRecord, 'id' | 'accountId'>> = {};
    if (input.events !== undefined) patch.events = parseEvents(input.events);
    if (input.name !== undefined) patch.name = parseName(input.name, WEBHOOK_SERVICE_DEFAULTS.maxNameLength);
    if (input.rate_limit !== undefined) patch.rateLimit = parseRateLimit(input.rate_limit);
    if (input.is_active !== undefined) {
      if (typeof input.is_active !== 'boolean') throw invalid('is_active', 'is_active must be a boolean');
      patch.isActive = input.is_active;
      if (input.is_active) patch.consecutiveFailures = 0;
    }
    if (input.url !== undefined) patch.url = await validateEndpointUrl(input.url, this.#client.policy);
    patch.updatedAt = new Date(this.#now()).toISOString();
    const updated = await this.#store.webhooks.updateEndpoint(id, patch);
    if (!updated) throw this.#notFound(id);
    return toEndpointView(updated);
  }

  /** Deletes the endpoint and its delivery log; its queued retries then end unsent. */
  async delete(accountId: string, id: string): Promise<void> {
    await this.#own(accountId, id);
    if (!(await this.#store.webhooks.deleteEndpoint(id))) throw this.#notFound(id);
    this.#log.info({ accountId, endpointId: id }, `delete() | endpoint deleted [endpointId:${id}]`);
  }

  /**
   * Issues a new secret. Attempts read the secret when they send, so from the moment this
   * resolves no attempt (queued retries included) is signed with the old one. No overlap.
   */
  async rotateSecret(accountId: string, id: string): Promise<WebhookEndpointView> {
    await this.#own(accountId, id);
    const updated = await this.#store.webhooks.updateEndpoint(id, {
      secret: generateSecret(),
      updatedAt: new Date(this.#now()).toISOString(),
    });
    if (!updated) throw this.#notFound(id);
    this.#log.info({ accountId, endpointId: id }, `rotateSecret() | secret rotated [endpointId:${id}]`);
    return toEndpointView(updated, true);
  }

  /**
   * Sends a synthetic, fully signed `stream.ended` now (not queued, not recorded, not counted
   * toward health; works on a disabled endpoint too) and reports what came back.
   */
  async test(accountId: string, id: string): Promise<WebhookTestResult> {
    const endpoint = await this.#own(accountId, id);
    await this.#limit(accountId, 'test', WEBHOOK_SERVICE_DEFAULTS.testsPerMinute);
    const nowMs = this.#now();
    const event = streamEndedEvent(
      {
        id: 'str_test',
        pipeline: 'streamdiffusion',
        createdAt: new Date(nowMs - 120_000).toISOString(),
        startedAt: new Date(nowMs - 110_000).toISOString(),
        endedAt: new Date(nowMs - 50_000).toISOString(),
        endReason: 'deleted',
        gatewayHost: 'test.invalid',
      },
      { nowMs },
    );
    const result = await postSigned(this.#client, {
      url: endpoint.url,
      secret: endpoint.secret,
      eventId: event.id,
      eventType: event.type,
      payload: JSON.stringify(event),
      nowMs,
      timeoutMs: this.#timeoutMs,
    });
    return {
      status: result.status,
      body: result.body,
      round_trip_ms: Math.round(result.roundTripMs),
      error: result.error,
      event_id: event.id,
    };
  }

  /** Delivery history, newest first, filtered and paginated. */
  async deliveries(accountId: string, id: string, query: DeliveryQuery = {}): Promise<DeliveryPageView> {
    await this.#own(accountId, id);
    const d = WEBHOOK_SERVICE_DEFAULTS;
    const limit = query.limit ?? d.defaultPageSize;
    if (!Number.isInteger(limit) || limit < 1 || limit > d.maxPageSize) {
      throw invalid('limit', `limit must be an integer from 1 to ${d.maxPageSize}`);
    }
    if (query.status !== undefined && !DELIVERY_STATUSES.includes(query.status as DeliveryStatus)) {
      throw invalid('status', `status must be one of ${DELIVERY_STATUSES.join(', ')}`);
    }
    if (query.event_type !== undefined && !isEventType(query.event_type)) {
      throw invalid('event_type', `event_type must be one of ${EVENT_TYPES.join(', ')}`);
    }
    const page = await this.#store.webhooks.listDeliveries(
      id,
      {
        ...(query.status !== undefined ? { status: query.status as DeliveryStatus } : {}),
        ...(query.event_type !== undefined ? { eventType: query.event_type } : {}),
        ...(query.stream_id !== undefined ? { streamId: query.stream_id } : {}),
      },
      { limit, cursor: query.cursor ?? null },
    );
    return { items: page.items.map(toDeliveryView), next_cursor: page.nextCursor };
  }

  /**
   * Sends one delivery again (succeeded or failed; same event id and body, signed afresh): it is
   * `pending` until that one send ends. A pending delivery is refused (409): it is being sent.
   */
  async resend(accountId: string, id: string, deliveryId: string): Promise<WebhookDeliveryView> {
    const endpoint = await this.#own(accountId, id);
    const delivery = await this.#ownDelivery(endpoint, deliveryId);
    this.#active(endpoint);
    await this.#limit(accountId, 'resend', this.#resendsPerMinute);
    const requeued = await this.#redelivery.requeue(delivery, 'resend');
    if (!requeued) {
      throw new WebhookError('WEBHOOKS/DELIVERY_PENDING', `delivery ${deliveryId} is pending: it is being sent already`, { id: deliveryId });
    }
    this.#log.info({ accountId, endpointId: id, deliveryId }, `resend() | delivery queued again [deliveryId:${deliveryId}]`);
    return toDeliveryView(requeued);
  }

  /**
   * Queues one more send of every `failed` delivery of the endpoint created in [since, until)
   * (until defaults to now), at most `maxPerRecover` per call (`has_more` says to call again).
   */
  async recover(accountId: string, id: string, input: RecoverInput): Promise<WebhookRecoverView> {
    const endpoint = await this.#own(accountId, id);
    const since = parseInstant('since', input.since);
    const until = input.until === undefined ? new Date(this.#now()).toISOString() : parseInstant('until', input.until);
    if (Date.parse(since) >= Date.parse(until)) throw invalid('since', 'since must be before until');
    this.#active(endpoint);
    await this.#limit(accountId, 'recover', this.#recoversPerMinute);
    const result = await this.#redelivery.recover(endpoint, since, until);
    this.#log.info(
      { accountId, endpointId: id, since, until, requeued: result.requeued.length, hasMore: result.hasMore },
      `recover() | failed deliveries queued again [endpointId:${id}] [count:${result.requeued.length}]`,
    );
    return { requeued: result.requeued.length, delivery_ids: result.requeued.map((d) => d.id), has_more: result.hasMore };
  }

  /** Every send of one delivery kept in its attempts log, oldest first. */
  async attempts(accountId: string, id: string, deliveryId: string): Promise<WebhookAttemptView[]> {
    const endpoint = await this.#own(accountId, id);
    await this.#ownDelivery(endpoint, deliveryId);
    return (await this.#store.webhooks.listAttempts(deliveryId)).map(toAttemptView);
  }

  /** Counts one `kind` request of the account; throws RATE_LIMITED past `max` in any 60 s. */
  async #limit(accountId: string, kind: 'test' | 'resend' | 'recover', max: number): Promise<void> {
    const rate = await this.#store.rateLimits.hit(`webhooks.${kind}:${accountId}`, max, 60_000);
    if (rate.allowed) return;
    const retryAfter = Math.max(1, Math.ceil(rate.retryAfterMs / 1000));
    throw new WebhookError('WEBHOOKS/RATE_LIMITED', `At most ${max} ${kind} requests per minute per account; retry in ${retryAfter} s.`, {
      limit: max,
      retry_after_seconds: retryAfter,
    });
  }

  /** A disabled endpoint receives nothing, manual sends included: re-enable it first. */
  #active(endpoint: WebhookEndpointRecord): void {
    if (!endpoint.isActive) {
      throw new WebhookError('WEBHOOKS/ENDPOINT_DISABLED', `webhook endpoint ${endpoint.id} is disabled; PATCH is_active: true first`, { id: endpoint.id });
    }
  }

  async #ownDelivery(endpoint: WebhookEndpointRecord, deliveryId: string): Promise<WebhookDeliveryRecord> {
    const d = await this.#store.webhooks.getDelivery(deliveryId);
    if (!d || d.endpointId !== endpoint.id) {
      throw new WebhookError('WEBHOOKS/DELIVERY_NOT_FOUND', `delivery ${deliveryId} not found on webhook endpoint ${endpoint.id}`, { id: deliveryId });
    }
    return d;
  }

  async #own(accountId: string, id: string): Promise<WebhookEndpointRecord> {
    const e = await this.#store.webhooks.getEndpoint(id);
    // Another account's endpoint is indistinguishable from a missing one.
    if (!e || e.accountId !== accountId) throw this.#notFound(id);
    return e;
  }

  #notFound(id: string): WebhookError {
    return new WebhookError('WEBHOOKS/NOT_FOUND', `webhook endpoint ${id} not found`, { id });
  }
}
