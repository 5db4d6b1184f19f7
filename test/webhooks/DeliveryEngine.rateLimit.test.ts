/**
 * Per-endpoint `rate_limit` across worker processes: two engine processes share one real Redis;
 * an endpoint limited to 5 deliveries/s is handed a send slot every 200 ms (50 in 10 s, within
 * 10 %) and no delivery reaches it before its slot, while an unlimited endpoint of the same
 * account, fed the same events, gets all of its deliveries at full speed (the throttled backlog
 * holds no send slot). Real HTTPS receiver on loopback.
 *
 * The schedule is read from the slots the store hands the engines (the fixture prints them), not
 * from the spacing of arrivals: on a loaded machine a worker that stalls sends its due slots late
 * and close together (a CI run at load 20 saw 59 arrivals in the 10 s after a late first one),
 * which says nothing about the limit.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { RedisStore } from '../../store/index.ts';
import { streamEndedEvent, webhookEventJob, WebhookService } from '../../webhooks/index.ts';
import { SafeHttpClient } from '../../outbound/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { until } from '../helpers/until.ts';
import { killChild, makeTls, startEngineChild, testLogger, TestReceiver } from './helpers.ts';


void t.test('rate_limit 5/s: two workers on Redis are handed one slot every 200 ms and send none early; an unlimited endpoint runs at full speed', { timeout: 120_000 }, async (t) => {
  const tls = makeTls();
  t.teardown(() => tls.cleanup());
  const caPath = join(tls.dir, 'ca.crt');
  writeFileSync(caPath, tls.ca);
  const redis = await startRedis(t);
  const prefix = `rl${process.pid}:`;
  const store = await RedisStore.open({ url: redis.url, prefix });
  t.teardown(() => store.close());
  const receiver = await TestReceiver.start(tls);
  t.teardown(() => receiver.close());
  const client = new SafeHttpClient({ allowLoopback: true, ca: tls.ca });
  t.teardown(() => client.close());
  const service = new WebhookService({ store, client, logger: testLogger() });

  const slow = await service.create('acc_1', { url: receiver.url('/slow'), events: ['stream.ended'], rate_limit: 5 });
  t.equal(slow.rate_limit, 5);
  await service.create('acc_1', { url: receiver.url('/fast'), events: ['stream.ended'] });

  // 120 events, each one delivery per endpoint: the slow endpoint's backlog lasts 24 s at 5/s.
  const events = 120;
  for (let i = 0; i < events; i++) {
    const event = streamEndedEvent({
      id: `str_${i}`,
      pipeline: 'streamdiffusion',
      createdAt: new Date().toISOString(),
      startedAt: new Date().toISOString(),
      endedAt: new Date().toISOString(),
      endReason: 'timeout',
      gatewayHost: 'gw.test',
    });
    await store.queue.enqueue(webhookEventJob(event, 'acc_1'));
  }

  // Default idle wait (1 s): a deferred delivery is picked up by its slot's wake-up, not polling.
  const env = { WH_REDIS_URL: redis.url, WH_REDIS_PREFIX: prefix, WH_CA: caPath, WH_ENGINE: JSON.stringify({ idleWaitMs: 1_000 }), WH_TRACE_SLOTS: '1' };
  // Every slot the store handed either worker for the slow endpoint (ms, the workers' clock).
  const slots: number[] = [];
  const onLine = (line: string) => {
    const [what, key, ms] = line.split(' ');
    if (what === 'slot' && key?.endsWith(`:${slow.id}`)) slots.push(Number(ms));
  };
  const workers = await Promise.all([startEngineChild(env, onLine), startEngineChild(env, onLine)]);
  t.teardown(() => Promise.all(workers.map(killChild)));

  const at = (path: string) => receiver.requests.filter((r) => r.path === path).map((r) => r.atMs);
  await until('every fast delivery', () => at('/fast').length, (n) => n === events, 30_000, 20);
  const slowWhenFastDone = at('/slow').length;
  const fast = at('/fast');
  const fastSpanMs = (fast[fast.length - 1] as number) - (fast[0] as number);
  t.ok(slowWhenFastDone < events / 2, `the fast endpoint got all ${events} while the slow one had ${slowWhenFastDone} (fast took ${fastSpanMs} ms)`);

  // The slow endpoint's whole backlog: 24 s of slots at 5/s.
  await until('every slow delivery', () => at('/slow').length, (n) => n >= events, 90_000, 100);
  const schedule = [...slots].sort((a, b) => a - b);
  t.ok(schedule.length >= events, `a slot for each of the ${events} deliveries (${schedule.length} handed out)`);
  const gaps = schedule.slice(1).map((ms, i) => ms - (schedule[i] as number));
  t.same(gaps.filter((g) => g < 200), [], 'no two slots closer than 200 ms: never faster than 5/s');
  const spanMs = (schedule[events - 1] as number) - (schedule[0] as number);
  t.ok(spanMs <= (events - 1) * 200 * 1.1, `${events} slots over ${spanMs} ms: 5/s within 10 % (${(((events - 1) * 1000) / spanMs).toFixed(2)}/s)`);

  // No send before its slot. Each arrival used a slot of its own and came at or after it, so the
  // k-th arrival in time is no earlier than the k-th slot, however late any send ran.
  const arrivals = at('/slow').sort((a, b) => a - b);
  const early = arrivals.map((ms, k) => ({ k, aheadMs: (schedule[k] as number) - ms })).filter((x) => x.aheadMs > 0);
  const lateMs = arrivals.map((ms, k) => ms - (schedule[k] as number)).sort((a, b) => a - b);
  t.same(early, [], `no delivery reached the endpoint before its slot (lateness median ${lateMs[lateMs.length >> 1]} ms, max ${lateMs[lateMs.length - 1]} ms)`);

  const deliveries = await service.deliveries('acc_1', slow.id, { limit: 100, status: 'succeeded' });
  t.equal(deliveries.items.length, 100, 'succeeded');
  t.ok(deliveries.items.every((d) => d.attempts === 1), 'waiting for a slot spent no attempt');
});
