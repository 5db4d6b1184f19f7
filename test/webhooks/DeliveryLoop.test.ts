/**
 * The deliveries loop writes each send's outcome in the same store call (one transaction) as the
 * lease of the delivery that takes its slot: no separate settle transaction, and after the first
 * lease every lease rides on a settle. Real HTTPS receiver on loopback, embedded store.
 */
import t from 'tap';
import type { DeliverySettlement } from '../../store/index.ts';
import { DELIVERY_ENGINE_DEFAULTS } from '../../webhooks/index.ts';
import { delivery } from '../store/contract.ts';
import { makeTls, ManualClock, openStore, startWebhooks, waitUntil } from './helpers.ts';

const tls = makeTls();
t.teardown(() => tls.cleanup());

void t.test('a busy queue costs one lease-and-settle call per cycle: every outcome rides on the lease of the next sends', { timeout: 30_000 }, async (t) => {
  const clock = new ManualClock(Date.now());
  const { store } = openStore(t, clock.now);
  // Records every store call of the deliveries queue, passing it on unchanged.
  const cycles: { settled: number; leased: number }[] = [];
  let settleCalls = 0;
  const lease = store.webhooks.leaseDeliveries.bind(store.webhooks);
  store.webhooks.leaseDeliveries = async (max: number, leaseMs: number, settle: readonly DeliverySettlement[] = []) => {
    const leased = await lease(max, leaseMs, settle);
    if (settle.length > 0 || leased.length > 0) cycles.push({ settled: settle.length, leased: leased.length });
    return leased;
  };
  const settleDeliveries = store.webhooks.settleDeliveries.bind(store.webhooks);
  store.webhooks.settleDeliveries = (items) => {
    settleCalls++;
    return settleDeliveries(items);
  };
  const { receiver, wh } = await startWebhooks(t, { store, clock, tls });
  const endpoint = await wh.service.create('acc_1', { url: receiver.url('/a'), events: ['stream.ended'] });

  // Three rounds of slots, queued in one transaction so the first lease sees them all.
  const n = DELIVERY_ENGINE_DEFAULTS.concurrency * 3;
  const records = Array.from({ length: n }, (_, i) => delivery(`dlv_loop${String(i).padStart(3, '0')}`, endpoint.id, `evt_loop${i}`, clock.ms));
  await store.webhooks.createDeliveries(records);
  await receiver.waitForCount(n);
  await waitUntil(async () => {
    const q = await store.webhooks.deliveryQueueStats();
    return q.ready + q.delayed + q.leased === 0;
  }, 'every delivery settled', 20_000);

  const succeeded = await store.webhooks.listDeliveries(endpoint.id, { status: 'succeeded' }, { limit: 100 });
  t.equal(succeeded.items.length, n, 'every delivery succeeded once');
  t.equal(receiver.requests.length, n, 'one send each');
  t.equal(settleCalls, 0, 'no settle transaction of its own');
  t.equal(cycles.reduce((s, c) => s + c.settled, 0), n, 'every outcome was written by a lease-and-settle call');
  t.same(
    cycles.filter((c) => c.settled === 0).map((c) => c.leased),
    [DELIVERY_ENGINE_DEFAULTS.concurrency],
    'one lease alone (the first, filling every slot); every later lease came with the settles that freed its slots',
  );
});
