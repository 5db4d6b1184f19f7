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
