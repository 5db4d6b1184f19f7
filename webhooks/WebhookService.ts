/**
 * Webhook management for one account at a time (spec "Area B: webhook management"). Routes in
 * control/ validate the HTTP shape, call these methods with the authenticated account id, and
 * serialise what they return: the views below already use the wire field names. Failures are
 * `WebhookError`s (errors.ts) carrying a `code` for the Area B error envelope.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { DeliveryStatus, Store, WebhookDeliveryRecord, WebhookEndpointRecord } from '../store/index.ts';
import { postSigned } from './Deliverer.ts';
import { validateEndpointUrl } from './EndpointUrl.ts';
import { WebhookError } from './errors.ts';
import type { SafeHttpClient } from './SafeHttpClient.ts';
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

const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'succeeded', 'failed'];

function invalid(field: string, message: string): WebhookError {
  return new WebhookError('WEBHOOKS/INVALID_INPUT', message, { field });
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

  constructor(options: WebhookServiceOptions) {
    this.#store = options.store;
    this.#client = options.client;
    this.#log = options.logger;
    this.#now = options.now ?? Date.now;
    this.#max = options.maxEndpointsPerAccount ?? WEBHOOK_SERVICE_DEFAULTS.maxEndpointsPerAccount;
    this.#timeoutMs = options.timeoutMs ?? WEBHOOK_SERVICE_DEFAULTS.timeoutMs;
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
    const max = WEBHOOK_SERVICE_DEFAULTS.testsPerMinute;
    const rate = await this.#store.rateLimits.hit(`webhooks.test:${accountId}`, max, 60_000);
    if (!rate.allowed) {
      const retryAfter = Math.max(1, Math.ceil(rate.retryAfterMs / 1000));
      throw new WebhookError('WEBHOOKS/RATE_LIMITED', `At most ${max} test sends per minute per account; retry in ${retryAfter} s.`, { limit: max, retry_after_seconds: retryAfter });
    }
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
