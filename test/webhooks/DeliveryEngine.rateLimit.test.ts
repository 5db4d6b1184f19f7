/**
 * Per-endpoint `rate_limit` across worker processes: two engine processes share one real Redis;
 * an endpoint limited to 5 deliveries/s gets 50 ± 10 % in 10 s, while an unlimited endpoint of
 * the same account, fed the same events, gets all of its deliveries at full speed (the throttled
 * backlog holds no send slot). Real HTTPS receiver on loopback.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { RedisStore } from '../../store/index.ts';
import { SafeHttpClient, streamEndedEvent, webhookEventJob, WebhookService } from '../../webhooks/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { until } from '../helpers/until.ts';
import { killChild, makeTls, startEngineChild, testLogger, TestReceiver } from './helpers.ts';


void t.test('rate_limit 5/s holds within 10 % over 10 s across two workers on Redis; an unlimited endpoint runs at full speed', { timeout: 120_000 }, async (t) => {
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
  const env = { WH_REDIS_URL: redis.url, WH_REDIS_PREFIX: prefix, WH_CA: caPath, WH_ENGINE: JSON.stringify({ idleWaitMs: 1_000 }) };
  const workers = await Promise.all([startEngineChild(env), startEngineChild(env)]);
  t.teardown(() => Promise.all(workers.map(killChild)));

  const at = (path: string) => receiver.requests.filter((r) => r.path === path).map((r) => r.atMs);
  await until('every fast delivery', () => at('/fast').length, (n) => n === events, 30_000, 20);
  const slowWhenFastDone = at('/slow').length;
  const fast = at('/fast');
  const fastSpanMs = (fast[fast.length - 1] as number) - (fast[0] as number);
  t.ok(slowWhenFastDone < events / 2, `the fast endpoint got all ${events} while the slow one had ${slowWhenFastDone} (fast took ${fastSpanMs} ms)`);

  // 10 s measured from the slow endpoint's first arrival.
  const first = await until('a first slow delivery', () => at('/slow')[0], (v) => v !== undefined, 10_000, 20);
  await until('10 s of slow deliveries', () => Date.now(), (now) => now >= (first as number) + 10_500, 15_000, 50);
  const inWindow = at('/slow').filter((ms) => ms >= (first as number) && ms < (first as number) + 10_000).length;
  t.ok(inWindow >= 45 && inWindow <= 55, `5/s × 10 s = 50 ± 10 %: got ${inWindow}`);

  // And no 10 s window at all holds more than 50 + 10 % (a stalled worker may send late slots
  // close together, but never more slots than the schedule handed out).
  const slowTimes = at('/slow');
  let worst = 0;
  for (let i = 0; i < slowTimes.length; i++) {
    let j = i;
    while (j < slowTimes.length && (slowTimes[j] as number) < (slowTimes[i] as number) + 10_000) j++;
    worst = Math.max(worst, j - i);
  }
  t.ok(worst <= 55, `at most 55 in any 10 s window: ${worst}`);

  const deliveries = await service.deliveries('acc_1', slow.id, { limit: 100, status: 'succeeded' });
  t.ok(deliveries.items.every((d) => d.attempts === 1), 'waiting for a slot spent no attempt');
});
