/**
 * Short-lived tokens for the per-stream control WebSocket. Browsers cannot set an Authorization
 * header on a WebSocket, and an API key must not sit in a page's URL: a page asks its own backend
 * (which holds the key) for a token, and opens the socket with `?token=`. A token names one
 * account and one stream and works for CONTROL_TOKEN_TTL_S seconds; a socket it opened ends at its
 * expiry unless a fresh token renews it (control/ControlSession.ts).
 *
 * Format: `ctk_<base64url(JSON {a, s, e})>.<base64url(HMAC-SHA256)>`; stateless, so every api
 * replica that shares the link-signing secret verifies it.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Seconds a control token works (long enough to open a socket, short enough to be worthless in a log). */
export const CONTROL_TOKEN_TTL_S = 60;

export interface ControlTokenClaims {
  accountId: string;
  streamId: string;
  /** ms since the epoch. */
  expiresAt: number;
}

export class ControlTokens {
  readonly #secret: Buffer;
  readonly #now: () => number;

  constructor(secret: string | Buffer, now: () => number = Date.now) {
    this.#secret = Buffer.isBuffer(secret) ? secret : Buffer.from(secret, 'utf8');
    this.#now = now;
  }

  #mac(body: string): Buffer {
    return createHmac('sha256', this.#secret).update(`control-token\n${body}`).digest();
  }

  issue(accountId: string, streamId: string, ttlS = CONTROL_TOKEN_TTL_S): { token: string; expiresAt: number } {
    const expiresAt = this.#now() + ttlS * 1000;
    const body = Buffer.from(JSON.stringify({ a: accountId, s: streamId, e: expiresAt })).toString('base64url');
    return { token: `ctk_${body}.${this.#mac(body).toString('base64url')}`, expiresAt };
  }

  /** The claims of a valid, unexpired token for `streamId`; null for anything else. Never throws. */
  verify(token: string, streamId: string): ControlTokenClaims | null {
    const m = /^ctk_([A-Za-z0-9_-]{1,512})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m) return null;
    const [, body, sig] = m as unknown as [string, string, string];
    const given = Buffer.from(sig, 'base64url');
    const want = this.#mac(body);
    if (given.length !== want.length || !timingSafeEqual(given, want)) return null;
    let claims: { a?: unknown; s?: unknown; e?: unknown };
    try {
      claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as typeof claims;
    } catch {
      return null;
    }
    if (typeof claims.a !== 'string' || claims.s !== streamId || typeof claims.e !== 'number' || claims.e < this.#now()) return null;
    return { accountId: claims.a, streamId, expiresAt: claims.e };
  }
}
