import t from 'tap';
import { LcmScheduler } from '../../native/LcmScheduler.ts';
import { InvalidParamsError } from '../../native/errors.ts';

// Expected vectors are hard-coded from reference/live-diffusion.md §1.3 (derived from diffusers'
// LCMScheduler for SD scaled_linear) and hand-computed boundary scalings; none are recomputed
// with the code under test.
function close(got: number[], want: number[], eps: number): boolean {
  return got.length === want.length && got.every((g, i) => Math.abs(g - (want[i] as number)) < eps);
}

void t.test('N=50 gives t[i] = 999 − 20i', async (t) => {
  const ts = new LcmScheduler().timesteps(50);
  t.equal(ts.length, 50);
  t.ok(ts.every((v, i) => v === 999 - 20 * i));
});

void t.test('N=4 follows modern diffusers spacing [999,759,499,259]', async (t) => {
  t.same(new LcmScheduler().timesteps(4), [999, 759, 499, 259]);
  t.same(new LcmScheduler().timesteps(1), [999]);
});

void t.test('ai-runner default [12,20,32] → [759,599,359] with the reference √ᾱ and √(1−ᾱ)', async (t) => {
  const tab = new LcmScheduler().tables(50, [12, 20, 32]);
  t.same(tab.subTimesteps, [759, 599, 359]);
  t.ok(close(tab.alpha, [0.2285, 0.4022, 0.7011], 6e-5), 'alpha');
  t.ok(close(tab.beta, [0.9735, 0.9156, 0.7131], 6e-5), 'beta');
  t.ok(tab.cSkip.every((c) => c < 7e-6), 'c_skip ≈ 0 for t ≥ 19');
  t.ok(tab.cOut.every((c) => Math.abs(c - 1) < 1e-6), 'c_out ≈ 1');
});

void t.test('demo default [35,45] → [299,99]', async (t) => {
  const tab = new LcmScheduler().tables(50, [35, 45]);
  t.same(tab.subTimesteps, [299, 99]);
  t.ok(close(tab.alpha, [0.7695, 0.9463], 6e-5), 'alpha');
  t.ok(close(tab.beta, [0.6386, 0.3233], 6e-5), 'beta');
  t.same(new LcmScheduler().tables(50, [0, 16, 32, 45]).subTimesteps, [999, 679, 359, 99]);
});

void t.test('boundary scalings at small t match σ_d²/((10t)²+σ_d²) and 10t/√((10t)²+σ_d²)', async (t) => {
  // N=1000 extends the grid to every train step: index 999 → t=0, 998 → t=1.
  const tab = new LcmScheduler().tables(1000, [999, 998]);
  t.same(tab.subTimesteps, [0, 1]);
  t.ok(close(tab.cSkip, [1, 0.25 / 100.25], 1e-9), 'c_skip');
  t.ok(close(tab.cOut, [0, 10 / Math.sqrt(100.25)], 1e-9), 'c_out');
  // ᾱ_0 = 1 − β_0 = 1 − 0.00085.
  t.ok(close([tab.alpha[0] as number], [Math.sqrt(0.99915)], 1e-12), 'alpha_0');
});

void t.test('steps above 50 extend the grid; out-of-range input throws', async (t) => {
  const ts = new LcmScheduler().timesteps(100);
  t.equal(ts.length, 100);
  t.equal(ts[0], 999);
  t.equal(ts[99], 9);
  t.throws(() => new LcmScheduler().timesteps(0), InvalidParamsError);
  t.throws(() => new LcmScheduler().tables(50, []), InvalidParamsError);
  t.same(new LcmScheduler().tables(50, [50]).subTimesteps, [19], 'index N clamps to N−1');
});
