/**
 * Event envelopes (spec "Events") and the outbox job that carries them. Stream code builds the
 * event and writes `webhookEventJob(event, accountId)` in the same store call as the state
 * change (`effects.jobs`), so the event exists if and only if the change does. The dispatcher
 * (DeliveryEngine) fans it out to endpoints.
 */
import { DELIVERY_QUEUE, newTimeOrderedId } from '../store/index.ts';
import type { NewJob, StreamEndReason, StreamRecord } from '../store/index.ts';
import { isOperationalEventType, OPERATIONAL_EVENT_TYPES } from './OperationalEvent.ts';
import type { OperationalEvent, OperationalEventType } from './OperationalEvent.ts';

/**
 * Event types (spec "Event types"):
 * - `stream.started`: ingest connected and the pipeline came up (again, after a reconnect);
 * - `stream.ended`: the session stopped; `data.reason` says why;
 * - `webhook.*`: operational events about the account's other endpoints (OperationalEvent.ts).
 */
export type WebhookEventType = 'stream.started' | 'stream.ended' | OperationalEventType;
export const EVENT_TYPES = ['stream.started', 'stream.ended', ...OPERATIONAL_EVENT_TYPES] as const satisfies readonly WebhookEventType[];

export function isEventType(v: unknown): v is WebhookEventType {
  return v === 'stream.started' || v === 'stream.ended' || isOperationalEventType(v);
}

export interface StreamStartedData {
  stream_id: string;
  /**
   * This event's place among the stream's events: 1, 2, 3… in the order they happened (started,
   * ended, started again…), so a receiver can tell order even if deliveries arrive out of it.
   */
  sequence: number;
  pipeline_id: string;
  started_at: string;
  /** Stream creation time. */
  created_at: string;
  gateway_host: string;
}

export interface StreamEndedData {
  stream_id: string;
  /** As in `StreamStartedData`: one more than its session's `stream.started`. */
  sequence: number;
  pipeline_id: string;
  started_at: string;
  /** Last moment the stream was confirmed live (backdated past detection), not when we noticed. */
  ended_at: string;
  duration_seconds: number;
  reason: StreamEndReason;
  gateway_host: string;
}

export type WebhookEvent =
  | { id: string; type: 'stream.started'; created_at: string; data: StreamStartedData }
  | { id: string; type: 'stream.ended'; created_at: string; data: StreamEndedData };

/** Any event the outbox carries: a stream event or an operational one. */
export type AnyWebhookEvent = WebhookEvent | OperationalEvent;

/** Queues this folder owns. */
export const EVENTS_QUEUE = 'events';
/** The deliveries queue: the store's deliveries table itself (Store DELIVERY_QUEUE), not a job queue. */
export const DELIVER_QUEUE = DELIVERY_QUEUE;
export const MAINTENANCE_QUEUE = 'webhooks.maintenance';

/** Payload of a job in queue `events`. */
export interface EventJobPayload {
  kind: 'webhook_event';
  accountId: string;
  event: AnyWebhookEvent;
  /**
   * Id of the event this one must follow at every endpoint: a `stream.ended` names its session's
   * `stream.started`. It is fanned out only after that one, and each of its deliveries waits for
   * that event's delivery to the same endpoint to finish. Absent: no ordering.
   */
  after?: string;
}

/** `evt_` + 24 hex characters, ordered by creation time (see store `newTimeOrderedId`). */
export function newEventId(): string {
  return newTimeOrderedId('evt');
}

export interface EventOptions {
  /** Default: a fresh `evt_<24 hex>`. */
  id?: string;
  /** Event time, ms since the epoch; default Date.now(). */
  nowMs?: number;
  /** `data.sequence`; default 1 (a stream's first event; synthetic test events). */
  sequence?: number;
}

type StreamFields = Pick<StreamRecord, 'id' | 'pipeline' | 'createdAt' | 'startedAt' | 'gatewayHost'>;

/** `stream.started` from the stream as it is after the change (`startedAt` set). */
export function streamStartedEvent(stream: StreamFields, options: EventOptions = {}): WebhookEvent {
  const now = new Date(options.nowMs ?? Date.now()).toISOString();
  return {
    id: options.id ?? newEventId(),
    type: 'stream.started',
    created_at: now,
    data: {
      stream_id: stream.id,
      sequence: options.sequence ?? 1,
      pipeline_id: stream.pipeline,
      started_at: stream.startedAt ?? now,
      created_at: stream.createdAt,
      gateway_host: stream.gatewayHost,
    },
  };
}

/** `stream.ended` from the stream as it is after the change (`endedAt`, `endReason` set). */
export function streamEndedEvent(
  stream: StreamFields & Pick<StreamRecord, 'endedAt' | 'endReason'>,
  options: EventOptions = {},
): WebhookEvent {
  const now = new Date(options.nowMs ?? Date.now()).toISOString();
  const startedAt = stream.startedAt ?? stream.createdAt;
  const endedAt = stream.endedAt ?? now;
  return {
    id: options.id ?? newEventId(),
    type: 'stream.ended',
    created_at: now,
    data: {
      stream_id: stream.id,
      sequence: options.sequence ?? 1,
      pipeline_id: stream.pipeline,
      started_at: startedAt,
      ended_at: endedAt,
      duration_seconds: Math.max(0, Math.round((Date.parse(endedAt) - Date.parse(startedAt)) / 1000)),
      reason: stream.endReason ?? 'timeout',
      gateway_host: stream.gatewayHost,
    },
  };
}

/**
 * The outbox job for `event`: queue `events`, id = event id (enqueueing twice is a no-op).
 * `after`: the event it must follow (a `stream.ended`: its session's `stream.started`).
 */
export function webhookEventJob(event: AnyWebhookEvent, accountId: string, options: { after?: string } = {}): NewJob {
  const payload: EventJobPayload = { kind: 'webhook_event', accountId, event, ...(options.after !== undefined ? { after: options.after } : {}) };
  return { queue: EVENTS_QUEUE, id: event.id, payload };
}

/** Narrows a leased job payload; null when it is not one of ours. */
export function parseEventJob(payload: unknown): EventJobPayload | null {
  if (typeof payload !== 'object' || payload === null) return null;
  const p = payload as Partial<EventJobPayload>;
  if (p.kind !== 'webhook_event' || typeof p.accountId !== 'string') return null;
  const e = p.event as Partial<AnyWebhookEvent> | undefined;
  if (!e || typeof e.id !== 'string' || !isEventType(e.type) || typeof e.data !== 'object' || e.data === null) return null;
  if (p.after !== undefined && typeof p.after !== 'string') return null;
  return p as EventJobPayload;
}
