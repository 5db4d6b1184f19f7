/**
 * The API key → account cache: the authenticated hot path reads keys and accounts once per
 * AUTH_CACHE_TTL, and a key removed or a plan changed in a shared store still applies on every
 * api replica within that time.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pino from 'pino';
import t from 'tap';
import { AccountCache } from '../../control/AccountCache.ts';
import { createAccountWithKey, digestKey } from '../../control/ApiKeys.ts';
import { buildApp } from '../../control/buildApp.ts';
import { loadConfig } from '../../control/config.ts';
import { LinkSigner } from '../../control/LinkSigner.ts';
import { Metrics } from '../../control/Metrics.ts';
import { SongService } from '../../songs/index.ts';
import { createStore, FsBlobStore, RedisStore, type AccountRepo, type Store } from '../../store/index.ts';
import { makeApp } from '../helpers/app.ts';
import { startRedis } from '../helpers/redis.ts';
import { until } from '../helpers/until.ts';

/** The real store, with its key and account reads counted. */
function countingStore(store: Store): { store: Store; reads: { findKey: number; get: number } } {
  const reads = { findKey: 0, get: 0 };
  const accounts = new Proxy(store.accounts, {
    get(target, prop: keyof AccountRepo) {
      if (prop === 'findKey' || prop === 'get') reads[prop]++;
      const v = target[prop];
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { store: new Proxy(store, { get: (target, prop: keyof Store) => (prop === 'accounts' ? accounts : target[prop]) }), reads };
}

const planner = () => ({ bpm: 100, key: null, duration: 120, sections: [], plan: {} });

t.test('GET /usage reads the key and the account once per AUTH_CACHE_TTL, not on every request', { timeout: 60_000 }, async (t) => {
  let counted: ReturnType<typeof countingStore> | undefined;
  const { app, store } = await makeApp(t, {
    env: { AUTH_CACHE_TTL: '60' },
    services: ({ store }) => {
      counted = countingStore(store);
      return { store: counted.store, songs: new SongService({ store, planner, canRender: async () => true }) };
    },
  });
  const { key } = await createAccountWithKey(store, 'songs');
  for (let i = 0; i < 20; i++) {
    const res = await app.inject({ method: 'GET', url: '/music/v1/usage', headers: { authorization: `Bearer ${key}` } });
    t.equal(res.statusCode, 200, `request ${i} answered`);
    t.equal(res.json().plan, 'songs');
  }
  t.same(counted?.reads, { findKey: 1, get: 1 }, '20 requests, one key lookup and one account read');

  const bad = await app.inject({ method: 'GET', url: '/music/v1/usage', headers: { authorization: `Bearer ${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}` } });
  t.equal(bad.statusCode, 401, 'a wrong key is still refused');
});

t.test('a cached account is reused until ttlMs has passed; unknown keys are never cached', { timeout: 30_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rv-acache-'));
  const store = await createStore({ dataDir: dir });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  let now = 1_000_000;
  const cache = new AccountCache({ store, ttlMs: 2000, maxEntries: 2, now: () => now });
  const { key, account } = await createAccountWithKey(store, 'free');

  t.equal((await cache.authenticate(key))?.plan, 'free');
  await store.accounts.setPlan(account.id, 'pro');
  now += 1999;
  t.equal((await cache.authenticate(key))?.plan, 'free', 'within the TTL the cached account answers');
  now += 1;
  t.equal((await cache.authenticate(key))?.plan, 'pro', 'at the TTL the store is read again');

  // A key the store does not know yet, then added: it works on the next request.
  const later = `rv_${'k'.repeat(43)}`;
  t.equal(await cache.authenticate(later), null);
  await store.accounts.addKey({ digest: digestKey(later), accountId: account.id, preview: 'rv_kkkk…', createdAt: new Date().toISOString() });
  t.equal((await cache.authenticate(later))?.id, account.id, 'a miss is not remembered');

  const third = await createAccountWithKey(store, 'songs');
  t.equal((await cache.authenticate(third.key))?.plan, 'songs');
  t.equal(cache.size, 2, 'maxEntries bounds the cache');
  t.equal(await cache.authenticate('rv_short'), null, 'a malformed key is refused');
  t.equal(await cache.authenticate(null), null, 'no key is refused');
});

t.test('a plan changed and a key removed in a shared Redis store apply on both api replicas within AUTH_CACHE_TTL', { timeout: 120_000 }, async (t) => {
  const redis = await startRedis(t);
  const prefix = 'acache:';
  const ttlS = 0.5;
  const replicas = [];
  for (const name of ['a', 'b']) {
    const dataDir = mkdtempSync(join(tmpdir(), `rv-acache-${name}-`));
    const config = loadConfig({}, { DATA_DIR: dataDir, LOG_LEVEL: 'silent', PORT: 0, AUTH_CACHE_TTL: String(ttlS) });
    const store = await RedisStore.open({ url: redis.url, prefix });
    const songs = new SongService({ store, planner, canRender: async () => true });
    const app = await buildApp(config, { store, logger: pino({ level: 'silent' }), metrics: new Metrics({ defaultMetrics: false }), blobs: new FsBlobStore(join(dataDir, 'blobs')), links: LinkSigner.fromConfig(null, dataDir), songs });
    t.teardown(async () => {
      await app.close();
      await store.close();
      rmSync(dataDir, { recursive: true, force: true });
    });
    replicas.push({ app, store });
  }
  const [a, b] = replicas as [(typeof replicas)[0], (typeof replicas)[0]];
  const { key, account } = await createAccountWithKey(a.store, 'free');
  const usage = async (r: typeof a) => {
    const res = await r.app.inject({ method: 'GET', url: '/music/v1/usage', headers: { authorization: `Bearer ${key}` } });
    return res.statusCode === 200 ? (res.json() as { plan: string }).plan : res.statusCode;
  };
  t.equal(await usage(a), 'free', 'replica a has the account cached');
  t.equal(await usage(b), 'free', 'replica b has the account cached');

  await b.store.accounts.setPlan(account.id, 'pro');
  for (const [name, r] of [['a', a], ['b', b]] as const) {
    t.equal(await until(`replica ${name} sees the new plan`, () => usage(r), (p) => p === 'pro', 10_000, 50), 'pro', `replica ${name} answers with the new plan`);
  }

  // No route revokes keys; an operator deletes the record in Redis. Both replicas refuse it after the TTL.
  const raw = new Redis(redis.url);
  t.teardown(() => raw.disconnect());
  t.equal(await raw.del(`${prefix}apikey:${digestKey(key)}`), 1, 'the key record is gone');
  for (const [name, r] of [['a', a], ['b', b]] as const) {
    t.equal(await until(`replica ${name} refuses the removed key`, () => usage(r), (s) => s === 401, 10_000, 50), 401, `replica ${name} answers 401`);
  }
});
