/**
 * Signs JWTs for admission tests with node:crypto (the algorithms JwtVerifier accepts, and the
 * ones it must refuse), independently of the verifier's code.
 */
import { createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';

export type TestAlg = 'RS256' | 'ES256' | 'EdDSA';

export interface TestKeyPair {
  alg: TestAlg;
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** SPKI PEM of the public key (what a rule's `public_key` holds). */
  pem: string;
}

export function keyPair(alg: TestAlg): TestKeyPair {
  const { privateKey, publicKey } =
    alg === 'RS256' ? generateKeyPairSync('rsa', { modulusLength: 2048 }) : alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'prime256v1' }) : generateKeyPairSync('ed25519');
  return { alg, privateKey, publicKey, pem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

/** A compact JWS of `claims`, signed by `pair` (header extras such as `kid` merged in). */
export function signJwt(pair: TestKeyPair, claims: Record<string, unknown>, header: Record<string, unknown> = {}): string {
  const input = `${b64({ alg: pair.alg, typ: 'JWT', ...header })}.${b64(claims)}`;
  const data = Buffer.from(input);
  const sig =
    pair.alg === 'RS256' ? sign('sha256', data, pair.privateKey) : pair.alg === 'ES256' ? sign('sha256', data, { key: pair.privateKey, dsaEncoding: 'ieee-p1363' }) : sign(null, data, pair.privateKey);
  return `${input}.${sig.toString('base64url')}`;
}

/** An HS256 token whose secret is `secret` (what an algorithm-confusion attack sends). */
export function signHs256(secret: string | Buffer, claims: Record<string, unknown>): string {
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** The unsigned token (`alg: none`). */
export function unsignedJwt(claims: Record<string, unknown>): string {
  return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`;
}

/** A JWKS document with the public keys, `kid`s as given. */
export function jwks(keys: { pair: TestKeyPair; kid?: string; use?: string }[]): string {
  return JSON.stringify({ keys: keys.map(({ pair, kid, use }) => ({ ...pair.publicKey.export({ format: 'jwk' }), ...(kid ? { kid } : {}), ...(use ? { use } : {}) })) });
}
