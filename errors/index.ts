/**
 * The error catalogues, one per area of the spec: the one list of failures a client can see.
 * docs/api.md documents each code and documents no other (a test checks both ways, and that every
 * code is raised somewhere); routes and services throw `ApiError`s made here, keeping the error
 * that caused one as its `cause` for the logs.
 *
 * Area A answers with the Error record `{ error, message }` (402 adds limit/used/plan/upgrade_url).
 * Area B answers with the envelope `{ success: false, error, code, status, details, requestId, traceId }`.
 */

/** Area A (songs). Codes are lowercase snake words, like the services the spec was modelled on. */
export const MUSIC_ERRORS = {
  invalid_request: { status: 400, message: 'The request is invalid.' },
  malformed_json: { status: 400, message: 'The body is not valid JSON.' },
  unauthorized: { status: 401, message: 'A valid API key is required: send Authorization: Bearer <API_KEY>.' },
  quota_exceeded: { status: 402, message: "This month's songs are used up." },
  not_found: { status: 404, message: 'No such song on this account.' },
  file_not_found: { status: 404, message: 'No such file.' },
  route_not_found: { status: 404, message: 'No such route.' },
  link_expired: { status: 403, message: 'This download link has expired or its signature is wrong.' },
  range_not_satisfiable: { status: 416, message: 'The byte range asked for is not in the file.' },
  payload_too_large: { status: 413, message: 'The request body is too large.' },
  unsupported_media_type: { status: 415, message: 'The body must be application/json.' },
  prompt_refused: { status: 422, message: 'The prompt names an artist.' },
  too_many_active: { status: 429, message: 'At most 3 of your songs can be in line or rendering at once.' },
  generator_unavailable: { status: 503, message: 'The generator is unavailable; try again shortly.' },
  service_unavailable: { status: 503, message: 'The service is briefly unavailable; try again shortly.' },
  render_failed: { status: 500, message: 'The song could not be rendered.' },
  internal_error: { status: 500, message: 'Something went wrong on our side.' },
} as const satisfies Record<string, { status: number; message: string }>;
export type MusicErrorCode = keyof typeof MUSIC_ERRORS;

