/**
 * Typed errors of the webhooks area. Routes (control/) map `code` to the Area B error envelope;
 * `httpStatus` is our suggestion for that mapping (the spec leaves webhook statuses "not shown").
 */

/** Every code this folder throws, with the HTTP status we suggest and what it means. */
export const WEBHOOK_ERRORS = {
  /** No such endpoint on this account (another account's endpoint is also "not found"). */
  'WEBHOOKS/NOT_FOUND': { httpStatus: 404, message: 'Webhook endpoint not found' },
  /** The account already has the maximum number of endpoints (10). */
  'WEBHOOKS/LIMIT_REACHED': { httpStatus: 409, message: 'Webhook endpoint limit reached' },
  /** The URL failed the registration rules (HTTPS only, publicly routable); `details.reason` says which. */
  'WEBHOOKS/URL_REJECTED': { httpStatus: 422, message: 'Webhook URL rejected' },
  /** A field other than the URL is invalid (events, name, limit…); `details.field` names it. */
  'WEBHOOKS/INVALID_INPUT': { httpStatus: 400, message: 'Invalid webhook request' },
  /** Too many test sends, resends or recovers from this account in the last minute; `details.retry_after_seconds` says when to retry. */
  'WEBHOOKS/RATE_LIMITED': { httpStatus: 429, message: 'Too many webhook requests' },
  /** No such delivery on this endpoint (resend, attempts). */
  'WEBHOOKS/DELIVERY_NOT_FOUND': { httpStatus: 404, message: 'Webhook delivery not found' },
  /** Resend of a delivery that is pending: it is being sent already. */
  'WEBHOOKS/DELIVERY_PENDING': { httpStatus: 409, message: 'Webhook delivery is pending' },
  /** Resend or recover on a disabled endpoint: re-enable it first. */
  'WEBHOOKS/ENDPOINT_DISABLED': { httpStatus: 409, message: 'Webhook endpoint is disabled' },
} as const;

export type WebhookErrorCode = keyof typeof WEBHOOK_ERRORS;

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
    this.httpStatus = WEBHOOK_ERRORS[code].httpStatus;
    this.details = details;
  }
}

export function isWebhookError(err: unknown): err is WebhookError {
  return err instanceof WebhookError;
}
