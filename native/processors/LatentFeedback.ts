import { z } from 'zod';
import type { LatentTensor } from '../Frame.ts';
import { defineProcessor } from './Processor.ts';

/**
 * Params of `latent_feedback` (ai-runner doc 2025-11-25): out = (1−s)·input + s·previous,
 * s default 0.15 ("max reasonable 0.4").
 */
export const latentFeedbackParams = z.object({
  feedback_strength: z.number().min(0).max(1).default(0.15),
});

/**
 * Blends the latent with this processor's previous output (a recursive EMA, which is what
 * "feedback" means in both the pre and post positions). The first latent, and any latent whose
 * shape changed, passes through.
 */
export const latentFeedback = defineProcessor({
  type: 'latent_feedback',
  kind: 'latent',
  params: latentFeedbackParams,
  create: ({ feedback_strength: s }) => {
    let prev: LatentTensor | null = null;
    return {
      type: 'latent_feedback',
      process: (x) => {
        let out = x;
        if (prev && prev.data.length === x.data.length && s > 0) {
          const a = x.data;
          const b = prev.data;
          const data = new Float32Array(a.length);
          const k = 1 - s;
          for (let i = 0; i < a.length; i++) data[i] = k * (a[i] as number) + s * (b[i] as number);
          out = { data, dims: x.dims };
        }
        prev = out;
        return out;
      },
      reset: () => {
        prev = null;
      },
    };
  },
});
