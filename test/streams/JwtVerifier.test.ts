/**
 * JwtVerifier: RS256, ES256 and EdDSA tokens signed by node:crypto verify; everything else that a
 * viewer could bring is refused with its reason — another key's signature, `alg: none`, HS256 made
 * with the public key (algorithm confusion), a key of the wrong type, an ES256 signature in DER,
 * expiry, `nbf`, the wrong playback id, no `exp`, junk. JWKS documents: `kid` picks the key, keys
 * not for signing and unreadable keys are skipped, a private part is never used.
 */
import { createPublicKey, generateKeyPairSync, sign } from 'node:crypto';
import t from 'tap';
import { parseJwks } from '../../streams/JwksCache.ts';
import { checkClaims, JwtError, parsePublicKeyPem, verifyJws, type VerificationKey } from '../../streams/JwtVerifier.ts';
import { jwks, keyPair, signHs256, signJwt, unsignedJwt } from '../helpers/jwt.ts';

const NOW = 1_800_000_000;
const claims = { sub: 'pb_abc', exp: NOW + 60 };
const keysOf = (...pems: string[]): VerificationKey[] => pems.map((p) => ({ key: parsePublicKeyPem(p) }));
const reason = (fn: () => unknown): string => {
  try {
    fn();
    return 'accepted';
  } catch (err) {
    return err instanceof JwtError ? err.reason : `threw ${(err as Error).message}`;
  }
};
const full = (token: string, keys: VerificationKey[], sub = 'pb_abc', nowS = NOW) =>
  reason(() => checkClaims(verifyJws(token, keys).claims, { subject: sub, nowS }));

t.test('RS256, ES256 and EdDSA tokens verify with their public key', { timeout: 30_000 }, async (t) => {
  for (const alg of ['RS256', 'ES256', 'EdDSA'] as const) {
    const pair = keyPair(alg);
    t.equal(full(signJwt(pair, claims), keysOf(pair.pem)), 'accepted', alg);
    t.equal(full(signJwt(pair, claims), keysOf(keyPair(alg).pem)), 'bad_signature', `${alg} signed by another key`);
  }
});

t.test('alg none, HS256 with the public key as secret and unknown algs are refused before any key is tried', { timeout: 30_000 }, async (t) => {
  const rsa = keyPair('RS256');
  t.equal(full(unsignedJwt(claims), keysOf(rsa.pem)), 'unsupported_alg', 'alg none');
  t.equal(full(signHs256(rsa.pem, claims), keysOf(rsa.pem)), 'unsupported_alg', 'HS256 keyed with the PEM (algorithm confusion)');
  const ps = `${Buffer.from(JSON.stringify({ alg: 'PS256' })).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.AAAA`;
  t.equal(full(ps, keysOf(rsa.pem)), 'unsupported_alg', 'PS256');
});

t.test('a key verifies only its own algorithm; an ES256 signature must be raw r||s', { timeout: 30_000 }, async (t) => {
  const ec = keyPair('ES256');
  const ed = keyPair('EdDSA');
  t.equal(full(signJwt(ec, claims), keysOf(ed.pem)), 'no_key', 'ES256 token, Ed25519 key');
  // The same ECDSA signature in DER (what a naive signer emits): not a JWS signature.
  const input = signJwt(ec, claims).split('.').slice(0, 2).join('.');
  const der = sign('sha256', Buffer.from(input), ec.privateKey).toString('base64url');
  t.equal(full(`${input}.${der}`, keysOf(ec.pem)), 'bad_signature');
  const small = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
  t.throws(() => parsePublicKeyPem(small), /2048/, 'an RSA key under 2048 bits is not taken for a rule');
  t.throws(() => parsePublicKeyPem(ec.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()), /private key/, 'nor a private key');
  t.throws(() => parsePublicKeyPem('not a key'), /PEM/);
});

t.test('claims: exp required and not past, nbf honoured, sub is the playback id', { timeout: 30_000 }, async (t) => {
  const pair = keyPair('EdDSA');
  const k = keysOf(pair.pem);
  t.equal(full(signJwt(pair, { sub: 'pb_abc', exp: NOW }), k), 'expired', 'exp == now is expired');
  t.equal(full(signJwt(pair, { sub: 'pb_abc', exp: NOW - 1 }), k), 'expired');
  t.equal(full(signJwt(pair, { sub: 'pb_abc' }), k), 'no_expiry');
  t.equal(full(signJwt(pair, { sub: 'pb_abc', exp: String(NOW + 60) }), k), 'no_expiry', 'a string exp');
  t.equal(full(signJwt(pair, { ...claims, nbf: NOW + 10 }), k), 'not_yet_valid');
  t.equal(full(signJwt(pair, { ...claims, nbf: NOW - 10 }), k), 'accepted');
  t.equal(full(signJwt(pair, { ...claims, sub: 'pb_other' }), k), 'wrong_subject');
  t.equal(full(signJwt(pair, { ...claims, sub: undefined, playback_id: 'pb_abc' }), k), 'wrong_subject', 'only sub names the playback id');
});

t.test('malformed tokens are refused as such', { timeout: 30_000 }, async (t) => {
  const k = keysOf(keyPair('EdDSA').pem);
  for (const token of ['', 'a.b', 'a.b.c.d', '!!!.e30.', `${Buffer.from('[1]').toString('base64url')}.e30.`, 'x'.repeat(9000)]) {
    t.equal(full(token, k), 'malformed', JSON.stringify(token.slice(0, 20)));
  }
  const crit = signJwt(keyPair('EdDSA'), claims, { crit: ['exp'] });
  t.equal(full(crit, k), 'malformed', 'a crit header');
});

t.test('JWKS: kid picks the key; enc keys, unreadable keys and private parts are left out', { timeout: 30_000 }, async (t) => {
  const a = keyPair('RS256');
  const b = keyPair('ES256');
  const keys = parseJwks(jwks([{ pair: a, kid: 'a' }, { pair: b, kid: 'b' }]));
  t.equal(keys.length, 2);
  t.equal(full(signJwt(a, claims, { kid: 'a' }), keys), 'accepted');
  t.equal(full(signJwt(b, claims, { kid: 'b' }), keys), 'accepted');
  t.equal(full(signJwt(a, claims, { kid: 'b' }), keys), 'no_key', 'kid b names an EC key; an RS256 token cannot use it');
  t.equal(full(signJwt(keyPair('RS256'), claims, { kid: 'a' }), keys), 'bad_signature', 'another key under kid a');
  t.equal(parseJwks(jwks([{ pair: a, use: 'enc' }, { pair: b }])).length, 1, 'use: enc is skipped');
  const withPrivate = JSON.stringify({ keys: [{ ...a.privateKey.export({ format: 'jwk' }), kid: 'p' }, { kty: 'oct', k: 'c2VjcmV0' }, { kty: 'EC', crv: 'P-256', x: 'bad' }] });
  const parsed = parseJwks(withPrivate);
  t.equal(parsed.length, 1, 'the oct key and the broken EC key are skipped');
  t.equal(parsed[0]?.key.type, 'public', 'a private JWK is read as its public part only');
  t.throws(() => parseJwks('{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}'), /no RSA/, 'a JWKS with no signing key');
  t.throws(() => parseJwks('[]'), /keys/);
  t.throws(() => parseJwks('nope'), /JSON/);
  t.ok(createPublicKey(a.pem));
});
