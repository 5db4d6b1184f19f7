/**
 * Decides one publish or play request against an admission rule (store/records.ts AdmissionRule):
 * - `hook`: POSTs `{action, stream_id, playback_id, client_ip, protocol, query, token}` as JSON to
 *   the rule's URL through the outbound client (the webhooks' address rules: HTTPS, public unicast,
 *   checked at every connection; no redirects), with `hookTimeoutMs` for the whole exchange. A 2xx
 *   admits; a 401 refuses with 401; any other answer, a timeout or a failed connection refuses
 *   with 403 (fail closed: a hook that cannot answer admits nobody).
 * - `jwt`: the token must verify against the rule's public key or JWKS (JwtVerifier.ts), carry an
 *   `exp` not yet past, and name the playback id as `sub`; else 401.
 * Hook decisions, refusals included, are kept `decisionTtlMs` per (rule, action, protocol, stream,
 * client address, token, query): an LL-HLS player's ≈ 10 requests a second cost one hook call per
 * TTL, and concurrent requests wait for the same call. A hook that hangs is therefore waited for
 * once per TTL, not once per request. JWT checks are a signature verification (tens of µs) and are
 * not cached; the JWKS they need is (JwksCache.ts).
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { AdmissionRequest, AdmissionVerdict } from '../media/index.ts';
import type { AdmissionRule } from '../store/index.ts';
import { SafeHttpError, type SafeHttpClient } from '../outbound/index.ts';
import { JwksCache } from './JwksCache.ts';
import { JwtError, checkClaims, parsePublicKeyPem, verifyJws, type VerificationKey } from './JwtVerifier.ts';

export interface AdmissionSettings {
  /** ms a hook call (connect, headers and body) may take before it counts as a refusal. */
  hookTimeoutMs: number;
  /** ms a hook's decision, and a stream's rule, are reused. */
  decisionTtlMs: number;
  /** ms a fetched JWKS is used. */
  jwksTtlMs: number;
}

/** Defaults of the operator settings (ADMISSION_HOOK_TIMEOUT_MS, ADMISSION_CACHE_TTL, ADMISSION_JWKS_CACHE_TTL). */
export const ADMISSION_DEFAULTS: AdmissionSettings = {
  // Short: the client (OBS, a player) is waiting on it, and WHIP clients give up after ≈ 10 s.
  hookTimeoutMs: 2000,
  // "A few seconds": a revoked viewer is refused within this, and a hook sees one call per client per TTL.
  decisionTtlMs: 5000,
  // Issuers rotate keys on the scale of days and publish the new key ahead of use.
  jwksTtlMs: 300_000,
};

/** Decisions remembered at most (one per client and token of a gated stream); the oldest go first. */
const MAX_DECISIONS = 10_000;
/** Hook answer bytes read (only the status counts). */
const HOOK_RESPONSE_BYTES = 1024;

/** What the request names besides the rule's input: the stream's public playback id. */
export type GateRequest = AdmissionRequest & { playbackId: string };

export interface AdmissionGateOptions {
  /** The outbound client (hooks, JWKS); null: hook and JWKS rules refuse (403). */
  client: SafeHttpClient | null;
  settings: AdmissionSettings;
  logger: Logger;
  now?: () => number;
}

type Decision = { until: number; verdict: Promise<AdmissionVerdict> };

export class AdmissionGate {
  readonly #o: AdmissionGateOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #decisions = new Map<string, Decision>();
  readonly #jwks: JwksCache | null;
  /** Parsed PEM keys of JWT rules, by PEM text. */
  readonly #pems = new Map<string, VerificationKey[]>();
  /** Hook calls made (tests and metrics: a part request must not make one). */
  hookCalls = 0;

