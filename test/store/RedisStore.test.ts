import t from 'tap';
import { RedisStore } from '../../store/RedisStore.ts';
import { startRedis } from '../helpers/redis.ts';
import { runContract } from './contract.ts';

// One server for the file; each case gets its own key prefix, so cases cannot see each other.
const redis = await startRedis(t);
let n = 0;

runContract(t, 'redis', async ({ now }) => RedisStore.open({ url: redis.url, prefix: `t${n++}:`, now }));

void t.test('redis: open rejects with StoreError when Redis is unreachable', { timeout: 20_000 }, async (t) => {
  const other = await startRedis();
  const url = other.url;
  await other.teardown();
  await t.rejects(RedisStore.open({ url }), { name: 'StoreError', code: 'closed' });
});

void t.test('redis: keys stay under the prefix', { timeout: 20_000 }, async (t) => {
  const store = await RedisStore.open({ url: redis.url, prefix: 'iso:' });
  t.teardown(() => store.close());
  await store.accounts.create({ id: 'acc_a', plan: 'free', name: 'A', createdAt: new Date().toISOString() });
  await store.queue.enqueue({ queue: 'q', id: 'j', payload: 1 });
  await store.rateLimits.hit('k', 1, 1000);
  const probe = await RedisStore.open({ url: redis.url, prefix: 'probe:' });
  t.teardown(() => probe.close());
  t.equal(await probe.accounts.count(), 0, 'another prefix sees nothing');
  t.same((await probe.queue.stats('q')), { ready: 0, delayed: 0, leased: 0 });
});

void t.test('redis: a bus subscriber that went deaf hears again (self-check), and after a Redis restart', { timeout: 60_000 }, async (t) => {
  const own = await startRedis(t);
  const store = await RedisStore.open({ url: own.url, prefix: 'deaf:', busSelfCheckMs: 100 });
  t.teardown(() => store.close());
  const heard: unknown[] = [];
  await store.bus.subscribe('rpc', (m) => heard.push(m));
  /** Publishes until the handler hears one (bounded): true when it did. */
  const hears = async (tag: string): Promise<boolean> => {
    for (let i = 0; i < 100; i++) {
      await store.bus.publish('rpc', { tag, i }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
      if (heard.some((m) => (m as { tag?: string }).tag === tag)) return true;
    }
    return false;
  };
  t.ok(await hears('before'), 'heard before');
  // Deaf behind our back: the server drops every subscription of the connection.
  const sub = (store.bus as unknown as { client: { unsubscribe(): Promise<unknown> } }).client;
  await sub.unsubscribe();
  t.ok(await hears('deaf'), 'heard again after the self-check saw its probe reach nobody');
  await own.restart();
  t.ok(await hears('restart'), 'heard again after Redis restarted');
});
