/**
 * Resend and recover: a finished delivery (succeeded or failed) goes back to `pending` and into
 * the deliveries queue with a one-send payload, written together (Store `requeueDelivery`). Same
 * delivery id, same event id, same frozen body; the send is signed afresh and appended to the
 * delivery's attempts log with its trigger. The Deliverer makes exactly one send for such a payload.
 *
 * Recover picks the endpoint's `failed` deliveries created in [since, until), oldest first, at
 * most `maxPerRecover` per call: each requeued delivery is `pending` at once, so calling again
 * with the same window picks up where the last call stopped (`has_more`).
 */
import type { AttemptTrigger, Store, WebhookDeliveryRecord, WebhookEndpointRecord } from '../store/index.ts';
import type { DeliverJobPayload } from './Deliverer.ts';

export const REDELIVERY_DEFAULTS = {
  /**
   * Deliveries one recover call requeues at most. Each becomes a request to the endpoint within
   * seconds; 1000 keeps one call's store work under a second and its burst within what a
   * receiver that just came back can take. Call again (same window) while `has_more`.
   */
  maxPerRecover: 1000,
} as const;

/** Deliveries read per store page while collecting a recover window. */
const PAGE = 100;

export interface RecoverResult {
  /** The deliveries put back in the queue, oldest first. */
  requeued: WebhookDeliveryRecord[];
  /** True when the window holds more failed deliveries than one call requeues. */
  hasMore: boolean;
}

export interface RedeliveryOptions {
  store: Store;
  now: () => number;
  maxPerRecover?: number;
}

export class Redelivery {
  readonly #store: Store;
  readonly #now: () => number;
  readonly #max: number;

  constructor(options: RedeliveryOptions) {
    this.#store = options.store;
    this.#now = options.now;
    this.#max = options.maxPerRecover ?? REDELIVERY_DEFAULTS.maxPerRecover;
  }

  /** Requeues one delivery for one send; null when it is pending already (or gone). */
  async requeue(delivery: WebhookDeliveryRecord, trigger: Exclude<AttemptTrigger, 'scheduled'>): Promise<WebhookDeliveryRecord | null> {
    const nowMs = this.#now();
    const nowIso = new Date(nowMs).toISOString();
    const payload: DeliverJobPayload = { deliveryId: delivery.id, trigger };
    return this.#store.webhooks.requeueDelivery(
      delivery.id,
      { status: 'pending', nextAttemptAt: nowIso, updatedAt: nowIso },
      { payload, runAtMs: nowMs },
    );
  }

  /** Requeues the endpoint's failed deliveries created in [sinceIso, untilIso). */
  async recover(endpoint: WebhookEndpointRecord, sinceIso: string, untilIso: string): Promise<RecoverResult> {
    const found: WebhookDeliveryRecord[] = [];
    let cursor: string | null = null;
    let hasMore = false;
    do {
      const page = await this.#store.webhooks.listDeliveries(
        endpoint.id,
        { status: 'failed', createdFrom: sinceIso, createdBefore: untilIso },
        { limit: PAGE, cursor },
      );
      for (const d of page.items) {
        if (found.length === this.#max) {
          hasMore = true;
          break;
        }
        found.push(d);
      }
      cursor = page.nextCursor;
      if (cursor !== null && found.length === this.#max) hasMore = true;
    } while (cursor !== null && !hasMore);
    // Pages are newest first; the oldest event is sent again first. When the window is cut,
    // the newest `max` go now and the older ones on the next call.
    const requeued: WebhookDeliveryRecord[] = [];
    for (const d of found.reverse()) {
      const r = await this.requeue(d, 'recover');
      if (r) requeued.push(r);
    }
    return { requeued, hasMore };
  }
}
