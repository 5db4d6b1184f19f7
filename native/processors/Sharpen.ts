import { z } from 'zod';
import { boxBlur } from './BoxBlur.ts';
import { defineProcessor } from './Processor.ts';

/** Params of `sharpen` (unsharp mask; ours). */
export const sharpenParams = z.object({
  /** Gain on the high-pass detail: out = in + amount·(in − blur(in)). Default 1.0; 0 = no-op. */
  amount: z.number().min(0).max(10).default(1),
  /** Blur radius of the mask in pixels. Default 2. */
  radius: z.number().int().min(1).max(16).default(2),
});

export const sharpen = defineProcessor({
  type: 'sharpen',
  kind: 'image',
  params: sharpenParams,
  create: ({ amount, radius }) => ({
    type: 'sharpen',
    process: (f) => {
      if (amount === 0) return f;
      const blurred = boxBlur(f.data, f.width, f.height, radius, 1);
      const src = f.data;
      const out = new Uint8Array(src.length);
      for (let i = 0; i < src.length; i++) {
        const s = src[i] as number;
        const v = s + amount * (s - (blurred[i] as number));
        out[i] = v <= 0 ? 0 : v >= 255 ? 255 : (v + 0.5) | 0;
      }
      return { width: f.width, height: f.height, ptsMs: f.ptsMs, data: out };
    },
    reset: () => {},
  }),
});
