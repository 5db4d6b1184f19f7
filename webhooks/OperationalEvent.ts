/**
 * Operational events: what happens to an account's webhook endpoints, told to the account's OTHER
 * endpoints that subscribe to them (an endpoint subscribes to these types in `events` like to
 * `stream.started`). Names follow the spec's `<object>.<past tense>` form, under `webhook.`:
 * - `webhook.delivery.exhausted`: a delivery failed all 8 scheduled sends;
 * - `webhook.endpoint.disabled`: an endpoint was disabled after 20 failed deliveries in a row;
 * - `webhook.endpoint.recovered`: a delivery succeeded on an endpoint whose failure count was
 *   above 0 (at least one delivery had been exhausted since its last success).
 * An event is never sent to the endpoint it is about (the dispatcher skips `data.endpoint_id`),
 * and OperationalNotifier bounds how many one endpoint may cause. Recorded in docs/webhooks.md.
 *
 * Ids are derived from what caused the event (`evt_` + 24 hex of a SHA-256), so an event
 * emitted twice (a worker killed and its job leased again) is dispatched once: deliveries are
 * idempotent on (event id, endpoint).
 */
import { createHash } from 'node:crypto';
import type { WebhookDeliveryRecord, WebhookEndpointRecord } from '../store/index.ts';

export type OperationalEventType = 'webhook.delivery.exhausted' | 'webhook.endpoint.disabled' | 'webhook.endpoint.recovered';
export const OPERATIONAL_EVENT_TYPES = [
  'webhook.delivery.exhausted',
  'webhook.endpoint.disabled',
  'webhook.endpoint.recovered',
] as const satisfies readonly OperationalEventType[];

export interface DeliveryExhaustedData {
  /** The endpoint whose delivery failed (never the receiver of this event). */
  endpoint_id: string;
  delivery_id: string;
  /** The event that could not be delivered, and its type. */
  event_id: string;
  event_type: string;
  /** Sends made (8 when the schedule ran out). */
  attempts: number;
  /** Of the last send: HTTP status (null when none came) and why it failed. */
  response_status: number | null;
  error: string | null;
  failed_at: string;
}

export interface EndpointDisabledData {
  endpoint_id: string;
  url: string;
  name: string;
  /** Failed deliveries in a row that disabled it (20). */
  consecutive_failures: number;
  disabled_at: string;
}

export interface EndpointRecoveredData {
  endpoint_id: string;
  url: string;
  name: string;
  /** The delivery whose success ended the failures. */
  delivery_id: string;
  /** Failed deliveries in a row before this success. */
  failures_before: number;
  recovered_at: string;
}

export type OperationalEvent =
  | { id: string; type: 'webhook.delivery.exhausted'; created_at: string; data: DeliveryExhaustedData }
  | { id: string; type: 'webhook.endpoint.disabled'; created_at: string; data: EndpointDisabledData }
  | { id: string; type: 'webhook.endpoint.recovered'; created_at: string; data: EndpointRecoveredData };

export function isOperationalEventType(v: unknown): v is OperationalEventType {
  return (OPERATIONAL_EVENT_TYPES as readonly unknown[]).includes(v);
}

/** `evt_` + 24 hex: the shape of every event id, derived from the cause so re-emits dedupe. */
function derivedEventId(...parts: (string | number)[]): string {
  return `evt_${createHash('sha256').update(parts.join('|')).digest('hex').slice(0, 24)}`;
}

/** A delivery ran out of scheduled sends (one per delivery: manual sends never exhaust one). */
export function deliveryExhaustedEvent(delivery: WebhookDeliveryRecord, nowMs: number): OperationalEvent {
  const at = new Date(nowMs).toISOString();
  return {
    id: derivedEventId('webhook.delivery.exhausted', delivery.id),
    type: 'webhook.delivery.exhausted',
    created_at: at,
    data: {
      endpoint_id: delivery.endpointId,
      delivery_id: delivery.id,
      event_id: delivery.eventId,
      event_type: delivery.eventType,
      attempts: delivery.attempts,
      response_status: delivery.responseStatus,
      error: delivery.error,
      failed_at: at,
    },
  };
}

/** `endpoint` as disabled; `deliveryId` is the failed delivery that tipped it (one per episode). */
export function endpointDisabledEvent(endpoint: WebhookEndpointRecord, deliveryId: string, nowMs: number): OperationalEvent {
  const at = new Date(nowMs).toISOString();
  return {
    id: derivedEventId('webhook.endpoint.disabled', endpoint.id, deliveryId),
    type: 'webhook.endpoint.disabled',
    created_at: at,
    data: {
      endpoint_id: endpoint.id,
      url: endpoint.url,
      name: endpoint.name,
      consecutive_failures: endpoint.consecutiveFailures,
      disabled_at: at,
    },
  };
}

/** `endpoint` as it was before the success (its failure count); `attempt` is the send that succeeded. */
export function endpointRecoveredEvent(endpoint: WebhookEndpointRecord, deliveryId: string, attempt: number, nowMs: number): OperationalEvent {
  const at = new Date(nowMs).toISOString();
  return {
    id: derivedEventId('webhook.endpoint.recovered', endpoint.id, deliveryId, attempt),
    type: 'webhook.endpoint.recovered',
    created_at: at,
    data: {
      endpoint_id: endpoint.id,
      url: endpoint.url,
      name: endpoint.name,
      delivery_id: deliveryId,
      failures_before: endpoint.consecutiveFailures,
      recovered_at: at,
    },
  };
}
