import t from 'tap';
import { newTimeOrderedId } from '../../store/index.ts';

void t.test('time-ordered ids keep the 24-hex shape, sort by creation time and do not collide', { timeout: 10_000 }, async (t) => {
  const at = Date.parse('2026-03-01T10:00:00Z');
  const id = newTimeOrderedId('dlv', at);
  t.match(id, /^dlv_[0-9a-f]{24}$/);
  t.equal(id.slice(4, 16), at.toString(16).padStart(12, '0'), 'the first 12 hex digits are the ms timestamp');
  const later = newTimeOrderedId('dlv', at + 1);
  t.ok(id < later, 'an id made 1 ms later sorts after');
  // The random tail spans the pool's refills (4 KiB / 6 bytes ≈ 682 ids per refill).
  const many = Array.from({ length: 5000 }, (_, i) => newTimeOrderedId('evt', at + Math.floor(i / 100)));
  t.equal(new Set(many).size, many.length, 'no duplicates among 5000 ids, 100 per millisecond');
  const sorted = [...many].sort();
  t.same(
    sorted.map((x) => x.slice(0, 16)),
    many.map((x) => x.slice(0, 16)),
    'string order is creation order to the millisecond',
  );
});
