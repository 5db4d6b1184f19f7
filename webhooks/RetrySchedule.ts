/**
 * When a failed delivery is tried again (spec "Delivery, retries and idempotency" rule 4).
 *
 * Our reading of "The 8 attempts are spaced 15s, 30s, 1m, 2m, 4m, 8m, 16m, 32m and span about an
 * hour": the first send happens at once, and the 8 listed spacings are the waits before each of
 * the 8 retry attempts. So a delivery is sent at most 9 times, at about 0, 15 s, 45 s, 1m45,
 * 3m45, 7m45, 15m45, 31m45 and 63m45 after the event: "about an hour" only holds if all 8
 * spacings are used. The delivery's `attempts` therefore ends at 9 when every send failed.
 * Recorded in docs/webhooks.md.
 */

/** Waits before retry 1…8, ms. */
export const RETRY_DELAYS_MS: readonly number[] = [
  15_000, 30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000,
];

/** Sends per delivery: the first one plus one per retry delay (9). */
export const MAX_SENDS = RETRY_DELAYS_MS.length + 1;

/** Each wait is scaled by a uniform factor in [1 − JITTER, 1 + JITTER] so retries do not align. */
export const RETRY_JITTER = 0.1;

/**
 * Wait before the next send after `sendsSoFar` failed sends (1-based), ms; null when the
 * schedule is used up and the delivery has failed. `random` returns [0, 1).
 */
export function nextRetryDelayMs(
  sendsSoFar: number,
  options: { delaysMs?: readonly number[]; jitter?: number; random?: () => number } = {},
): number | null {
  const delays = options.delaysMs ?? RETRY_DELAYS_MS;
  const base = delays[sendsSoFar - 1];
  if (base === undefined) return null;
  const jitter = options.jitter ?? RETRY_JITTER;
  const r = (options.random ?? Math.random)();
  return Math.round(base * (1 + jitter * (2 * r - 1)));
}
