/**
 * The ingest reorder buffer: in order at once, reordering within the window, gaps declared lost
 * after the latency or when too many packets wait, sequence wrap-around, late duplicates dropped,
 * counter restarts, and bounded work under a flood of random sequence numbers.
 */
import t from 'tap';
import { ReorderBuffer } from '../../../media/webrtc/ReorderBuffer.ts';

const push = (b: ReorderBuffer<number>, seqs: number[], now = 0) => {
  const out: number[] = [];
  let lost = 0;
  for (const s of seqs) {
    const r = b.push(s, s, now);
    out.push(...r.packets);
    lost += r.lost;
  }
  return { out, lost };
};

t.test('in-order packets pass at once; a reordered one is put back in place', async (t) => {
  const b = new ReorderBuffer<number>();
  t.same(push(b, [10, 11, 12]).out, [10, 11, 12]);
  t.same(push(b, [14, 15]).out, [], 'after a gap, packets wait');
  t.same(push(b, [13]).out, [13, 14, 15], 'the gap fills: all of them, in order');
  t.equal(b.lost, 0);
});

t.test('a gap that stays is declared lost after latencyMs, and delivery resumes after it', async (t) => {
  const b = new ReorderBuffer<number>({ latencyMs: 100 });
  push(b, [1, 2], 0);
  t.same(b.push(4, 4, 10), { packets: [], lost: 0 });
  t.same(b.push(5, 5, 50), { packets: [], lost: 0 });
  t.same(b.push(6, 6, 111), { packets: [4, 5, 6], lost: 1 }, 'the oldest waiter waited 101 ms: packet 3 is lost');
  t.same(push(b, [3], 120).out, [], 'packet 3 arriving after being declared lost is late and dropped');
  t.equal(b.late, 1);
});

t.test('too many waiting packets declare the gap lost at once', async (t) => {
  const b = new ReorderBuffer<number>({ latencyMs: 10_000, maxWaiting: 4 });
  push(b, [0]);
  const r = push(b, [2, 3, 4, 5, 6]);
  t.same(r.out, [2, 3, 4, 5, 6]);
  t.equal(r.lost, 1);
});

t.test('sequence numbers wrap around 65535 → 0', async (t) => {
  const b = new ReorderBuffer<number>();
  t.same(push(b, [65534, 65535, 0, 1]).out, [65534, 65535, 0, 1]);
  t.same(push(b, [3, 2]).out, [2, 3]);
  t.equal(b.lost, 0);
});

t.test('a jump larger than maxJump is a new counter, not 20,000 lost packets', async (t) => {
  const b = new ReorderBuffer<number>({ maxJump: 3000 });
  push(b, [100, 101]);
  const r = push(b, [20_000, 20_001]);
  t.same(r.out, [20_000, 20_001]);
  t.equal(r.lost, 0);
});

t.test('a counter restarted at what looks like the past is taken after 64 packets, not dropped forever', async (t) => {
  const b = new ReorderBuffer<number>({ maxJump: 3000 });
  push(b, [50_000, 50_001]);
  const restarted = Array.from({ length: 80 }, (_, i) => 45_000 + i); // 5,000 behind: the past, not a gap
  const r = push(b, restarted);
  t.ok(r.out.length >= 16 && r.out.at(-1) === 45_079, `delivery resumes on the new counter (${r.out.length} packets)`);
  t.equal(b.late, 63, 'the first 63 were dropped as late');
});

t.test('a flood of random sequence numbers: bounded waiting, sane loss counts, every packet handed on at most once', async (t) => {
  const b = new ReorderBuffer<number>({ latencyMs: 100, maxWaiting: 256 });
  let state = 7;
  const rand = () => ((state = (state * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const seen = new Set<number>();
  let dup = false;
  let maxLost = 0;
  for (let i = 0; i < 50_000; i++) {
    const r = b.push(Math.floor(rand() * 65536), i, i);
    for (const p of r.packets) {
      if (seen.has(p)) dup = true;
      seen.add(p);
    }
    maxLost = Math.max(maxLost, r.lost);
    if (b.waiting > 257) t.fail(`waiting grew to ${b.waiting}`);
  }
  t.notOk(dup, 'no packet twice');
  t.ok(maxLost <= 32_768, `one call never declares more than half the sequence space lost (max ${maxLost})`);
});
