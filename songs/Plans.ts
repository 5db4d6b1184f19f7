/**
 * Monthly song allowances per plan (spec "Limits"): Free 10, Songs 1,000; pro, max and internal
 * are unlimited (limit null). Anonymous accounts — keys handed out by a public demo — get 3, so a
 * demo cannot be used as a free render farm (docs/api.md).
 */
import type { Plan } from '../store/index.ts';

export const MONTHLY_SONGS: Readonly<Record<Plan, number | null>> = Object.freeze({
  anonymous: 3,
  free: 10,
  songs: 1000,
  pro: null,
  max: null,
  internal: null,
});

/** Songs of one account that may be `queued` or `rendering` at once (spec: more gives 429). */
export const MAX_ACTIVE_SONGS = 3;

/** `YYYY-MM` of `ms` in UTC: the month a song is counted against. */
export function usageMonth(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7);
}

/** The first instant of the next month, UTC, as ISO 8601: when usage resets. */
export function resetsAt(ms: number): string {
  const d = new Date(ms);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)).toISOString();
}
