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
