/**
 * Public API of webhooks/: endpoint management (WebhookService), event builders for the outbox
 * (streams code) and the delivery engine (worker role). Deliveries go out through outbound/.
 */
import type { Logger } from 'pino';
import type { Store } from '../store/index.ts';
import { AddressPolicy, SafeHttpClient, type Resolver } from '../outbound/index.ts';
import { DeliveryEngine } from './DeliveryEngine.ts';
import type { DeliveryEngineOptions } from './DeliveryEngine.ts';
import { WebhookService } from './WebhookService.ts';
import type { WebhookServiceOptions } from './WebhookService.ts';

export {
  SIGNATURE_HEADER,
  ID_HEADER,
  EVENT_HEADER,
  TIMESTAMP_HEADER,
  generateSecret,
  secretPreview,
  computeSignature,
  signatureHeader,
  signedHeaders,
  verifySignature,
} from './Signature.ts';
export {
  EVENT_TYPES,
  EVENTS_QUEUE,
  DELIVER_QUEUE,
  MAINTENANCE_QUEUE,
  isEventType,
  newEventId,
  streamStartedEvent,
  streamEndedEvent,
  webhookEventJob,
  parseEventJob,
} from './WebhookEvent.ts';
export type { WebhookEvent, AnyWebhookEvent, WebhookEventType, StreamStartedData, StreamEndedData, EventJobPayload } from './WebhookEvent.ts';
export { RETRY_DELAYS_MS, MAX_SENDS, RETRY_JITTER, nextRetryDelayMs } from './RetrySchedule.ts';
export { validateEndpointUrl, MAX_URL_LENGTH } from './EndpointUrl.ts';
export { WebhookError, isWebhookError } from './errors.ts';
export type { WebhookErrorCode, WebhookErrorDetails, UrlRejectReason } from './errors.ts';
export { WebhookService, WEBHOOK_SERVICE_DEFAULTS, toEndpointView, toDeliveryView, toAttemptView } from './WebhookService.ts';
export type {
  WebhookEndpointView,
  WebhookDeliveryView,
  WebhookAttemptView,
  WebhookRecoverView,
  RecoverInput,
  WebhookTestResult,
  CreateEndpointInput,
  UpdateEndpointInput,
  DeliveryQuery,
  DeliveryPageView,
  WebhookServiceOptions,
} from './WebhookService.ts';
export { DeliveryEngine, DELIVERY_ENGINE_DEFAULTS } from './DeliveryEngine.ts';
export type { DeliveryEngineOptions } from './DeliveryEngine.ts';
export { Deliverer, postSigned, RESPONSE_BODY_LIMIT, DISABLE_AFTER_FAILURES, ATTEMPT_BODY_LIMIT, ATTEMPTS_KEPT } from './Deliverer.ts';
export { REDELIVERY_DEFAULTS } from './Redelivery.ts';
export {
  OPERATIONAL_EVENT_TYPES,
  isOperationalEventType,
  deliveryExhaustedEvent,
  endpointDisabledEvent,
  endpointRecoveredEvent,
} from './OperationalEvent.ts';
export type {
  OperationalEvent,
  OperationalEventType,
  DeliveryExhaustedData,
  EndpointDisabledData,
  EndpointRecoveredData,
} from './OperationalEvent.ts';
export { OPERATIONAL_EVENT_DEFAULTS } from './OperationalNotifier.ts';
export type { AttemptResult } from './Deliverer.ts';
export { Dispatcher } from './Dispatcher.ts';

export interface WebhooksOptions {
  store: Store;
  logger: Logger;
  /** The store's clock; default Date.now. */
  now?: () => number;
  /**
   * Test/local-dev switch: accept loopback targets (127/8, ::1, `localhost`). Off by default;
   * a warning is logged when on.
   */
  allowLoopback?: boolean;
  /** Extra trusted CA (PEM) for receivers with private certificates (tests). */
  ca?: string | Buffer;
  /** Custom DNS (tests). */
  resolve?: Resolver;
  /** Engine tuning (concurrency, lease, timeouts, retry delays, attempts kept, operational bound). */
  engine?: Omit<DeliveryEngineOptions, 'store' | 'client' | 'logger' | 'now'>;
  /** Management limits (resends and recovers per minute, deliveries per recover). */
  service?: Pick<WebhookServiceOptions, 'resendsPerMinute' | 'recoversPerMinute' | 'maxPerRecover'>;
}

export interface Webhooks {
  service: WebhookService;
  engine: DeliveryEngine;
  client: SafeHttpClient;
  policy: AddressPolicy;
  /** Idempotent: stops the engine, then drops pooled sockets. */
  close(): Promise<void>;
}

/**
 * Builds the webhooks area on one store: the policy, the client, the management service and the
 * delivery engine (not started: the worker role calls `engine.start()`).
 */
export function createWebhooks(options: WebhooksOptions): Webhooks {
  const log = options.logger.child({ module: 'webhooks' });
  const policy = new AddressPolicy({
    ...(options.allowLoopback !== undefined ? { allowLoopback: options.allowLoopback } : {}),
    ...(options.resolve !== undefined ? { resolve: options.resolve } : {}),
  });
  if (policy.allowLoopback) {
    log.warn('createWebhooks() | allowLoopback is ON: webhooks may target this machine (tests and local dev only)');
  }
  const client = new SafeHttpClient({ policy, ...(options.ca !== undefined ? { ca: options.ca } : {}), userAgent: 'Reverie-Webhooks/1.0' });
  const now = options.now ?? Date.now;
  const service = new WebhookService({ ...options.service, store: options.store, client, logger: log, now });
  const engine = new DeliveryEngine({ ...options.engine, store: options.store, client, logger: log, now });
  let closing: Promise<void> | null = null;
  return {
    service,
    engine,
    client,
    policy,
    close() {
      closing ??= (async () => {
        try {
          await engine.close();
        } finally {
          client.close();
        }
      })();
      return closing;
    },
  };
}
