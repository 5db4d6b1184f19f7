import t from 'tap';
import { gaussianNoise, SeededRandom } from '../../native/SeededNoise.ts';

void t.test('same seed gives identical noise; different seeds differ', async (t) => {
  const a = gaussianNoise(789, 4096);
  const b = gaussianNoise(789, 4096);
  t.same(a, b);
  const c = gaussianNoise(790, 4096);
  t.not(a[0], c[0]);
  t.ok(a.some((v, i) => v !== c[i]));
  t.same(gaussianNoise(789, 5), a.subarray(0, 5), 'a prefix is stable across lengths');
});

void t.test('noise is standard normal (mean ≈ 0, variance ≈ 1, ~68% within 1σ)', async (t) => {
  const x = gaussianNoise(2, 200_000);
  let s = 0;
  let s2 = 0;
  let within = 0;
  for (const v of x) {
    s += v;
    s2 += v * v;
    if (Math.abs(v) < 1) within++;
  }
  const mean = s / x.length;
  const variance = s2 / x.length - mean * mean;
  t.ok(Math.abs(mean) < 0.01, `mean ${mean}`);
  t.ok(Math.abs(variance - 1) < 0.02, `variance ${variance}`);
  t.ok(Math.abs(within / x.length - 0.6827) < 0.01, `within 1σ ${within / x.length}`);
});

void t.test('uniform generator stays in [0,1) and covers it', async (t) => {
  const r = new SeededRandom(0);
  let min = 1;
  let max = 0;
  for (let i = 0; i < 10_000; i++) {
    const v = r.next();
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  t.ok(min >= 0 && min < 0.001);
  t.ok(max < 1 && max > 0.999);
});