/** Area B (streams, webhooks). Codes are `AREA/REASON`, as Daydream writes them. */
export const STREAM_ERRORS = {
  'REQUEST/INVALID': { status: 400, message: 'The request is invalid.' },
  'REQUEST/MALFORMED_JSON': { status: 400, message: 'The body is not valid JSON.' },
  'AUTH/UNAUTHORIZED': { status: 401, message: 'A valid API key is required: send Authorization: Bearer <token>.' },
  'ROUTE/NOT_FOUND': { status: 404, message: 'No such route.' },
  'REQUEST/TOO_LARGE': { status: 413, message: 'The request body is too large.' },
  'REQUEST/UNSUPPORTED_MEDIA_TYPE': { status: 415, message: 'The body must be application/json.' },
  'REQUEST/RANGE_NOT_SATISFIABLE': { status: 416, message: 'The byte range asked for is not in the file.' },
  'STREAMS/NOT_FOUND': { status: 404, message: 'No such stream on this account.' },
  'STREAMS/INVALID_PARAMS': { status: 400, message: 'The stream params are invalid.' },
  'STREAMS/RATE_LIMITED': { status: 429, message: 'Too many updates to this stream; slow down.' },
  'STREAMS/TOO_MANY_SOCKETS': { status: 429, message: 'Too many control sockets open; close one first.' },
  'STREAMS/NO_CAPACITY': { status: 503, message: 'No media node can take this stream right now.' },
  'STREAMS/MODEL_UNAVAILABLE': { status: 422, message: 'No media node has this model.' },
  'CLIPS/NOT_FOUND': { status: 404, message: 'No such clip on this stream.' },
  'CLIPS/NOT_LIVE': { status: 409, message: 'The stream has no live output to clip.' },
  'CLIPS/RATE_LIMITED': { status: 429, message: 'Too many clips of this stream; slow down.' },
  'CLIPS/LINK_EXPIRED': { status: 403, message: 'The download link is invalid or has expired.' },
  'SOUNDTRACK/SONG_NOT_FOUND': { status: 404, message: 'No such song (or take) on this account.' },
  'SOUNDTRACK/SONG_NOT_RENDERED': { status: 409, message: 'The song is not rendered yet; set it as the soundtrack once its status is done.' },
  'RECORDINGS/NOT_FOUND': { status: 404, message: 'No such recording on this stream.' },
  'RECORDINGS/ACTIVE': { status: 409, message: 'The recording is still being written; end it first (PATCH record: false).' },
  'RECORDINGS/EMPTY': { status: 409, message: 'The recording has no segments (yet).' },
  'RECORDINGS/LINK_EXPIRED': { status: 403, message: 'The link is invalid or has expired.' },
  'WEBHOOKS/NOT_FOUND': { status: 404, message: 'No such webhook endpoint on this account.' },
  'WEBHOOKS/LIMIT_REACHED': { status: 409, message: 'An account can have at most 10 webhook endpoints.' },
  'WEBHOOKS/URL_REJECTED': { status: 422, message: 'The webhook URL is not allowed.' },
  'WEBHOOKS/RATE_LIMITED': { status: 429, message: 'Too many webhook test sends, resends or recovers; slow down.' },
  'WEBHOOKS/DELIVERY_NOT_FOUND': { status: 404, message: 'No such delivery on this webhook endpoint.' },
  'WEBHOOKS/DELIVERY_PENDING': { status: 409, message: 'The delivery is pending: it is being sent already.' },
  'WEBHOOKS/ENDPOINT_DISABLED': { status: 409, message: 'The webhook endpoint is disabled; re-enable it first (PATCH is_active: true).' },
  'INTERNAL/ERROR': { status: 500, message: 'Something went wrong on our side.' },
  'SERVICE/UNAVAILABLE': { status: 503, message: 'The service is not ready; try again shortly.' },
} as const satisfies Record<string, { status: number; message: string }>;
export type StreamErrorCode = keyof typeof STREAM_ERRORS;

export type Area = 'music' | 'streams';

/** An error a route throws on purpose; the area's error handler renders it in the area's shape. */
export class ApiError extends Error {
  constructor(
    readonly area: Area,
    readonly code: string,
    readonly status: number,
    message: string,
    /** Area B `details` (e.g. field paths); ignored by Area A. */
    readonly details: unknown = null,
    /** Area A extra fields (402's limit/used/plan/upgrade_url); ignored by Area B. */
    readonly extra: Record<string, unknown> = {},
    /** Response headers to add (Retry-After…). */
    readonly headers: Record<string, string> = {},
    /** The error behind this one (logged, never shown to the client). */
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ApiError';
  }
}

export function musicError(
  code: MusicErrorCode,
  message?: string,
  opts: { extra?: Record<string, unknown>; headers?: Record<string, string>; cause?: unknown } = {},
): ApiError {
  const entry = MUSIC_ERRORS[code];
  return new ApiError('music', code, entry.status, message ?? entry.message, null, opts.extra, opts.headers, opts.cause);
}

export function streamError(
  code: StreamErrorCode,
  message?: string,
  opts: { details?: unknown; headers?: Record<string, string>; cause?: unknown } = {},
): ApiError {
  const entry = STREAM_ERRORS[code];
  return new ApiError('streams', code, entry.status, message ?? entry.message, opts.details ?? null, {}, opts.headers, opts.cause);
}

/**
 * Text from inside the server (engine errors, restart logs) made fit for a client: an absolute file
 * path keeps only its last two parts (`…/control_v11p_sd15_canny/model.onnx`: what is missing, not
 * where models and data live). URLs are left alone (a path after a host or scheme is not a file path).
 */
export function withoutPaths(text: string): string {
  return text.replace(/(?<![\w./~-])\/(?:[\w.@+~-]+\/)+[\w.@+~-]*/g, (path) => {
    const parts = path.split('/').filter(Boolean);
    return `…/${parts.slice(parts.length > 2 ? -2 : -1).join('/')}`;
  });
}
