import { StoreError } from './errors.ts';

/**
 * Paging helpers shared by both stores. Lists are ordered newest first by (createdAt ms, id),
 * so both backends page identically: SQLite compares the tuple, Redis compares the member
 * `sortMember()` lexicographically (15-digit zero-padded ms, then `|`, then the id).
 */

/** Sort key as one string whose byte order equals (ms, id) order. */
export function sortMember(createdMs: number, id: string): string {
  return `${String(createdMs).padStart(15, '0')}|${id}`;
}

export function createdMs(iso: string): number {
  const ms = Date.parse(iso);
  if (!Number.isFinite(ms)) throw new StoreError('invalid_argument', `createdAt is not an ISO date [createdAt:${iso}]`);
  return ms;
}

/** Opaque cursor: base64url of `[ms, id]` of the last item handed out. */
export function encodeCursor(ms: number, id: string): string {
  return Buffer.from(JSON.stringify([ms, id])).toString('base64url');
}

export function decodeCursor(cursor: string): { ms: number; id: string } {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (Array.isArray(value) && value.length === 2 && Number.isSafeInteger(value[0]) && typeof value[1] === 'string') {
      return { ms: value[0] as number, id: value[1] };
    }
  } catch (cause) {
    throw new StoreError('invalid_cursor', `cursor is not one of ours [cursor:${cursor}]`, { cause });
  }
  throw new StoreError('invalid_cursor', `cursor is not one of ours [cursor:${cursor}]`);
}

/** Page size clamped to the contract's 1–100. */
export function pageLimit(limit: number): number {
  if (!Number.isFinite(limit)) return 100;
  return Math.min(100, Math.max(1, Math.floor(limit)));
}

/** The patch without `undefined` values, after refusing keys that must never change. */
export function cleanPatch<T extends object>(patch: T, immutable: readonly string[]): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (immutable.includes(key)) {
      throw new StoreError('invalid_argument', `field cannot be changed [field:${key}]`);
    }
    out[key] = value;
  }
  return out as Partial<T>;
}

/** Queue names go into Redis keys between `:` separators, so they are restricted. */
export function checkQueueName(queue: string): void {
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(queue)) {
    throw new StoreError('invalid_argument', `queue name must match [A-Za-z0-9_.-]{1,64} [queue:${queue}]`);
  }
}
