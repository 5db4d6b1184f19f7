/**
 * API keys are random (32 bytes, prefixed), shown once and stored only as SHA-256 digests;
 * lookups accept exactly the key issued.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { authenticate, bearerToken, createAccountWithKey, traceIdFrom } from '../../control/ApiKeys.ts';
import { createStore } from '../../store/index.ts';

t.test('a created key authenticates its account; the store keeps only the digest', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rv-keys-'));
  const store = await createStore({ dataDir: dir });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const { key, account } = await createAccountWithKey(store, 'songs');
  t.match(key, /^rv_[A-Za-z0-9_-]{43}$/, 'rv_ + 32 random bytes in base64url');
  t.equal(Buffer.from(key.slice(3), 'base64url').length, 32);
  const again = await createAccountWithKey(store, 'songs');
  t.not(again.key, key, 'keys are random');

  const found = await authenticate(store, key);
  t.equal(found?.id, account.id);
  t.equal(found?.plan, 'songs');
  const digest = createHash('sha256').update(key).digest('hex');
  const rec = await store.accounts.findKey(digest);
  t.ok(rec, 'stored under its SHA-256 digest');
  t.notMatch(JSON.stringify(rec), key.slice(3, 20), 'the key itself is not stored');

  t.equal(await authenticate(store, `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`), null, 'one character off fails');
  t.equal(await authenticate(store, 'rv_short'), null, 'malformed fails');
  t.equal(await authenticate(store, null), null, 'absent fails');
});

t.test('bearer parsing and trace ids', async (t) => {
  t.equal(bearerToken('Bearer abc'), 'abc');
  t.equal(bearerToken('bearer abc'), 'abc');
  t.equal(bearerToken('Basic abc'), null);
  t.equal(bearerToken('Bearer'), null);
  t.equal(bearerToken(undefined), null);
  t.equal(traceIdFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'), '4bf92f3577b34da6a3ce929d0e0e4736');
  t.match(traceIdFrom('garbage'), /^[0-9a-f]{32}$/);
});
