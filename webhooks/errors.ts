/**
 * Typed errors of the webhooks area. Their codes are Area B codes of the one catalogue
 * (errors/index.ts): a route renders one as it is, with that catalogue's status.
 */
import { STREAM_ERRORS, type StreamErrorCode } from '../errors/index.ts';

/**
 * The codes this folder throws: every `WEBHOOKS/*` code of the catalogue, and `REQUEST/INVALID`
 * for a field other than the URL that is invalid (events, name, limit…; `details.field` names it).
 */
export type WebhookErrorCode = Extract<StreamErrorCode, `WEBHOOKS/${string}`> | 'REQUEST/INVALID';

/**
 * Why a URL was refused:
 * - `invalid_url`: not an absolute URL the WHATWG parser accepts;
 * - `too_long`: over 2048 characters;
 * - `not_https`: any scheme but https;
 * - `credentials`: user:password@ in the URL;
 * - `local_name`: `localhost`, `*.localhost` and other names that only mean something locally;
 * - `private_address`: the host is, or resolves to, an address that is not publicly routable;
 * - `unresolvable`: the name has no A/AAAA record (we cannot show it is public).
 */
export type UrlRejectReason =
  | 'invalid_url'
  | 'too_long'
  | 'not_https'
  | 'credentials'
  | 'local_name'
  | 'private_address'
  | 'unresolvable';

export interface WebhookErrorDetails {
  /** The request field at fault (`url`, `events`, `name`, `limit`…). */
  field?: string;
  reason?: UrlRejectReason | string;
  /** For `private_address`: the offending address and its range name (`loopback`, `private`…). */
  address?: string;
  range?: string;
  /** For `LIMIT_REACHED` and `RATE_LIMITED`: the limit. */
  limit?: number;
  /** For `RATE_LIMITED`: seconds until one more is allowed. */
  retry_after_seconds?: number;
  id?: string;
}

export class WebhookError extends Error {
  override readonly name = 'WebhookError';
  readonly code: WebhookErrorCode;
  readonly httpStatus: number;
  readonly details: WebhookErrorDetails;

  constructor(code: WebhookErrorCode, message: string, details: WebhookErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.httpStatus = STREAM_ERRORS[code].status;
    this.details = details;
  }
}

export function isWebhookError(err: unknown): err is WebhookError {
  return err instanceof WebhookError;
}
