import { z } from 'zod';
import { boxBlur } from './BoxBlur.ts';
import { defineProcessor } from './Processor.ts';

/** Params of `blur` (Daydream does not publish these; ours). */
export const blurParams = z.object({
  /** Box radius in pixels per pass; 0 = no-op. Default 4. */
  radius: z.number().min(0).max(64).default(4),
  /** Box passes: 1 = box (fastest, ≈8 ms at 512² on the dev VM), 2 = tent, 3 ≈ Gaussian. Default 1. */
  passes: z.number().int().min(1).max(3).default(1),
});

/** Separable box blur; more passes approach a Gaussian. */
export const blur = defineProcessor({
  type: 'blur',
  kind: 'image',
  params: blurParams,
  create: ({ radius, passes }) => ({
    type: 'blur',
    process: (f) =>
      radius < 1 ? f : { width: f.width, height: f.height, ptsMs: f.ptsMs, data: boxBlur(f.data, f.width, f.height, radius, passes) },
    reset: () => {},
  }),
});
