import t from 'tap';
import { blendEmbeddings, blendNoise, lerp, normalizeWeights, slerp } from '../../native/Blend.ts';

const f = (...x: number[]) => new Float32Array(x);

void t.test('normalizeWeights sums to one; zero total is left alone', async (t) => {
  t.same(normalizeWeights([1, 3]), [0.25, 0.75]);
  t.same(normalizeWeights([0, 0]), [0, 0]);
});

void t.test('slerp edge cases: t≤0 → a, t≥1 → b, parallel → lerp', async (t) => {
  const a = f(1, 0);
  const b = f(0, 1);
  t.same(slerp(a, b, 0), a);
  t.same(slerp(a, b, -1), a);
  t.same(slerp(a, b, 1), b);
  t.same(slerp(f(1, 1), f(2, 2), 0.5), lerp(f(1, 1), f(2, 2), 0.5), 'θ≈0 falls back to lerp');
});

void t.test('slerp halfway between orthogonal unit vectors stays on the unit circle', async (t) => {
  const m = slerp(f(1, 0), f(0, 1), 0.5);
  // sin(π/4)/sin(π/2) = √½ for both weights.
  t.ok(Math.abs((m[0] as number) - Math.SQRT1_2) < 1e-6);
  t.ok(Math.abs((m[1] as number) - Math.SQRT1_2) < 1e-6);
});

void t.test('embedding blend: slerp for two with t = normalised w[1]; linear otherwise', async (t) => {
  const a = f(1, 0);
  const b = f(0, 1);
  // Weights [1,1] normalise to t = 0.5.
  const s = blendEmbeddings([a, b], [1, 1], { method: 'slerp', normalize: true });
  t.ok(Math.abs((s[0] as number) - Math.SQRT1_2) < 1e-6);
  const l = blendEmbeddings([a, b], [1, 1], { method: 'linear', normalize: true });
  t.same(l, f(0.5, 0.5));
  const three = blendEmbeddings([a, b, f(1, 1)], [1, 1, 2], { method: 'slerp', normalize: true });
  t.same(three, f(0.75, 0.75), "three entries are always linear: 0.25a + 0.25b + 0.5c");
  t.same(blendEmbeddings([a, b], [2, 0], { method: 'linear', normalize: false }), f(2, 0), 'no normalisation');
  t.equal(blendEmbeddings([a], [0.1], { method: 'linear', normalize: true }), a, 'single entry as is');
});

void t.test('noise blend: linear with normalisation keeps the mean L2 norm of the inputs', async (t) => {
  const a = f(3, 0);
  const b = f(0, 3);
  const n = blendNoise([a, b], [1, 1], { method: 'linear', normalize: true });
  // Unscaled sum (1.5, 1.5) has norm 2.12; rescaled to 3 → each 3/√2.
  t.ok(Math.abs((n[0] as number) - 3 / Math.SQRT2) < 1e-5, `${n[0]}`);
  const raw = blendNoise([a, b], [1, 1], { method: 'linear', normalize: false });
  t.same(raw, f(3, 3));
});
