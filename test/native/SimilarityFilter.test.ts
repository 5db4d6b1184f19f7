import t from 'tap';
import { cosineSimilarity, SimilarityFilter } from '../../native/SimilarityFilter.ts';

const img = (...x: number[]) => new Float32Array(x);

void t.test('cosine similarity of identical, opposite and orthogonal vectors', async (t) => {
  t.ok(Math.abs(cosineSimilarity(img(1, 2), img(1, 2)) - 1) < 1e-12);
  t.equal(cosineSimilarity(img(1, 0), img(-1, 0)), -1);
  t.equal(cosineSimilarity(img(1, 0), img(0, 1)), 0);
});

void t.test('skip probability follows max(0, 1 − (1−cos)/(1−threshold))', async (t) => {
  const f = new SimilarityFilter({ threshold: 0.98, maxSkipFrames: 10 });
  t.equal(f.skipProbability(1), 1);
  t.ok(Math.abs(f.skipProbability(0.99) - 0.5) < 1e-9);
  t.equal(f.skipProbability(0.9), 0);
  t.equal(new SimilarityFilter({ threshold: 1, maxSkipFrames: 10 }).skipProbability(1), 0, 'threshold ≥ 1 never skips');
});

void t.test('the injected draw decides: skip when u ≤ skip probability', async (t) => {
  let u = 0.4;
  const f = new SimilarityFilter({ threshold: 0.98, maxSkipFrames: 10, random: () => u });
  const a = img(1, 0);
  t.equal(f.shouldSkip(a), false, 'first frame always processed');
  // cos(a, b) = 0.99 → p = 0.5.
  const b = img(0.99, Math.sqrt(1 - 0.99 ** 2));
  t.equal(f.shouldSkip(b), true, 'u=0.4 < p=0.5 → skip');
  u = 0.6;
  t.equal(f.shouldSkip(b), false, 'u=0.6 > p → process');
});

void t.test('threshold ≥ 1 never skips, even identical frames', async (t) => {
  const f = new SimilarityFilter({ threshold: 1, maxSkipFrames: 10, random: () => 0 });
  const a = img(1, 2, 3);
  for (let i = 0; i < 5; i++) t.equal(f.shouldSkip(a), false);
});

void t.test('a frame is forced through after maxSkipFrames consecutive skips', async (t) => {
  const f = new SimilarityFilter({ threshold: 0.5, maxSkipFrames: 3, random: () => 0.5 });
  const a = img(1, 1);
  const pattern: boolean[] = [];
  for (let i = 0; i < 9; i++) pattern.push(f.shouldSkip(a));
  t.same(pattern, [false, true, true, true, false, true, true, true, false]);
});

void t.test('the reference is the last processed frame, not the last skipped one', async (t) => {
  let u = 0;
  const f = new SimilarityFilter({ threshold: 0.9, maxSkipFrames: 100, random: () => u });
  f.shouldSkip(img(1, 0));
  t.equal(f.shouldSkip(img(1, 0.01)), true);
  u = 0.999;
  // Similar to the skipped frame but compared against the processed one: cos(≈45°) → process.
  t.equal(f.shouldSkip(img(1, 1)), false);
  t.ok(Math.abs(f.lastSimilarity - Math.SQRT1_2) < 1e-6);
});
