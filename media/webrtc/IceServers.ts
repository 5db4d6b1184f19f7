/**
 * The STUN and TURN servers a WHIP/WHEP client is offered (RFC 9725 §4.6: `Link: <url>;
 * rel="ice-server"`), with TURN credentials made per session from a shared secret — the TURN REST
 * scheme that coturn verifies with `use-auth-secret` / `static-auth-secret`:
 *
 *   username   = <unix expiry time>:<128 random bits, hex>
 *   credential = base64(HMAC-SHA1(secret, username))
 *
 * so no long-lived password ever appears in a header, and a leaked credential expires on its own.
 * The username names nothing of ours: over `turn:` it crosses the network in clear, and a session
 * or stream id in it would hand whoever sees it that resource (a session id is what ends a viewer).
 * Publishers (keyed) get `ttlS`; keyless viewers get the short `viewerTtlS`: coturn checks the
 * expiry only when it authenticates an Allocate, then verifies the allocation's Refresh,
 * CreatePermission and ChannelBind with the key it cached, so a viewer that allocated in time keeps
 * its relay past the expiry, while a leaked viewer credential opens nothing for long.
 * TURN servers are offered only in answers to an accepted POST (a session exists); OPTIONS gets
 * STUN only (RFC 9725 calls ICE servers on OPTIONS NOT RECOMMENDED, and it is unauthenticated).
 */
import { createHmac, randomBytes } from 'node:crypto';

export interface TurnConfig {
  /** `turn:` / `turns:` URLs (e.g. `turn:turn.example.com:3478?transport=udp`). */
  urls: string[];
  /** The secret coturn has as `static-auth-secret`. */
  secret: string;
  /** Seconds a publisher's (WHIP) credential may open allocations (TURN_CREDENTIAL_TTL). */
  ttlS: number;
  /** Seconds a viewer's (WHEP) credential may open allocations (TURN_VIEWER_CREDENTIAL_TTL). Default ttlS. */
  viewerTtlS?: number;
}

export interface TurnCredential {
  username: string;
  credential: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** Who a credential is for: `publisher` (WHIP, holds the stream key) or `viewer` (WHEP, keyless). */
export type TurnRole = 'publisher' | 'viewer';

/** A fresh TURN REST credential (random username), valid for `ttlS` seconds from `nowMs`. */
export function turnCredential(secret: string, ttlS: number, nowMs = Date.now()): TurnCredential {
  const expires = Math.floor(nowMs / 1000) + Math.max(1, Math.floor(ttlS));
  const username = `${expires}:${randomBytes(16).toString('hex')}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64'), expiresAt: expires * 1000 };
}

/** Link header values: STUN always; TURN with a fresh credential when `role` is given (a session exists). */
export function iceServerLinks(opts: { stunUrls?: readonly string[]; turn?: TurnConfig | undefined }, role: TurnRole | null, nowMs = Date.now()): string[] {
  const links = (opts.stunUrls ?? []).map((url) => `<${url}>; rel="ice-server"`);
  if (opts.turn && role !== null) {
    const ttlS = role === 'viewer' ? (opts.turn.viewerTtlS ?? opts.turn.ttlS) : opts.turn.ttlS;
    const c = turnCredential(opts.turn.secret, ttlS, nowMs);
    for (const url of opts.turn.urls) links.push(`<${url}>; rel="ice-server"; username="${c.username}"; credential="${c.credential}"; credential-type="password"`);
  }
  return links;
}
