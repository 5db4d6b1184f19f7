/**
 * When a failed delivery is tried again (spec "Delivery, retries and idempotency" rule 4, the
 * "Webhook delivery" states and "Limits": "Delivery attempts 8", "All 8 attempts used → failed").
 *
 * A delivery is sent at most 8 times in all: the first send at once, then 7 retries. The spec
 * lists 8 spacings (15s, 30s, 1m, 2m, 4m, 8m, 16m, 32m) for 8 attempts; 8 attempts have only 7
 * gaps, so the waits before retries 1…7 are the first 7 spacings, and the 32m one would only
 * follow the 8th attempt, when the delivery is already `failed`. Sends go out at about 0, 15 s,
 * 45 s, 1m45, 3m45, 7m45, 15m45 and 31m45 after the event (the spec's "about an hour" counts the
 * 32m spacing too; the attempt count is the rule we keep). The delivery's `attempts` ends at 8
 * when every send failed. Recorded in docs/webhooks.md.
 */

/** Sends per delivery, the first one included (spec "Limits": delivery attempts 8). */
export const MAX_SENDS = 8;

/** Waits before retry 1…7, ms: one per gap between the MAX_SENDS sends. */
export const RETRY_DELAYS_MS: readonly number[] = [15_000, 30_000, 60_000, 120_000, 240_000, 480_000, 960_000];

/** Each wait is scaled by a uniform factor in [1 − JITTER, 1 + JITTER] so retries do not align. */
export const RETRY_JITTER = 0.1;

/**
 * Wait before the next send after `sendsSoFar` failed sends (1-based), ms; null when the
 * schedule is used up (MAX_SENDS sends made, or `delaysMs` has no wait left) and the delivery has
 * failed. `random` returns [0, 1).
 */
export function nextRetryDelayMs(
  sendsSoFar: number,
  options: { delaysMs?: readonly number[]; jitter?: number; random?: () => number } = {},
): number | null {
  if (sendsSoFar >= MAX_SENDS) return null;
  const delays = options.delaysMs ?? RETRY_DELAYS_MS;
  const base = delays[sendsSoFar - 1];
  if (base === undefined) return null;
  const jitter = options.jitter ?? RETRY_JITTER;
  const r = (options.random ?? Math.random)();
  return Math.round(base * (1 + jitter * (2 * r - 1)));
}
