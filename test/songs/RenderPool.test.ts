import t from 'tap';
import { PoolClosedError, RenderPool } from '../../songs/RenderPool.ts';
import { planSong } from '../../songs/SongPlanner.ts';

t.test('a take renders on a worker while the main event loop keeps ticking', { timeout: 180_000 }, async (t) => {
  const pool = new RenderPool({ size: 1 });
  t.teardown(() => pool.close());
  const plan = planSong({ prompt: 'ambient pads', seed: 4, duration: 10 });
  let last = performance.now();
  let maxGap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
  }, 10);
  const progress: number[] = [];
  const started = performance.now();
  const take = await pool.render(plan, 1, (f) => progress.push(f));
  const elapsed = performance.now() - started;
  clearInterval(timer);
  t.ok(Buffer.isBuffer(take.wav) && Buffer.isBuffer(take.mp3));
  t.equal(take.wav.length, 44 + plan.totalSamples * 4);
  t.equal(take.waveform.length, 200);
  t.ok(progress.length > 3 && progress.at(-1) === 1, 'progress reaches 1');
  t.ok(progress.every((v, i) => i === 0 || v >= progress[i - 1]!), 'progress never goes back');
  t.ok(maxGap < Math.max(500, elapsed / 4), `event loop max gap ${maxGap.toFixed(0)} ms over a ${elapsed.toFixed(0)} ms render`);
});

t.test('close() is idempotent and later renders reject with PoolClosedError', { timeout: 30_000 }, async (t) => {
  const pool = new RenderPool({ size: 2 });
  const p1 = pool.close();
  const p2 = pool.close();
  t.equal(p1, p2);
  await p1;
  await t.rejects(pool.render(planSong({ prompt: 'pop', seed: 1, duration: 10 }), 1), PoolClosedError);
});

t.test('closing while a take runs rejects it instead of leaving it pending', { timeout: 60_000 }, async (t) => {
  const pool = new RenderPool({ size: 1 });
  const p = pool.render(planSong({ prompt: 'rock', seed: 2, duration: 10 }), 1);
  const q = pool.render(planSong({ prompt: 'rock', seed: 3, duration: 10 }), 1);
  t.equal(pool.queued, 1);
  const checks = [t.rejects(p, PoolClosedError), t.rejects(q, PoolClosedError)];
  await pool.close();
  await Promise.all(checks);
});
