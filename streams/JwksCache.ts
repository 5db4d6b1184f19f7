/**
 * JWKS documents (RFC 7517) of admission rules, fetched through the outbound client (the
 * webhooks' address rules: HTTPS, public unicast only, checked at every connection) and kept
 * `ttlMs` per URL (ADMISSION_JWKS_CACHE_TTL, default 300 s), so a viewer's token costs no fetch.
 * Concurrent asks for one URL share one fetch. A failed fetch is remembered for RETRY_AFTER_FAILURE_MS
 * (every viewer of a stream whose JWKS host is down would otherwise each wait for a fetch).
 * Keys whose `use` is not `sig`, and keys of types we cannot verify with, are skipped.
 */
import { createPublicKey } from 'node:crypto';
import type { SafeHttpClient } from '../outbound/index.ts';
import { usableKey, type VerificationKey } from './JwtVerifier.ts';

/** Largest JWKS document read, bytes (a JWKS of 20 RSA-4096 keys is ≈ 16 KiB). */
export const JWKS_MAX_BYTES = 64 * 1024;
/** Keys taken from one document at most. */
export const JWKS_MAX_KEYS = 20;
/** ms a failed fetch is remembered before the next ask fetches again. */
export const RETRY_AFTER_FAILURE_MS = 5000;
/** URLs remembered at most (one per rule that names a JWKS). */
const MAX_URLS = 1000;

export interface JwksCacheOptions {
  client: SafeHttpClient;
  /** ms a fetched document is used. */
  ttlMs: number;
  /** ms one fetch may take. */
  timeoutMs: number;
  now?: () => number;
}

type Entry = { until: number; keys: Promise<VerificationKey[]> };

export class JwksCache {
  readonly #o: JwksCacheOptions;
  readonly #now: () => number;
  readonly #entries = new Map<string, Entry>();

  constructor(opts: JwksCacheOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
  }

  /** The document's keys (cached); rejects with an Error saying why when it cannot be had. */
  keys(url: string): Promise<VerificationKey[]> {
    const now = this.#now();
    const hit = this.#entries.get(url);
    if (hit && hit.until > now) return hit.keys;
    const entry: Entry = { until: Number.POSITIVE_INFINITY, keys: this.#fetch(url) };
    entry.keys.then(
      () => (entry.until = this.#now() + this.#o.ttlMs),
      () => (entry.until = this.#now() + Math.min(this.#o.ttlMs, RETRY_AFTER_FAILURE_MS)),
    );
    if (this.#entries.size >= MAX_URLS) this.#entries.delete(this.#entries.keys().next().value as string);
    this.#entries.set(url, entry);
    return entry.keys;
  }

  async #fetch(url: string): Promise<VerificationKey[]> {
    const res = await this.#o.client.request(url, { headers: { accept: 'application/jwk-set+json, application/json' }, timeoutMs: this.#o.timeoutMs, maxResponseBytes: JWKS_MAX_BYTES });
    if (res.status !== 200) throw new Error(`JWKS ${url} answered HTTP ${res.status}`);
    if (res.truncated) throw new Error(`JWKS ${url} is larger than ${JWKS_MAX_BYTES} bytes`);
    return parseJwks(res.body.toString('utf8'));
  }
}

/** The usable verification keys of a JWKS document; throws when there are none. */
export function parseJwks(text: string): VerificationKey[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error('the JWKS is not JSON');
  }
  const list = (doc as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list)) throw new Error('the JWKS has no "keys" array');
  const keys: VerificationKey[] = [];
  for (const jwk of list.slice(0, JWKS_MAX_KEYS)) {
    if (jwk === null || typeof jwk !== 'object') continue;
    const j = jwk as Record<string, unknown>;
    if (j['use'] !== undefined && j['use'] !== 'sig') continue;
    // Only the public members: a JWKS that carries a private part (`d`) is still read as public.
    const pub = Object.fromEntries(Object.entries(j).filter(([k]) => ['kty', 'n', 'e', 'crv', 'x', 'y'].includes(k)));
    try {
      const key = createPublicKey({ key: pub as never, format: 'jwk' });
      if (usableKey(key)) keys.push({ ...(typeof j['kid'] === 'string' ? { kid: j['kid'] } : {}), key });
    } catch {
      // A key of a kind node:crypto cannot read is skipped; the others still count.
    }
  }
  if (keys.length === 0) throw new Error('the JWKS holds no RSA (2048+), EC P-256 or Ed25519 signing key');
  return keys;
}
