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

t.test('a prewarmed pool streams the MP3 and writes the stems zip to the file it is given', { timeout: 180_000 }, async (t) => {
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'renderpool-'));
  const pool = new RenderPool({ size: 1, prewarm: true });
  t.teardown(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const plan = planSong({ prompt: 'deep house with warm pads', seed: 9, duration: 12 });
  const chunks: Buffer[] = [];
  const stemsPath = join(dir, 'stems.zip');
  const take = await pool.render(plan, 1, undefined, { stems: true, stemsPath, onMp3Chunk: (c) => chunks.push(c) });
  t.ok(chunks.length > 0 && Buffer.concat(chunks).equals(take.mp3), 'streamed chunks = the MP3');
  t.equal(take.stems?.zip, null, 'the zip did not cross threads');
  const zip = readFileSync(stemsPath);
  const m = take.stems!.members.bass;
  t.equal(zip.subarray(m.offset, m.offset + 4).toString('ascii'), 'RIFF', 'the bass member starts where the record says');
  t.equal(zip.readUInt32LE(zip.length - 22), 0x06054b50, 'the file ends with the zip directory');
});

t.test('one worker starts its next take while LAME finishes the last, and the takes come out the same', { timeout: 300_000 }, async (t) => {
  const { renderTakeHere } = await import('../../songs/Renderer.ts');
  const pool = new RenderPool({ size: 1, prewarm: true });
  t.teardown(() => pool.close());
  // 60 s: LAME's tail after take 1's last sample (≈ 0.3–0.6 s here) is far longer than the pool's
  // round trip that hands the worker take 2.
  const plan = planSong({ prompt: 'uplifting trance with supersaw chords', seed: 11, duration: 60 });
  let take1Done = Infinity;
  let take2Started = Infinity;
  const p1 = pool.render(plan, 1).then((r) => {
    take1Done = performance.now();
    return r;
  });
  const p2 = pool.render(plan, 2, () => {
    take2Started = Math.min(take2Started, performance.now());
  });
  t.equal(pool.queued, 1, 'take 2 waits for the worker');
  const [a, b] = await Promise.all([p1, p2]);
  t.ok(take2Started < take1Done, `take 2 began ${(take1Done - take2Started).toFixed(0)} ms before take 1 was done (the old pool: after it)`);
  const [a0, b0] = [await renderTakeHere(plan, 1), await renderTakeHere(plan, 2)];
  t.ok(a.wav.equals(a0.wav) && a.mp3.equals(a0.mp3), 'take 1: the same WAV and MP3 as rendered alone');
  t.ok(b.wav.equals(b0.wav) && b.mp3.equals(b0.mp3), 'take 2: the same WAV and MP3 as rendered alone');
  t.ok(a.mp3.length > 100_000 && b.mp3.length > 100_000, 'both MP3s are whole');
});

t.test('closing while one take finishes in LAME and the next renders rejects both', { timeout: 120_000 }, async (t) => {
  const pool = new RenderPool({ size: 1, prewarm: true });
  const plan = planSong({ prompt: 'uplifting trance with supersaw chords', seed: 12, duration: 60 });
  const p1 = pool.render(plan, 1);
  // Take 2's first progress comes after take 1 left the thread and before take 1 can be done (its
  // thread reports that only when take 2 yields): take 1 is finishing then.
  const p2 = pool.render(plan, 2, () => void pool.close());
  await Promise.all([t.rejects(p1, PoolClosedError), t.rejects(p2, PoolClosedError)]);
  await pool.close();
});
