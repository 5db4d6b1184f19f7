/**
 * Why a store call was refused:
 * - `conflict`: a unique value is taken (an id, a stream key, a playback id, an API key digest);
 * - `invalid_cursor`: a paging cursor that this store did not hand out;
 * - `invalid_argument`: a value the store cannot keep (a queue name with `:`, a patch touching an
 *   immutable sort key such as `createdAt`);
 * - `closed`: the store was closed.
 */
export type StoreErrorCode = 'conflict' | 'invalid_cursor' | 'invalid_argument' | 'closed';

export class StoreError extends Error {
  override readonly name = 'StoreError';
  constructor(
    readonly code: StoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * True when `err` says the store cannot be reached right now (Redis down or restarting), as
 * opposed to refusing a call: ioredis gives up on a command it held for `maxRetriesPerRequest`
 * reconnect attempts (≈ 10 s), or fails it at once on a closed or refused connection. Callers
 * answer 503 + Retry-After for these.
 */
export function isStoreUnavailable(err: unknown): boolean {
  const e = err as { name?: unknown; message?: unknown; code?: unknown } | null;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'MaxRetriesPerRequestError') return true;
  if (typeof e.code === 'string' && ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT'].includes(e.code)) return true;
  return typeof e.message === 'string' && /^(Connection is closed|Stream isn't writeable)/.test(e.message);
}
