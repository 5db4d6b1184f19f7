/**
 * Verifies a viewer's (or publisher's) JWT (RFC 7519, compact JWS RFC 7515) against public keys,
 * with node:crypto alone (no JOSE library is a dependency of the project):
 * - RS256: RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 §3.3), keys of 2048 bits or more;
 * - ES256: ECDSA P-256 with SHA-256, the signature being raw r‖s, 64 bytes (RFC 7518 §3.4);
 * - EdDSA: Ed25519 (RFC 8037 §3.1).
 * Nothing else is accepted: not `none`, not HMAC (a public key must never double as an HMAC
 * secret), and a key verifies only the algorithm of its own type (no algorithm confusion).
 *
 * Claims (what the admission rule needs): `exp` is required (a token that never expires is refused),
 * `nbf` is honoured, and `sub` must name the stream's playback id. No clock leeway: issuers that
 * sign for clients with skewed clocks give a few seconds more of `exp`.
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';

/** Longest token taken, chars (a JWT with a handful of claims is ≈ 300–900). */
export const MAX_JWT_LENGTH = 8192;

export type JwtAlg = 'RS256' | 'ES256' | 'EdDSA';

/**
 * Why a token was refused:
 * - `malformed`: not three base64url parts with JSON header and claims;
 * - `unsupported_alg`: `alg` other than RS256, ES256, EdDSA;
 * - `no_key`: no key of the rule fits the token's `alg` (and `kid`, when it names one);
 * - `bad_signature`: the signature does not verify;
 * - `no_expiry`: no numeric `exp`;
 * - `expired`: `exp` is past;
 * - `not_yet_valid`: `nbf` is in the future;
 * - `wrong_subject`: `sub` is not the playback id asked for.
 */
export type JwtFailure = 'malformed' | 'unsupported_alg' | 'no_key' | 'bad_signature' | 'no_expiry' | 'expired' | 'not_yet_valid' | 'wrong_subject';

export class JwtError extends Error {
  override readonly name = 'JwtError';
  constructor(
    readonly reason: JwtFailure,
    message: string,
  ) {
    super(message);
  }
}

/** A verification key, with the `kid` a JWKS named it by. */
export interface VerificationKey {
  kid?: string;
  key: KeyObject;
}

export interface VerifiedJwt {
  header: Record<string, unknown>;
  claims: Record<string, unknown>;
}

/** Whether `key` may verify `alg`: the key type, curve and size the algorithm is defined for. */
export function keyFitsAlg(key: KeyObject, alg: JwtAlg): boolean {
  const details = key.asymmetricKeyDetails;
  switch (alg) {
    case 'RS256':
      return key.asymmetricKeyType === 'rsa' && (details?.modulusLength ?? 0) >= 2048;
    case 'ES256':
      return key.asymmetricKeyType === 'ec' && details?.namedCurve === 'prime256v1';
    case 'EdDSA':
      return key.asymmetricKeyType === 'ed25519';
  }
}

/** Whether a public key can verify any algorithm we accept (what a rule's `public_key` must be). */
export function usableKey(key: KeyObject): boolean {
  return key.type === 'public' && (['RS256', 'ES256', 'EdDSA'] as const).some((alg) => keyFitsAlg(key, alg));
}

/** A PEM public key (SPKI) for a rule; throws naming what is wrong (a private key is refused: it must not be stored). */
export function parsePublicKeyPem(pem: string): KeyObject {
  if (/PRIVATE KEY/.test(pem)) throw new Error('a private key: give the public key (BEGIN PUBLIC KEY)');
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    throw new Error(`not a PEM public key (${(err as Error).message})`, { cause: err });
  }
  if (!usableKey(key)) throw new Error('the key must be RSA of 2048 bits or more (RS256), EC P-256 (ES256) or Ed25519 (EdDSA)');
  return key;
}

function b64json(part: string): Record<string, unknown> {
  if (!/^[A-Za-z0-9_-]+$/.test(part)) throw new JwtError('malformed', 'token part is not base64url');
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
  } catch {
    throw new JwtError('malformed', 'token part is not JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new JwtError('malformed', 'token part is not a JSON object');
  return value as Record<string, unknown>;
}

/** Checks the signature with one of `keys`; throws JwtError. Claims are not checked here (see checkClaims). */
export function verifyJws(token: string, keys: readonly VerificationKey[]): VerifiedJwt {
  if (token.length > MAX_JWT_LENGTH) throw new JwtError('malformed', `token longer than ${MAX_JWT_LENGTH} characters`);
  const parts = token.split('.');
  if (parts.length !== 3) throw new JwtError('malformed', 'not a compact JWS (three dot-separated parts)');
  const [h, c, s] = parts as [string, string, string];
  const header = b64json(h);
  const claims = b64json(c);
  const alg = header['alg'];
  if (alg !== 'RS256' && alg !== 'ES256' && alg !== 'EdDSA') throw new JwtError('unsupported_alg', `alg ${JSON.stringify(alg)} is not accepted (RS256, ES256, EdDSA)`);
  // RFC 7515 §4.1.11: a `crit` header we do not understand makes the token invalid.
  if (header['crit'] !== undefined) throw new JwtError('malformed', 'crit header parameters are not supported');
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new JwtError('malformed', 'signature is not base64url');
  const kid = typeof header['kid'] === 'string' ? header['kid'] : undefined;
  const candidates = keys.filter((k) => keyFitsAlg(k.key, alg) && (kid === undefined || k.kid === undefined || k.kid === kid));
  if (candidates.length === 0) throw new JwtError('no_key', `no key of this rule verifies ${alg}${kid !== undefined ? ` with kid ${JSON.stringify(kid)}` : ''}`);
  const data = Buffer.from(`${h}.${c}`);
  const signature = Buffer.from(s, 'base64url');
  for (const { key } of candidates) {
    const ok =
      alg === 'RS256'
        ? verify('sha256', data, key, signature)
        : alg === 'ES256'
          ? signature.length === 64 && verify('sha256', data, { key, dsaEncoding: 'ieee-p1363' }, signature)
          : verify(null, data, key, signature);
    if (ok) return { header, claims };
  }
  throw new JwtError('bad_signature', 'signature does not verify');
}

/** Checks `exp` (required), `nbf` and `sub` (the playback id) at `nowS` (seconds since the epoch). */
export function checkClaims(claims: Record<string, unknown>, expect: { subject: string; nowS: number }): void {
  const { exp, nbf, sub } = claims;
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw new JwtError('no_expiry', 'token has no numeric exp');
  if (expect.nowS >= exp) throw new JwtError('expired', 'token expired');
  if (nbf !== undefined && (typeof nbf !== 'number' || expect.nowS < nbf)) throw new JwtError('not_yet_valid', 'token not valid yet (nbf)');
  if (sub !== expect.subject) throw new JwtError('wrong_subject', 'token is for another playback id (sub)');
}
