/**
 * Emits operational events (OperationalEvent.ts) as ordinary events of the account, into queue
 * `events`, so they are dispatched, signed, retried and logged like `stream.*` ones.
 *
 * Bounded: one endpoint may cause at most `maxPerHour` events of each type in any rolling hour
 * (the store's sliding-window limiter, shared by every worker); the rest are dropped and logged.
 * An endpoint that flaps (fails, recovers, fails…) or has a thousand deliveries exhausted at once
 * therefore costs each other endpoint at most that many requests an hour per type. Nothing is
 * queued when no other active endpoint of the account subscribes to the type.
 */
import type { Logger } from 'pino';
import type { Store } from '../store/index.ts';
import type { OperationalEvent } from './OperationalEvent.ts';
import { webhookEventJob } from './WebhookEvent.ts';

export const OPERATIONAL_EVENT_DEFAULTS = {
  /**
   * Operational events of one type one endpoint may cause in any rolling hour (0: none at all).
   * 10 tells a receiver plainly that something is wrong without letting an endpoint with a
   * thousand failing deliveries send a thousand requests to each of its siblings.
   */
  maxPerHour: 10,
} as const;

const HOUR_MS = 3_600_000;

export interface OperationalNotifierOptions {
  store: Store;
  logger: Logger;
  maxPerHour?: number;
}

export class OperationalNotifier {
  readonly #store: Store;
  readonly #log: Logger;
  readonly #max: number;

  constructor(options: OperationalNotifierOptions) {
    this.#store = options.store;
    this.#log = options.logger;
    this.#max = options.maxPerHour ?? OPERATIONAL_EVENT_DEFAULTS.maxPerHour;
  }

  /**
   * Queues `event` for the account's other subscribed endpoints; false when nobody subscribes
   * or the bound dropped it. Never throws: the delivery that caused it must finish regardless.
   */
  async emit(accountId: string, event: OperationalEvent): Promise<boolean> {
    const about = event.data.endpoint_id;
    try {
      const endpoints = await this.#store.webhooks.listEndpoints(accountId);
      if (!endpoints.some((e) => e.isActive && e.id !== about && e.events.includes(event.type))) return false;
      const rate = this.#max > 0 ? await this.#store.rateLimits.hit(`webhooks.ops:${event.type}:${about}`, this.#max, HOUR_MS) : null;
      if (!rate?.allowed) {
        this.#log.warn(
          { eventType: event.type, endpointId: about, maxPerHour: this.#max },
          `emit() | operational event dropped: over the hourly bound [type:${event.type}] [endpointId:${about}]`,
        );
        return false;
      }
      await this.#store.queue.enqueue(webhookEventJob(event, accountId));
      return true;
    } catch (err) {
      this.#log.error({ err, eventType: event.type, endpointId: about }, `emit() | operational event lost [type:${event.type}] [endpointId:${about}]`);
      return false;
    }
  }
}
