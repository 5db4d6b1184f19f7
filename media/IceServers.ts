/**
 * The STUN and TURN servers a WHIP/WHEP client is offered (RFC 9725 §4.6: `Link: <url>;
 * rel="ice-server"`), with TURN credentials made per session from a shared secret — the TURN REST
 * scheme that coturn verifies with `use-auth-secret` / `static-auth-secret`:
 *
 *   username   = <unix expiry time>:<session id>
 *   credential = base64(HMAC-SHA1(secret, username))
 *
 * so no long-lived password ever appears in a header, and a leaked credential expires on its own.
 * TURN servers are offered only in answers to an accepted POST (a session exists); OPTIONS gets
 * STUN only (RFC 9725 calls ICE servers on OPTIONS NOT RECOMMENDED, and it is unauthenticated).
 */
import { createHmac } from 'node:crypto';

export interface TurnConfig {
  /** `turn:` / `turns:` URLs (e.g. `turn:turn.example.com:3478?transport=udp`). */
  urls: string[];
  /** The secret coturn has as `static-auth-secret`. */
  secret: string;
  /** Seconds a credential stays valid (coturn checks it on every allocate, refresh and permission). */
  ttlS: number;
}

export interface TurnCredential {
  username: string;
  credential: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** A TURN REST credential for `id`, valid for `ttlS` seconds from `nowMs`. */
export function turnCredential(secret: string, id: string, ttlS: number, nowMs = Date.now()): TurnCredential {
  const expires = Math.floor(nowMs / 1000) + Math.max(1, Math.floor(ttlS));
  const username = `${expires}:${id}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64'), expiresAt: expires * 1000 };
}

/** Link header values: STUN always; TURN with a fresh credential when `sessionId` is given. */
export function iceServerLinks(opts: { stunUrls?: readonly string[]; turn?: TurnConfig | undefined }, sessionId: string | null, nowMs = Date.now()): string[] {
  const links = (opts.stunUrls ?? []).map((url) => `<${url}>; rel="ice-server"`);
  if (opts.turn && sessionId !== null) {
    const c = turnCredential(opts.turn.secret, sessionId, opts.turn.ttlS, nowMs);
    for (const url of opts.turn.urls) links.push(`<${url}>; rel="ice-server"; username="${c.username}"; credential="${c.credential}"; credential-type="password"`);
  }
  return links;
}
