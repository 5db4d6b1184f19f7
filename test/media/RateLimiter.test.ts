/**
 * The WHIP/WHEP request limits: a refused key's retryAfterMs is when one more request is allowed
 * (what the 429's Retry-After tells the client), whether the current window is full or only the
 * previous window's weighted share is in the way. The clock is the limiter's `now` option.
 */
import t, { type Test } from 'tap';
import { RateLimiter } from '../../media/RateLimiter.ts';

/** A limiter on a clock the test moves, ms. */
function limiter(max: number, windowMs: number, startMs: number) {
  let now = startMs;
  const l = new RateLimiter({ max, windowMs }, { now: () => now });
  return { l, at: (ms: number) => (now = ms), get now() { return now; } };
}

/** Refused now, refused just before its retryAfterMs, allowed just after. */
function honest(t: Test, c: ReturnType<typeof limiter>, key: string, what: string): number {
  const d = c.l.hit(key);
  t.equal(d.allowed, false, `${what}: refused`);
  const refusedAt = c.now;
  c.at(refusedAt + d.retryAfterMs - 2);
  t.equal(c.l.hit(key).allowed, false, `${what}: still refused 2 ms before Retry-After (${d.retryAfterMs} ms)`);
  c.at(refusedAt + d.retryAfterMs + 1);
  t.equal(c.l.hit(key).allowed, true, `${what}: allowed once Retry-After (${d.retryAfterMs} ms) has passed`);
  return d.retryAfterMs;
}

t.test('a full window: Retry-After reaches into the next window, until the full one weighs less than max − 1', async (t) => {
  // 3 a minute, all at 10 s into a window: at its end they still weigh 3; 2 is reached 20 s later.
  const c = limiter(3, 60_000, 600_000 + 10_000);
  for (let i = 0; i < 3; i++) t.equal(c.l.hit('a').allowed, true);
  t.equal(honest(t, c, 'a', 'fourth in the window'), 50_000 + 20_000, 'Retry-After = 50 s to the window end + 20 s of decay');
});

t.test('the previous window in the way: Retry-After is when its share has decayed enough, within this window', async (t) => {
  const c = limiter(4, 60_000, 600_000 + 30_000);
  for (let i = 0; i < 4; i++) t.equal(c.l.hit('a').allowed, true);
  // Next window, 6 s in: previous 4 × 0.9 = 3.6; one more needs ≤ 3 → 4 × (1 − f) ≤ 3 → f ≥ 0.25 (15 s in).
  c.at(660_000 + 6_000);
  t.equal(honest(t, c, 'a', 'previous window weighing 3.6'), 9_000);
});

t.test('one a window: the next is allowed one window after the full one ends', async (t) => {
  const c = limiter(1, 1000, 5000 + 400);
  t.equal(c.l.hit('a').allowed, true);
  t.equal(honest(t, c, 'a', 'second'), 600 + 1000);
});

t.test('keys are counted apart', async (t) => {
  const c = limiter(1, 1000, 0);
  t.equal(c.l.hit('a').allowed, true);
  t.equal(c.l.hit('a').allowed, false);
  t.equal(c.l.hit('b').allowed, true);
});
