import t from 'tap';
import { RedisStore } from '../../store/RedisStore.ts';
import { startRedis } from '../helpers/redis.ts';
import { delivery, runContract } from './contract.ts';

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

void t.test('redis: opening moves queued delivery jobs of an older version into their deliveries (the deliveries queue)', { timeout: 20_000 }, async (t) => {
  const now = Date.now();
  const first = await RedisStore.open({ url: redis.url, prefix: 'upgrade:', now: () => now });
  // A delivery written as finished queues nothing; the older version's job per delivery is made by hand.
  await first.webhooks.createDeliveries([
    delivery('dlv_1', 'whk_1', 'evt_1', now, { status: 'failed' }),
    delivery('dlv_2', 'whk_1', 'evt_2', now, { status: 'failed' }),
  ]);
  await first.queue.enqueue({ queue: 'webhooks.deliver', id: 'dlv_1', payload: { deliveryId: 'dlv_1', trigger: 'resend' }, runAtMs: now - 1 });
  await first.queue.enqueue({ queue: 'webhooks.deliver', id: 'dlv_gone', payload: { deliveryId: 'dlv_gone' } });
  await first.queue.enqueue({ queue: 'webhooks.deliver', id: 'dlv_2', payload: { deliveryId: 'dlv_2' }, runAtMs: now + 60_000 });
  await first.close();

  const second = await RedisStore.open({ url: redis.url, prefix: 'upgrade:', now: () => now });
  t.teardown(() => second.close());
  t.same(await second.queue.stats('webhooks.deliver'), { ready: 0, delayed: 0, leased: 0 }, 'no job left in the old queue');
  t.same(await second.webhooks.deliveryQueueStats(), { ready: 1, delayed: 1, leased: 0 }, 'each job became its queued delivery; the orphan was dropped');
  const [leased] = await second.webhooks.leaseDeliveries(5, 1000);
  t.same([leased?.delivery.id, leased?.job.attempts, leased?.job.payload], ['dlv_1', 1, { deliveryId: 'dlv_1', trigger: 'resend' }]);
});
