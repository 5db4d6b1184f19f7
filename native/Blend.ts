/**
 * Weighted blends of prompt embeddings and seed noises (livepeer fork
 * `stream_parameter_updater.py`): weights normalised to sum 1 when asked; slerp only for exactly two
 * entries with t = w[1]; otherwise a linear weighted sum.
 */
import { dotAndNorms } from './SimilarityFilter.ts';

/** `linear` = weighted sum; `slerp` = spherical interpolation (two entries only, else linear). */
export type InterpolationMethod = 'linear' | 'slerp';

/** Weights scaled to sum 1; a zero (or negative) total leaves them unchanged. */
export function normalizeWeights(weights: readonly number[]): number[] {
  const sum = weights.reduce((s, w) => s + w, 0);
  return sum > 0 ? weights.map((w) => w / sum) : [...weights];
}

/** (1−t)·a + t·b. */
export function lerp(a: Float32Array, b: Float32Array, t: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = (1 - t) * (a[i] as number) + t * (b[i] as number);
  return out;
}

/**
 * Spherical interpolation on the flattened tensors: θ = acos(clamp(â·b̂)); |θ| < 1e-6 falls back to
 * lerp; t ≤ 0 returns a copy of a, t ≥ 1 of b.
 */
export function slerp(a: Float32Array, b: Float32Array, t: number): Float32Array {
  if (t <= 0) return a.slice();
  if (t >= 1) return b.slice();
  const { dot, na, nb } = dotAndNorms(a, b);
  const denom = Math.sqrt(na) * Math.sqrt(nb);
  const cos = denom > 0 ? Math.min(1, Math.max(-1, dot / denom)) : 1;
  const theta = Math.acos(cos);
  if (Math.abs(theta) < 1e-6) return lerp(a, b, t);
  const s = Math.sin(theta);
  const w1 = Math.sin((1 - t) * theta) / s;
  const w2 = Math.sin(t * theta) / s;
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = w1 * (a[i] as number) + w2 * (b[i] as number);
  return out;
}

function l2(x: Float32Array): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += (x[i] as number) ** 2;
  return Math.sqrt(s);
}

function weightedSum(tensors: readonly Float32Array[], weights: readonly number[]): Float32Array {
  const out = new Float32Array((tensors[0] as Float32Array).length);
  tensors.forEach((x, k) => {
    const w = weights[k] as number;
    for (let i = 0; i < out.length; i++) out[i] = (out[i] as number) + w * (x[i] as number);
  });
  return out;
}

export interface BlendOptions {
  method: InterpolationMethod;
  normalize: boolean;
}

/** Prompt-embedding blend. A single entry is returned as is (weight ignored, as upstream). */
export function blendEmbeddings(tensors: readonly Float32Array[], weights: readonly number[], o: BlendOptions): Float32Array {
  if (tensors.length === 0) throw new RangeError('blendEmbeddings needs at least one tensor');
  if (tensors.length === 1) return tensors[0] as Float32Array;
  const w = o.normalize ? normalizeWeights(weights) : [...weights];
  if (o.method === 'slerp' && tensors.length === 2) return slerp(tensors[0] as Float32Array, tensors[1] as Float32Array, w[1] as number);
  return weightedSum(tensors, w);
}

/**
 * Seed-noise blend. Like the embedding blend, plus: a linear sum of more than one noise with
 * normalisation on is rescaled to the mean L2 norm of the inputs, so the noise keeps unit variance.
 */
export function blendNoise(tensors: readonly Float32Array[], weights: readonly number[], o: BlendOptions): Float32Array {
  if (tensors.length === 0) throw new RangeError('blendNoise needs at least one tensor');
  if (tensors.length === 1) return tensors[0] as Float32Array;
  const w = o.normalize ? normalizeWeights(weights) : [...weights];
  if (o.method === 'slerp' && tensors.length === 2) return slerp(tensors[0] as Float32Array, tensors[1] as Float32Array, w[1] as number);
  const out = weightedSum(tensors, w);
  if (o.normalize) {
    const target = tensors.reduce((s, x) => s + l2(x), 0) / tensors.length;
    const n = l2(out);
    if (n > 0) for (let i = 0; i < out.length; i++) out[i] = ((out[i] as number) * target) / n;
  }
  return out;
}
