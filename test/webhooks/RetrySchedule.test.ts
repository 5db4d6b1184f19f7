import t from 'tap';
import { MAX_SENDS, nextRetryDelayMs, RETRY_DELAYS_MS, RETRY_JITTER } from '../../webhooks/RetrySchedule.ts';

void t.test('the schedule is 8 sends in all: the first at once, then 7 retries 15s…16m apart', { timeout: 5_000 }, async (t) => {
  t.equal(MAX_SENDS, 8, 'spec "Limits": delivery attempts 8');
  t.same(RETRY_DELAYS_MS, [15e3, 30e3, 60e3, 120e3, 240e3, 480e3, 960e3]);
  t.equal(RETRY_DELAYS_MS.length, MAX_SENDS - 1, 'one wait per gap between sends');
  const span = RETRY_DELAYS_MS.reduce((s, d) => s + d, 0);
  t.equal(span, 1_905_000, '31 min 45 s from first to last send');
});

void t.test('each wait is jittered within ±10% and the 8th failure ends the schedule', { timeout: 5_000 }, async (t) => {
  t.equal(RETRY_JITTER, 0.1);
  for (let sends = 1; sends <= 7; sends++) {
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
  t.equal(nextRetryDelayMs(8), null, 'no 9th send');
  t.equal(nextRetryDelayMs(9), null);
  t.equal(nextRetryDelayMs(8, { delaysMs: [1, 1, 1, 1, 1, 1, 1, 1, 1] }), null, 'a longer injected schedule is still capped at 8 sends');
  t.equal(nextRetryDelayMs(1, { delaysMs: [] }), null);
});
