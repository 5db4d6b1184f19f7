/**
 * The benchmarks' statistics: summarize() takes a long run's samples whole (a minute of HTTP
 * load is well over 100 000 latencies; spreading them into Math.min overflowed the stack).
 */
import t from 'tap';
import { summarize } from '../../bench/lib.ts';

t.test('summarize: a million samples, min/max/percentiles by their values', async (t) => {
  const samples = Array.from({ length: 1_000_000 }, (_, i) => ((i * 7919) % 1_000_000) / 1000);
  const s = summarize(samples);
  t.equal(s.n, 1_000_000);
  t.equal(s.min, 0);
  t.equal(s.max, 999.999);
  t.ok(Math.abs(s.p50 - 500) < 1 && Math.abs(s.p95 - 950) < 1, `p50 ${s.p50}, p95 ${s.p95}`);
  t.ok(Number.isNaN(summarize([]).min), 'no samples: NaN');
});