  constructor(opts: AdmissionGateOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'AdmissionGate' });
    this.#now = opts.now ?? Date.now;
    this.#jwks = opts.client ? new JwksCache({ client: opts.client, ttlMs: opts.settings.jwksTtlMs, timeoutMs: opts.settings.hookTimeoutMs, ...(opts.now ? { now: opts.now } : {}) }) : null;
  }

  /** The JWKS cache (the API fetches a rule's JWKS once when it is set, which also warms it). */
  get jwks(): JwksCache | null {
    return this.#jwks;
  }

  async decide(rule: AdmissionRule | null, req: GateRequest): Promise<AdmissionVerdict> {
    if (!rule || !rule.actions.includes(req.action)) return { admitted: true };
    if (rule.type === 'jwt') return this.#checkJwt(rule, req);
    const key = createHash('sha256')
      .update(JSON.stringify([rule.url, req.action, req.protocol, req.streamId, req.clientIp, req.token, req.query]))
      .digest('base64url');
    const now = this.#now();
    const hit = this.#decisions.get(key);
    if (hit && hit.until > now) return hit.verdict;
    const entry: Decision = { until: Number.POSITIVE_INFINITY, verdict: this.#callHook(rule.url, req) };
    void entry.verdict.then(() => (entry.until = this.#now() + this.#o.settings.decisionTtlMs));
    this.#decisions.delete(key);
    if (this.#decisions.size >= MAX_DECISIONS) this.#decisions.delete(this.#decisions.keys().next().value as string);
    this.#decisions.set(key, entry);
    return entry.verdict;
  }

  async #callHook(url: string, req: GateRequest): Promise<AdmissionVerdict> {
    if (!this.#o.client) return { admitted: false, status: 403, reason: 'admission hook unavailable on this server' };
    this.hookCalls++;
    const body = JSON.stringify({ action: req.action, stream_id: req.streamId, playback_id: req.playbackId, client_ip: req.clientIp, protocol: req.protocol, query: req.query, token: req.token });
    try {
      const res = await this.#o.client.request(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'user-agent': 'Reverie-Admission/1.0' },
        body,
        timeoutMs: this.#o.settings.hookTimeoutMs,
        maxResponseBytes: HOOK_RESPONSE_BYTES,
      });
      if (res.status >= 200 && res.status < 300) return { admitted: true };
      this.#log.info(`decide() | refused by hook [streamId:${req.streamId}] [action:${req.action}] [status:${res.status}]`);
      return { admitted: false, status: res.status === 401 ? 401 : 403, reason: `refused by the admission hook (HTTP ${res.status})` };
    } catch (err) {
      const kind = err instanceof SafeHttpError ? err.kind : 'error';
      this.#log.warn(`decide() | admission hook failed, refusing [streamId:${req.streamId}] [kind:${kind}] [err:${(err as Error).message}]`);
      return { admitted: false, status: 403, reason: kind === 'timeout' ? 'the admission hook did not answer in time' : 'the admission hook could not be reached' };
    }
  }

  async #checkJwt(rule: Extract<AdmissionRule, { type: 'jwt' }>, req: GateRequest): Promise<AdmissionVerdict> {
    if (!req.token) return { admitted: false, status: 401, reason: 'a token is required: Authorization: Bearer <jwt> or ?jwt=<jwt>' };
    let keys: VerificationKey[];
    try {
      keys = await this.#keysOf(rule);
    } catch (err) {
      this.#log.warn(`decide() | JWT keys unavailable, refusing [streamId:${req.streamId}] [err:${(err as Error).message}]`);
      return { admitted: false, status: 403, reason: 'the keys that verify tokens for this stream are unavailable' };
    }
    try {
      const { claims } = verifyJws(req.token, keys);
      checkClaims(claims, { subject: req.playbackId, nowS: this.#now() / 1000 });
      return { admitted: true };
    } catch (err) {
      if (err instanceof JwtError) return { admitted: false, status: 401, reason: `invalid token: ${err.message}` };
      throw err;
    }
  }

  async #keysOf(rule: Extract<AdmissionRule, { type: 'jwt' }>): Promise<VerificationKey[]> {
    if (rule.publicKey) {
      let keys = this.#pems.get(rule.publicKey);
      if (!keys) {
        keys = [{ key: parsePublicKeyPem(rule.publicKey) }];
        if (this.#pems.size >= 1000) this.#pems.clear();
        this.#pems.set(rule.publicKey, keys);
      }
      return keys;
    }
    if (!rule.jwksUrl) throw new Error('the rule names no key');
    if (!this.#jwks) throw new Error('no outbound client for JWKS');
    return this.#jwks.keys(rule.jwksUrl);
  }
}
