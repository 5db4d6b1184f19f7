/**
 * Why an image was not decoded. `ImageRejectedError` is about the bytes the client sent (its
 * message says what is wrong and may be shown to the client as-is); `ImageBusyError` is about us
 * (every decode slot and queue place taken: try again shortly).
 */
export class ImageRejectedError extends Error {
  constructor(message: string, opts?: { cause?: unknown }) {
    super(message, opts);
    this.name = 'ImageRejectedError';
  }
}

export class ImageBusyError extends Error {
  constructor(
    message: string,
    /** Seconds after which a retry is likely to find a slot. */
    readonly retryAfterS: number,
  ) {
    super(message);
    this.name = 'ImageBusyError';
  }
}
