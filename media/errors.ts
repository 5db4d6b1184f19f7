/**
 * Typed errors of the media node. Each carries the context that identifies what failed and keeps the
 * underlying error as `cause`. `httpStatus` is what the WHIP/WHEP endpoints answer when the error
 * reaches them.
 */
export type MediaErrorCode =
  /** The SDP offer could not be parsed or breaks WHIP/WHEP rules (RFC 9725 §4.2: 400). */
  | 'BAD_SDP'
  /** The offer is well formed but we cannot take it (no usable codec, too many tracks): 422. */
  | 'UNSUPPORTED_OFFER'
  /** The offer or sdpfrag is larger than we accept: 413. */
  | 'SDP_TOO_LARGE'
  /** A method was called on a closed object. */
  | 'INVALID_STATE'
  /** A GStreamer pipeline failed to build or start. */
  | 'PIPELINE_FAILED'
  /** The node refuses more sessions (publisher capacity, a live stream's viewer caps): 503. */
  | 'OVERLOADED'
  /**
   * Too many requests or sessions still connecting from one client address, requests for one
   * playback id, or viewers waiting for streams without a publisher (per stream, per account): 429.
   */
  | 'RATE_LIMITED';

const STATUS: Record<MediaErrorCode, number> = {
  BAD_SDP: 400,
  UNSUPPORTED_OFFER: 422,
  SDP_TOO_LARGE: 413,
  INVALID_STATE: 409,
  PIPELINE_FAILED: 500,
  OVERLOADED: 503,
  RATE_LIMITED: 429,
};

/**
 * A media error. Its `message` is what the WHIP/WHEP client reads (a plain-text body): it names
 * what happened and what to do, never internal ids or paths; context for operators goes in the
 * logs. `retryAfterS` becomes a Retry-After header.
 */
export class MediaError extends Error {
  readonly code: MediaErrorCode;
  readonly httpStatus: number;
  readonly retryAfterS: number | undefined;
  constructor(code: MediaErrorCode, message: string, options?: { cause?: unknown; retryAfterS?: number }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.httpStatus = STATUS[code];
    this.retryAfterS = options?.retryAfterS;
  }
}

export class SdpError extends MediaError {
  constructor(code: 'BAD_SDP' | 'UNSUPPORTED_OFFER' | 'SDP_TOO_LARGE', message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

export class InvalidStateError extends MediaError {
  constructor(message: string) {
    super('INVALID_STATE', message);
  }
}

export class PipelineError extends MediaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PIPELINE_FAILED', message, options);
  }
}
