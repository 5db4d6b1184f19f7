import t from 'tap';
import { MAX_SENDS, nextRetryDelayMs, RETRY_DELAYS_MS, RETRY_JITTER } from '../../webhooks/RetrySchedule.ts';

void t.test('the schedule is 15s…32m: 8 retries after the first send, 9 sends spanning about an hour', { timeout: 5_000 }, async (t) => {
  t.same(RETRY_DELAYS_MS, [15e3, 30e3, 60e3, 120e3, 240e3, 480e3, 960e3, 1920e3]);
  t.equal(MAX_SENDS, 9);
  const span = RETRY_DELAYS_MS.reduce((s, d) => s + d, 0);
  t.equal(span, 3_825_000, '63 min 45 s from first to last send');
});

void t.test('each wait is jittered within ±10% and the 9th failure ends the schedule', { timeout: 5_000 }, async (t) => {
  t.equal(RETRY_JITTER, 0.1);
  for (let sends = 1; sends <= 8; sends++) {
    const base = RETRY_DELAYS_MS[sends - 1] as number;
    t.equal(nextRetryDelayMs(sends, { random: () => 0 }), Math.round(base * 0.9));
    t.equal(nextRetryDelayMs(sends, { random: () => 0.5 }), base);
    const hi = nextRetryDelayMs(sends, { random: () => 0.999999 }) as number;
    t.ok(hi <= base * 1.1 && hi > base * 1.09);
    for (let i = 0; i < 50; i++) {
      const d = nextRetryDelayMs(sends) as number;
      t.ok(d >= base * 0.9 && d <= base * 1.1, `random draw ${d} within bounds of ${base}`);
    }
  }
  t.equal(nextRetryDelayMs(9), null);
  t.equal(nextRetryDelayMs(1, { delaysMs: [] }), null);
});
