import t from 'tap';
import { percentile } from '../../bench/lib.ts';
t.test('percentile interpolates', async (t) => {
  t.equal(percentile([1, 2, 3, 4], 50), 2.5);
});
