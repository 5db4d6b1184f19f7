/**
 * Webhook signing (spec "Verifying signatures"), in the exact form stripe-node's
 * `stripe.webhooks.constructEvent(body, header, secret)` verifies:
 * `t=<unix seconds>,v1=<lowercase hex HMAC-SHA256("<t>.<raw body>")>`, no spaces, keyed with the
 * whole `whsec_…` string as UTF-8 (not base64-decoded).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** Header names; the spec's prefix word "Service" stands for our name. */
export const SIGNATURE_HEADER = 'Reverie-Webhook-Signature';
export const ID_HEADER = 'Reverie-Webhook-Id';
export const EVENT_HEADER = 'Reverie-Webhook-Event';
export const TIMESTAMP_HEADER = 'Reverie-Webhook-Timestamp';

/** Random bytes in a secret: 24, the Standard Webhooks minimum; base64 of 24 bytes has no padding. */
const SECRET_BYTES = 24;
const SECRET_PREFIX = 'whsec_';

/** A new signing secret: `whsec_` + base64 of 24 random bytes (32 characters). */
export function generateSecret(): string {
  return SECRET_PREFIX + randomBytes(SECRET_BYTES).toString('base64');
}

/**
 * What later reads show instead of the secret: the prefix, the first 4 and last 4 characters,
 * e.g. `whsec_Ab3d…x9Yz` (8 of 32 characters: 144 random bits stay hidden).
 */
export function secretPreview(secret: string): string {
  const body = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  if (body.length <= 8) return `${SECRET_PREFIX}…`;
  return `${SECRET_PREFIX}${body.slice(0, 4)}…${body.slice(-4)}`;
}

/** Lowercase hex HMAC-SHA256 of `<timestamp>.<payload>` keyed with the full secret string. */
export function computeSignature(payload: string, secret: string, timestampSec: number): string {
  return createHmac('sha256', secret).update(`${timestampSec}.${payload}`, 'utf8').digest('hex');
}

/** The signature header value: `t=<unix seconds>,v1=<hex>`. */
export function signatureHeader(payload: string, secret: string, timestampSec: number): string {
  return `t=${timestampSec},v1=${computeSignature(payload, secret, timestampSec)}`;
}

export interface SignedHeadersInput {
  eventId: string;
  eventType: string;
  /** The exact body bytes that will be sent. */
  payload: string;
  secret: string;
  /** Attempt time, ms since the epoch; `t` is its whole seconds (the attempt, not the event). */
  nowMs: number;
}

/** The four delivery headers plus content type, signed now. */
export function signedHeaders(input: SignedHeadersInput): Record<string, string> {
  const t = Math.floor(input.nowMs / 1000);
  return {
    'content-type': 'application/json',
    [SIGNATURE_HEADER.toLowerCase()]: signatureHeader(input.payload, input.secret, t),
    [ID_HEADER.toLowerCase()]: input.eventId,
    [EVENT_HEADER.toLowerCase()]: input.eventType,
    [TIMESTAMP_HEADER.toLowerCase()]: String(t),
  };
}

export interface VerifyOptions {
  /** Seconds a signature stays acceptable; default 300 (the reference receivers' tolerance). */
  toleranceSec?: number;
  nowMs?: number;
}

/**
 * Receiver-side check (for our own tools and docs): constant-time compare against every `v1`,
 * reject timestamps older than the tolerance. Returns false rather than throwing.
 */
export function verifySignature(payload: string, header: string, secret: string, options: VerifyOptions = {}): boolean {
  let t: number | null = null;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const k = part.slice(0, eq);
    const v = part.slice(eq + 1);
    if (k === 't' && /^\d+$/.test(v)) t = Number(v);
    else if (k === 'v1') candidates.push(v);
  }
  if (t === null || candidates.length === 0) return false;
  const nowSec = Math.floor((options.nowMs ?? Date.now()) / 1000);
  if (nowSec - t > (options.toleranceSec ?? 300)) return false;
  const expected = Buffer.from(computeSignature(payload, secret, t), 'utf8');
  return candidates.some((c) => {
    const got = Buffer.from(c, 'utf8');
    return got.length === expected.length && timingSafeEqual(got, expected);
  });
}
